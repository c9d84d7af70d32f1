"""env=dataset and its presets: rows of a dataset become tasks, every row checked before the run; the
presets read local copies with each dataset's real columns (tests/data/datasets/); no network."""

import json
import os
import shutil
import socket
import sqlite3
from pathlib import Path

import pytest

from envs.base import Task
from envs.dataset import DatasetTasks
from envs.scorers import Scorer, Verdict
from harness.agent_run.components import build_environment
from harness.agent_run.plan import build_plan
from harness.config import ConfigError
from tests.conftest import run_variant, scripted_settings
from tests.processes import run_cli

DATA = Path(__file__).resolve().parents[1] / "data" / "datasets"
AIME = f"[{DATA / 'aime_2024.jsonl'},{DATA / 'aime_2025.jsonl'}]"
PATHS = {"gsm8k": str(DATA / "gsm8k.jsonl"), "math500": str(DATA / "math500.jsonl"), "aime": AIME,
         "gpqa_diamond": str(DATA / "gpqa_diamond.csv"), "mmlu_pro": str(DATA / "mmlu_pro.jsonl"),
         "hotpotqa": str(DATA / "hotpotqa.jsonl"), "bird": str(DATA / "bird.json")}
"""Each preset's local copy: the columns of the real dataset, a few rows written by hand."""


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path_factory):
    """The hub is offline, the cache is the test's own, and no socket may reach another machine."""
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path_factory.getbasetemp() / "hf"))
    real_connect = socket.socket.connect

    def local_only(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in ("127.0.0.1", "::1"):
            raise AssertionError(f"a test reached the network: {address}")
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", local_only)


@pytest.fixture(scope="module")
def db_dir(tmp_path_factory) -> Path:
    """BIRD's layout, <db_dir>/<db_id>/<db_id>.sqlite, built from tests/data/datasets/bird.sql."""
    root = tmp_path_factory.mktemp("dev_databases")
    (root / "student_club").mkdir()
    with sqlite3.connect(root / "student_club" / "student_club.sqlite") as connection:
        connection.executescript((DATA / "bird.sql").read_text())
    return root


def preset(name: str, db_dir: Path, *overrides: str) -> list[str]:
    """The preset on its local copy, scored by its own scorer (the paper's)."""
    extra = [f"env.db_dir={db_dir}"] if name == "bird" else []
    return [f"env={name}", f"env.path={PATHS[name]}", *extra, *overrides]


def env_of(*overrides: str) -> DatasetTasks:
    env = build_environment(scripted_settings(*overrides).env.instantiable())
    assert isinstance(env, DatasetTasks)
    return env


def by_id(env: DatasetTasks) -> dict[str, Task]:
    return {t.task_id: t for t in env.tasks()}


# ----- the presets -----

EXPECTED = {
    # preset: (tasks, families, one task id, its answer)
    "gsm8k": (4, {"gsm8k"}, "3", "3,600"),
    "math500": (5, {"Algebra", "Number Theory", "Prealgebra", "Precalculus"}, "test/precalculus/807.json",
                r"\left( 3, \frac{\pi}{2} \right)"),
    "aime": (6, {"aime_2024", "aime_2025"}, "aime_2025:0", "28"),
    "gpqa_diamond": (4, {"Physics", "Chemistry", "Biology"}, "recZ13cwgDQc9CqkA", None),
    "mmlu_pro": (4, {"physics", "economics", "math", "biology"}, "72", "C"),
    "hotpotqa": (3, {"bridge", "comparison"}, "5a8c7595554299585d9e36b6", "no"),
    "bird": (3, {"simple", "moderate", "challenging"}, "1400",
             "SELECT COUNT(*) FROM member AS T1 INNER JOIN major AS T2 ON T1.link_to_major = T2.major_id "
             "WHERE T2.major_name = 'Physics'"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_preset_reads_its_local_copy(name, db_dir):
    count, families, task_id, answer = EXPECTED[name]
    tasks = by_id(env_of(*preset(name, db_dir)))
    assert len(tasks) == count and {t.family for t in tasks.values()} == families
    if answer is not None:
        assert tasks[task_id].answer == answer


def test_the_presets_lay_out_questions_as_their_papers_pose_them(db_dir):
    math = by_id(env_of(*preset("math500", db_dir)))["test/algebra/2046.json"]
    assert math.question.endswith("Enter all the solutions, separated by commas.\n\nPut your final answer "
                                  "within \\boxed{}.") and math.metadata["level"] == 2
    mmlu = by_id(env_of(*preset("mmlu_pro", db_dir)))["70"]
    assert "\n\nA) volt\nB) ampere\nC) ohm\nD) coulomb\n" in mmlu.question and "J) joule" in mmlu.question
    assert mmlu.metadata["choices"][3] == "coulomb" and mmlu.answer == "D" and "shuffle" not in mmlu.metadata
    hotpot = by_id(env_of(*preset("hotpotqa", db_dir)))["5a8b57f25542995d1e6f1371"]
    assert hotpot.question.startswith("Brandenburg Gate: The Brandenburg Gate is an 18th-century monument in "
                                      "Berlin. It stands in the capital of Germany.\nSpree: The Spree")
    assert hotpot.question.endswith("Question: Which river flows through the capital of the country where "
                                    "the Brandenburg Gate stands?\nAnswer with a few words only.")
    bird = by_id(env_of(*preset("bird", db_dir)))["1401"]
    assert bird.question.startswith("CREATE TABLE major (") and "CREATE TABLE income (" in bird.question
    assert "-- External knowledge: paid refers to the amount in income" in bird.question
    assert bird.metadata["db_path"] == str(db_dir / "student_club" / "student_club.sqlite")
    assert bird.metadata["db_id"] == "student_club"


def test_gpqa_shuffles_the_options_by_the_seed_and_the_letter_follows_the_answer(db_dir):
    rows = {row["Record ID"]: row for row in _csv_rows(DATA / "gpqa_diamond.csv")}
    orders = {}
    env = env_of(*preset("gpqa_diamond", db_dir))
    assert all("shuffle" not in t.metadata for t in env.tasks())  # the pool keeps the dataset's order
    for seed in (0, 1, 2):
        for task in (env.task_for_seed(t, seed) for t in env.tasks()):
            choices, shuffle = task.metadata["choices"], task.metadata["shuffle"]
            original = [rows[task.task_id][c] for c in ("Correct Answer", "Incorrect Answer 1",
                                                        "Incorrect Answer 2", "Incorrect Answer 3")]
            assert choices == [original[i] for i in shuffle["order"]] and shuffle["seed"] == seed
            assert choices["ABCD".index(task.answer)] == rows[task.task_id]["Correct Answer"]
            assert f"{task.answer}) {rows[task.task_id]['Correct Answer']}" in task.question
            orders.setdefault(task.task_id, set()).add(tuple(shuffle["order"]))
    assert any(len(seen) > 1 for seen in orders.values())  # another seed, another order
    once, again = ([e.task_for_seed(t, 1) for t in e.tasks()] for e in (env, env_of(*preset("gpqa_diamond",
                                                                                        db_dir))))
    assert [t.metadata["shuffle"] for t in once] == [t.metadata["shuffle"] for t in again]


def test_each_seed_of_one_job_shows_the_options_in_its_own_order(tmp_path, db_dir):
    """`seeds=[0,1,2]` in one job: each agent run's stream (and tuning split) is shuffled by its own
    seed, as three jobs with one seed each would be."""
    together = build_plan(scripted_settings(*preset("gpqa_diamond", db_dir), "seed=0", "seeds=[0,1,2]",
                                            "stream.num_tasks=3", "stream.tuning_size=1"), tmp_path)
    for spec in together:
        alone = build_plan(scripted_settings(*preset("gpqa_diamond", db_dir), f"seed={spec.seed}",
                                             "stream.num_tasks=3", "stream.tuning_size=1"), tmp_path)[0]
        assert spec.tasks == alone.tasks and spec.tuning_tasks == alone.tuning_tasks
        assert {t.metadata["shuffle"]["seed"] for t in spec.tasks + spec.tuning_tasks} == {spec.seed}
    by_task = {}
    for spec in together:
        for task in spec.tasks:
            by_task.setdefault(task.task_id, set()).add(tuple(task.metadata["shuffle"]["order"]))
    assert any(len(orders) > 1 for orders in by_task.values())


def _csv_rows(path: Path) -> list[dict[str, str]]:
    import csv

    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_preset_runs_end_to_end_on_the_scripted_model_with_its_papers_scorer(name, db_dir):
    """Right replies (the reference, as the scripted model gives them) succeed; wrong ones fail."""
    count = EXPECTED[name][0]
    run = run_variant(*preset(name, db_dir), f"stream.num_tasks={count}", "stream.tuning_size=0",
                      "model.scripted.accuracy=1")
    episodes = run.rows["episodes"]
    assert len(episodes) == count and all(e["success"] for e in episodes)
    assert {e["family"] for e in episodes} == EXPECTED[name][1]
    assert all(a["score_reason"] for a in run.rows["attempts"])
    wrong = run_variant(*preset(name, db_dir), f"stream.num_tasks={count}", "stream.tuning_size=0",
                        "model.scripted.accuracy=0")
    # "I am not sure.", unless the answer is a word of the prompt: "A" and "no" are in the system
    # prompt, which the scripted model counts as an example it learns from
    assert sum(e["success"] for e in wrong.rows["episodes"]) < count


# ----- env=dataset's options -----

def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_parquet_a_directory_of_splits_and_a_tuning_split(tmp_path):
    import datasets

    rows = [json.loads(line) for line in (DATA / "gsm8k.jsonl").read_text().splitlines()]
    copy = tmp_path / "copy"
    copy.mkdir()
    datasets.Dataset.from_list(rows[:3]).to_parquet(str(copy / "test-00000-of-00001.parquet"))
    datasets.Dataset.from_list(rows[3:]).to_parquet(str(copy / "train-00000-of-00001.parquet"))
    regex = {"answer_regex": r"####\s*(.+)$"}
    single = DatasetTasks(path=str(copy / "test-00000-of-00001.parquet"), fields=regex)
    assert [t.answer for t in single.tasks()] == ["36", "110", "330"]
    env = DatasetTasks(path=str(copy), split="test", fields=regex, tuning_split="train")
    assert [t.answer for t in env.tasks()] == ["36", "110", "330"]
    assert [(t.task_id, t.answer) for t in env.tuning_tasks()] == [("tuning:0", "3,600")]
    with pytest.raises(ValueError, match=r"^env.path: copy\[validation\]: .*validation"):
        DatasetTasks(path=str(copy), split="validation", fields=regex)


def test_a_tuning_file_filter_limit_aliases_and_list_answers(tmp_path):
    rows = [{"q": f"Question {i}?", "a": [f"answer {i}", f"alias {i}"], "k": i % 2, "more": ["x", ""]}
            for i in range(6)]
    main = write_jsonl(tmp_path / "main.jsonl", rows)
    tune = write_jsonl(tmp_path / "tune.jsonl", [{**rows[1], "q": "Another?"}])
    env = DatasetTasks(path=str(main), fields={"question": "{q}", "answer": "a", "aliases": "more"},
                       filter={"k": 1}, limit=2, tuning_path=str(tune))
    assert [(t.task_id, t.answer, t.aliases) for t in env.tasks()] == [
        ("1", "answer 1", ("alias 1", "x")), ("3", "answer 3", ("alias 3", "x"))]
    assert [t.task_id for t in env.tuning_tasks()] == ["tuning:0"]
    assert len(DatasetTasks(path=str(main), fields={"question": "{q}", "answer": "a"},
                            filter={"k": [0, 1]}).tasks()) == 6


def warm_cache(cache: Path, monkeypatch) -> None:
    """What `load_dataset("acme/tiny")` leaves in the cache on a machine that had the network."""
    import datasets
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    datasets.load_dataset("json", data_files={"test": str(DATA / "gsm8k.jsonl")})
    prepared = cache / "acme___tiny"
    prepared.mkdir()
    shutil.move(next((cache / "json").iterdir()), prepared / "default")
    for file in prepared.rglob("json-*"):
        file.rename(file.with_name(file.name.replace("json-", "tiny-", 1)))


def test_a_hub_dataset_in_a_warm_cache_is_read_offline(tmp_path, monkeypatch):
    warm_cache(tmp_path / "cache", monkeypatch)
    settings = scripted_settings("env=dataset", "env.path=acme/tiny", "env.split=test",
                                 "env.fields.answer_regex='####\\s*(.+)$'")
    assert settings.env.kwargs()["path"] == "acme/tiny"  # a hub id is not a path of this machine
    env = build_environment(settings.env.instantiable())
    assert [t.answer for t in env.tasks()] == ["36", "110", "330", "3,600"]
    assert {t.family for t in env.tasks()} == {"tiny"}


@pytest.fixture
def hub_unreachable(monkeypatch):
    """HF_HUB_OFFLINE unset, and the hub's address one where nothing answers (this machine's discard
    port): as a machine without the network that was not told so."""
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")


def test_where_the_hub_cannot_be_reached_a_hub_id_is_read_from_the_cache_at_once(tmp_path, monkeypatch,
                                                                                  hub_unreachable):
    warm_cache(tmp_path / "cache", monkeypatch)
    env = DatasetTasks(path="acme/tiny", split="test", fields={"answer_regex": r"####\s*(.+)$"})
    assert [t.answer for t in env.tasks()] == ["36", "110", "330", "3,600"]
    with pytest.raises(ValueError) as refused:
        DatasetTasks(path="tasks", fields={"answer": "answer"})
    assert str(refused.value) == (
        "env.path: tasks[train]: no local file or directory 'tasks'; as a Hugging Face hub id: Couldn't "
        "reach 'tasks' on the Hub (OfflineModeIsEnabled) (the hub cannot be reached, http://127.0.0.1:9: "
        "[Errno 111] Connection refused: only a dataset already in the Hugging Face cache can be read)")


# ----- bad input: one line naming the row and the field, before the run -----

class NumbersOnly(Scorer):
    """A scorer that reads numeric references only (a stand-in for `math` refusing one)."""

    def score(self, reply: str, task: Task) -> Verdict:
        return Verdict(score=0.0, success=False, response=reply, reason="unused")

    def check_reference(self, task: Task) -> None:
        if not task.answer.replace(",", "").isdigit():
            raise ValueError(f"{task.answer!r} is not a number")


GSM8K = {"path": str(DATA / "gsm8k.jsonl"), "fields": {"answer_regex": r"####\s*(.+)$"}}


@pytest.mark.parametrize("change,message", [
    ({"fields": {"answer": "answr"}}, "gsm8k.jsonl: fields.answer: no column 'answr'; its columns: question, "
                                      "answer"),
    ({"fields": {"question": "Q: {quesiton}"}}, "gsm8k.jsonl: fields.question: no column 'quesiton'"),
    ({"fields": {"question": "Q: {}"}}, "env.fields.question: {} names no column; write {column}"),
    ({"fields": {"question": "{question", "answer_regex": None}}, "env.fields.question: "),
    ({"fields": {"answr": "answer"}}, "env.fields.answr: Extra inputs are not permitted"),
    ({"fields": {"answer_regex": "#### (\\d+)$"}}, "gsm8k.jsonl row 3: answer: answer_regex '#### (\\\\d+)$' "
                                                   "does not match"),
    ({"fields": {"answer_regex": None}}, "gsm8k.jsonl row 0 (id 0): answer: 'In the afternoon"),
    ({"filter": {"question": "nothing"}}, "env.filter: no row of gsm8k.jsonl has {'question': 'nothing'}"),
    ({"order_by": "level"}, "gsm8k.jsonl: env.order_by: no column 'level'"),
    ({"path": "nope.jsonl"}, "env.path: nope.jsonl: no such file or directory"),
    ({"path": "acme/absent"}, "env.path: acme/absent[train]: no local file or directory 'acme/absent'; as a "
                              "Hugging Face hub id: Couldn't reach 'acme/absent' on the Hub "
                              "(OfflineModeIsEnabled) (HF_HUB_OFFLINE is set: only a dataset already in"),
    ({"path": "tasks"}, "env.path: tasks[train]: no local file or directory 'tasks'; as a Hugging Face hub "
                        "id: Couldn't reach 'tasks' on the Hub (OfflineModeIsEnabled) (HF_HUB_OFFLINE"),
    ({"path": None}, "env.path: name a Hugging Face dataset or a local file"),
    ({"limit": 0}, "env.limit: Input should be greater than or equal to 1"),
    ({"tuning_split": "train"}, "env.tuning_split: a single file has no other split"),
])
def test_bad_input_is_one_line_naming_the_row_and_field(change, message):
    options = {**GSM8K, **change, "scorer": "tests.envs.test_dataset:NumbersOnly"}
    options["fields"] = {**GSM8K["fields"], **change.get("fields", {})}
    with pytest.raises(ValueError) as caught:
        DatasetTasks(**options)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_an_empty_split_a_bad_choice_a_duplicate_id_and_a_missing_database(tmp_path, db_dir):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"^env.path: empty.jsonl: no rows \(the file is empty\)$"):
        DatasetTasks(path=str(empty))
    rows = [{"id": "a", "question": "Pick", "options": ["x", "y"], "answer": "z"}]
    with pytest.raises(ValueError, match=r"^c.jsonl row 0: answer: 'z' is neither a letter A-B nor the text"):
        DatasetTasks(path=str(write_jsonl(tmp_path / "c.jsonl", rows)), fields={"choices": "options"})
    with pytest.raises(ValueError, match=r"^d.jsonl row 1: id: 'a' is already used by d.jsonl row 0$"):
        DatasetTasks(path=str(write_jsonl(tmp_path / "d.jsonl", rows * 2)), fields={"id": "id"})
    refused = "^invalid config: env: ValueError: "
    with pytest.raises(ValueError, match=refused + "bird.json row 0: db_id: no database 'student_club' in "):
        env_of(*preset("bird", tmp_path))
    with pytest.raises(ValueError, match=refused + r"env.db_dir: fields.question names \{schema\}: set env"):
        env_of(*preset("bird", db_dir), "env.db_dir=null")


@pytest.mark.slow
def test_a_bad_preset_input_stops_the_cli_before_the_run_with_exit_2():
    result = run_cli(*preset("gsm8k", Path()), "env.fields.answer=solution", "model=scripted",
                     "embedder=hashing", "progress=false", timeout=120,
                     env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: invalid config: env: ValueError: gsm8k.jsonl: fields.answer: no column 'solution'; its "
        "columns: question, answer")


def test_the_run_refuses_a_bad_row_through_the_plan(tmp_path):
    with pytest.raises(ConfigError, match=r"^invalid config: env: ValueError: gsm8k.jsonl row 3: answer: "):
        build_plan(scripted_settings(*preset("gsm8k", tmp_path), "env.fields.answer_regex='####\\s*(\\d+)$'"),
                   tmp_path)


# ----- a stream in a column's order -----

def test_a_stream_ordered_by_a_column_keeps_that_order_whatever_the_seed(tmp_path, db_dir):
    ordered = preset("math500", db_dir, "env.order_by=level", "stream.tuning_size=0")
    levels = {t.task_id: t.metadata["level"] for t in env_of(*ordered).tasks()}
    for seed in (0, 1, 2):
        spec = build_plan(scripted_settings(*ordered, f"seed={seed}", "stream.num_tasks=4"), tmp_path)[0]
        stream = [levels[t.task_id] for t in spec.tasks]
        assert stream == sorted(stream) and len(stream) == 4
    whole = build_plan(scripted_settings(*ordered, "stream.num_tasks=5", "stream.order_seeds=[1,2]"),
                       tmp_path)
    assert [t.task_id for t in whole[0].tasks] == [t.task_id for t in whole[1].tasks]
    shuffled = {tuple(t.task_id for t in build_plan(scripted_settings(
        *preset("math500", db_dir), f"seed={seed}", "stream.num_tasks=5", "stream.tuning_size=0"),
        tmp_path)[0].tasks) for seed in (0, 1, 2)}
    assert len(shuffled) > 1  # without order_by, the seed orders the stream


def test_an_interleaved_ordered_stream_deals_the_families_in_order(tmp_path, db_dir):
    spec = build_plan(scripted_settings(*preset("aime", db_dir), "env.order_by=answer", "stream=interleaved",
                                        "stream.num_tasks=6", "stream.tuning_size=0"), tmp_path)[0]
    # answers are text: "1" (2024) < "15" (2025) < "28" < "370" < "400" < "60"
    assert [t.family for t in spec.tasks] == ["aime_2024", "aime_2025"] * 3
    assert [t.answer for t in spec.tasks if t.family == "aime_2024"] == ["1", "370", "400"]


def test_a_preset_is_an_out_of_distribution_view_as_a_run_composes_it(db_dir):
    from harness.evaluate import ood_env

    settings = scripted_settings("seed=4")
    env = ood_env(settings, f"env=gsm8k env.path={PATHS['gsm8k']}")
    assert env.name == "gsm8k" and env.target == "envs.dataset.DatasetTasks"
    assert env.kwargs()["fields"]["answer_regex"] == r"####\s*(.+)$"
    assert [t.answer for t in build_environment(env.instantiable()).tasks()] == ["36", "110", "330", "3,600"]


def test_a_snapshots_held_out_tasks_show_the_options_in_its_runs_order(tmp_path, db_dir):
    """`harness.evaluate` draws held-out tasks from the pool, which keeps the dataset's order of the
    options (the right one first in GPQA): each must be shown as its run's seed shuffles it."""
    import datetime as dt

    from harness.evaluate import _evaluations
    from harness.tables.records import SnapshotRow
    from harness.tables.writer import TableWriter

    settings = scripted_settings(*preset("gpqa_diamond", db_dir), "seed=0", "seeds=[0,1]",
                                 "stream.num_tasks=2", "stream.tuning_size=0")
    writer = TableWriter(tmp_path, flush_interval_s=0)
    writer.append(SnapshotRow.table, [SnapshotRow(
        run_id=spec.run_id, episode_id=f"{spec.run_id}/1", position=2, final=True,
        path=f"snapshots/{spec.seed}", memory_items=None, memory_version=None, system_prompt="", tools=0,
        created_at=dt.datetime.now(dt.UTC)).model_dump() for spec in build_plan(settings, tmp_path)])
    writer.close()
    specs = _evaluations(settings, tmp_path, tmp_path / "out", ["id"], "final", 2, None)
    assert sorted(spec.seed for spec in specs) == [0, 1]
    for spec in specs:
        assert len(spec.tasks) == 2
        assert all(t.metadata["shuffle"]["seed"] == spec.seed for t in spec.tasks)


# ----- a file `datasets` cannot read: its name, and its line where it has one -----

def test_a_directory_that_mixes_formats_is_refused_naming_its_files(tmp_path):
    """`datasets` reads one format of a directory (here it read the parquet file alone: 1 task of 4
    rows, and no word of the others): the run would be evaluated on a quarter of the data."""
    import datasets

    mixed = tmp_path / "mixed"
    mixed.mkdir()
    write_jsonl(mixed / "a.jsonl", [{"question": "Q1?", "answer": "1"}])
    (mixed / "b.csv").write_text("question,answer\nQ2?,2\n")
    datasets.Dataset.from_list([{"question": "Q3?", "answer": "3"}]).to_parquet(str(mixed / "c.parquet"))
    (mixed / "d.txt").write_text("Q4? 4\n")
    (mixed / "README.md").write_text("# a hub repository's card: not data\n")
    with pytest.raises(ValueError) as caught:
        DatasetTasks(path=str(mixed))
    assert str(caught.value) == (
        "env.path: mixed[train]: the directory mixes data formats (json: a.jsonl; csv: b.csv; parquet: "
        "c.parquet; text: d.txt); `datasets` reads one format of a directory: keep one there, or list the "
        "files in env.path")
    for other in ("b.csv", "c.parquet", "d.txt"):
        (mixed / other).unlink()
    assert [t.answer for t in DatasetTasks(path=str(mixed)).tasks()] == ["1"]


def _zero_row_parquet(path: Path) -> None:
    import pyarrow
    import pyarrow.parquet

    empty = pyarrow.table({"question": pyarrow.array([], pyarrow.string()),
                           "answer": pyarrow.array([], pyarrow.string())})
    pyarrow.parquet.write_table(empty, path)


@pytest.mark.parametrize("name, content, message", [
    ("tasks.jsonl", b'{"question": "Q?", "answer": "1"}\n{"question": oops}\n',
     "env.path: tasks.jsonl line 2: not valid JSON (Expecting value)"),
    ("tasks.json", b'[{"question": "Q?", "answer": "1"},\n {"question": oops}]\n',
     "env.path: tasks.json line 2: not valid JSON (Expecting value)"),
    ("tasks.jsonl", b'{"question": "Q?", "answer": "1"}\n{"question": "\xff", "answer": "2"}\n',
     "env.path: tasks.jsonl line 2: not UTF-8 text (byte 0xff at column 15); save the file as UTF-8"),
    ("tasks.csv", b"question,answer\nQ?,1\n\xffQ?,2\n",
     "env.path: tasks.csv line 3: not UTF-8 text (byte 0xff at column 1); save the file as UTF-8"),
    ("tasks.csv", b"question,answer\n", "env.path: tasks.csv: holds no rows (only a header line)"),
    ("tasks.jsonl", b"\n\n", "env.path: tasks.jsonl: holds no rows (the file is empty)"),
    ("tasks.parquet", None, "env.path: tasks.parquet: holds no rows"),
], ids=["jsonl-not-json", "json-not-json", "jsonl-not-utf8", "csv-not-utf8", "csv-header-only",
        "jsonl-blank-lines", "parquet-zero-rows"])
def test_a_file_datasets_cannot_read_is_one_line_naming_the_file_and_line(tmp_path, name, content, message):
    file = tmp_path / name
    if content is None:
        _zero_row_parquet(file)
    else:
        file.write_bytes(content)
    with pytest.raises(ValueError) as caught:
        DatasetTasks(path=str(file))
    assert str(caught.value) == message
    directory = tmp_path / "copy"
    directory.mkdir()
    file.rename(directory / f"train{file.suffix}")  # the same file in a copy of a hub repository
    with pytest.raises(ValueError) as caught:
        DatasetTasks(path=str(directory))
    assert str(caught.value) == message.replace(name, f"copy/train{file.suffix}")


# ----- references: no text made up, no unbounded check -----

@pytest.mark.parametrize("answer, message", [
    ("NaN", "nan is not a finite number (NaN, Infinity or past 1.8e308); write the reference as text if "
            "that is what it is"),
    ("-Infinity", "-inf is not a finite number"),
    ('{"v": 2}', "a mapping ({'v': 2}), not an answer; take one part of it with a template, e.g. "
                 "fields.answer='{column[key]}'"),
    ('[["a", "b"]]', "a list (['a', 'b']), not an answer"),
], ids=["nan", "infinity", "mapping", "nested-list"])
def test_a_reference_that_is_no_text_is_refused_not_stringified(tmp_path, answer, message):
    file = tmp_path / "refs.jsonl"
    file.write_text(f'{{"question": "Q?", "answer": 1}}\n{{"question": "Q2?", "answer": {answer}}}\n')
    with pytest.raises(ValueError) as caught:
        DatasetTasks(path=str(file))
    assert str(caught.value).startswith(f"refs.jsonl row 1: answer: {message}")


def test_a_number_past_a_float_is_refused_naming_its_line(tmp_path):
    file = tmp_path / "refs.jsonl"
    file.write_text('{"question": "Q?", "answer": 1e309}\n')
    with pytest.raises(ValueError) as caught:
        DatasetTasks(path=str(file))
    assert str(caught.value) == "env.path: refs.jsonl line 1: 1e309 is past what a number may hold, 1.8e308"


def test_an_answer_regex_is_bounded_on_each_reference(tmp_path):
    import time

    file = write_jsonl(tmp_path / "refs.jsonl", [{"question": "Q?", "answer": "a" * 28 + "b"}])
    clock = time.monotonic()
    with pytest.raises(ValueError, match=r"^refs.jsonl row 0: answer: answer_regex '\^\(a\+\)\+\$' does "):
        DatasetTasks(path=str(file), fields={"answer_regex": "^(a+)+$"})
    assert time.monotonic() - clock < 2  # Python's `re`: about 10 s on this answer, 46 s at 30 a's
    write_jsonl(file, [{"question": "Q?", "answer": "x" * 5000}])
    with pytest.raises(ValueError) as caught:
        DatasetTasks(path=str(file), fields={"answer_regex": "(x+x+)+y"})
    assert str(caught.value) == (f"refs.jsonl row 0: answer: answer_regex '(x+x+)+y' took over 1 s on "
                                 f"{'x' * 60!r} (it backtracks without end: simplify it)")


class SlowReferences(Scorer):
    """A scorer that takes a millisecond a reference (math-verify takes about two) and refuses 'bad'."""

    def score(self, reply: str, task: Task) -> Verdict:
        return Verdict(score=0.0, success=False, response=reply, reason="unused")

    def check_reference(self, task: Task) -> None:
        import time

        time.sleep(0.001)
        if task.answer == "bad":
            raise ValueError("unreadable")


def test_a_large_set_with_a_slow_scorer_is_read_in_seconds_and_its_drawn_tasks_still_checked(tmp_path):
    import time

    rows = [{"question": f"Q{i}?", "answer": "bad" if i == 19_999 else str(i)} for i in range(20_000)]
    file = write_jsonl(tmp_path / "big.jsonl", rows)
    clock = time.monotonic()
    env = DatasetTasks(path=str(file), scorer="tests.envs.test_dataset:SlowReferences")
    assert time.monotonic() - clock < 6  # every reference up front: 20 s and more
    tasks = env.tasks()
    assert len(tasks) == 20_000
    assert env.task_for_seed(tasks[5000], 0) is tasks[5000]
    with pytest.raises(ValueError) as caught:
        env.task_for_seed(tasks[-1], 0)  # as the planner draws it, before the run
    assert str(caught.value) == "big.jsonl row 19999 (id 19999): answer: unreadable"
