"""Every env and every stream runs as it is: `python -m harness env=<name>` and `stream=<name>` need
no other override (but the file of env=jsonl and the dataset of env=dataset; the dataset presets run
on their local copies, since no test reaches the hub), and a task file of any size runs without
choosing a tuning split."""

import json
import sqlite3

import pytest

from harness.agent_run.plan import build_plan
from harness.config import HarnessConfig
from tests import tiers
from tests.conftest import CONF_DIR, compose_config, run_variant
from tests.envs.test_dataset import DATA, PATHS

ENVS = sorted(p.stem for p in (CONF_DIR / "env").glob("*.yaml"))
STREAMS = sorted(p.stem for p in (CONF_DIR / "stream").glob("*.yaml"))


@pytest.fixture
def task_file(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i}", "question": f"What is {i} plus {i}?",
                                        "answer": str(2 * i)}) + "\n" for i in range(20)))
    return path


def default_plan(tmp_path, *overrides):
    return build_plan(HarnessConfig.from_dictconfig(compose_config(*overrides)), tmp_path)


@pytest.mark.parametrize("env", tiers.env_params(ENVS))
def test_every_env_plans_with_no_other_override(env, tmp_path, task_file):
    if env == "scienceworld":
        from envs.scienceworld import requirements

        try:
            requirements()
        except ValueError as missing:
            pytest.skip(str(missing))
    extra = [f"env.path={task_file}"] if env == "jsonl" else []  # a task file has to be named
    if env == "dataset":  # a dataset has to be named: its columns question and answer are the defaults
        extra = [f"env.path={PATHS['gsm8k']}"]
    elif env in PATHS:  # a preset names a hub dataset (no test reaches the hub): on its local copy
        extra = [f"env.path={PATHS[env]}"]
        if env == "bird":
            (tmp_path / "student_club").mkdir()
            with sqlite3.connect(tmp_path / "student_club" / "student_club.sqlite") as connection:
                connection.executescript((DATA / "bird.sql").read_text())
            extra.append(f"env.db_dir={tmp_path}")
    specs = default_plan(tmp_path, f"env={env}", *extra)
    assert len(specs) == 1 and specs[0].tasks
    held_out = {t.task_id for t in specs[0].tuning_tasks}
    assert held_out.isdisjoint(t.task_id for t in specs[0].tasks)


@pytest.mark.parametrize("stream", STREAMS)
def test_every_stream_runs_with_no_other_override(stream):
    run = run_variant(f"stream={stream}", "stream.num_tasks=null")
    episodes = run.rows["episodes"]
    assert len(episodes) == 50 and {e["scenario"] for e in episodes} == {stream}
    if stream == "interleaved":
        assert len({e["family"] for e in episodes[:5]}) == 5


def test_a_twenty_line_task_file_runs_with_a_fifth_held_out(task_file, tmp_path):
    spec = default_plan(tmp_path, "env=jsonl", f"env.path={task_file}")[0]
    assert (len(spec.tasks), len(spec.tuning_tasks)) == (16, 4)
    assert spec.settings["stream.num_tasks"] == 16 and spec.settings["stream.tuning_size"] == 4
    run = run_variant("env=jsonl", f"env.path={task_file}", "stream.num_tasks=null")
    assert len(run.rows["episodes"]) == 16


def test_a_tiny_task_file_holds_nothing_out_and_runs_whole(tmp_path):
    path = tmp_path / "three.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i}", "question": f"Q{i}?", "answer": "a"}) + "\n"
                            for i in range(3)))
    spec = default_plan(tmp_path, "env=jsonl", f"env.path={path}")[0]
    assert (len(spec.tasks), spec.tuning_tasks) == (3, [])


def test_explicit_sizes_are_kept_and_checked(tmp_path, task_file):
    from harness.config import ConfigError

    with pytest.raises(ConfigError, match=r"stream\.num_tasks: 30 exceeds the 16 tasks"):
        default_plan(tmp_path, "env=jsonl", f"env.path={task_file}", "stream.num_tasks=30")
    with pytest.raises(ConfigError, match=r"stream\.tuning_size: 20 leaves none of the 20 tasks"):
        default_plan(tmp_path, "env=jsonl", f"env.path={task_file}", "stream.tuning_size=20")


def test_the_default_run_keeps_its_identity(tmp_path):
    """Filling nulls gives the values the defaults used to spell out, so run ids do not move."""
    spec = default_plan(tmp_path)[0]
    assert (len(spec.tasks), len(spec.tuning_tasks)) == (50, 20)
    assert spec.settings["env.families"] == ["capital"]
