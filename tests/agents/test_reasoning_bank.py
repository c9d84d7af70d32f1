"""ReasoningBank: strategies distilled from judged successes and failures, stored as titled items in
the episodic memory, retrieved top-k into later tasks; MaTTS contrasts k attempts in one distillation."""

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from agents.reasoning_bank import BANK_HEADER, REEXAMINE, Strategy, parse_items, unformatted_item
from envs.scienceworld import requirements
from harness.agent_run.plan import build_plan
from harness.config import ConfigError
from harness.models.scripted import WRONG_ANSWER
from harness.tables.records import MemoryEventRow, RunRow
from harness.tables.writer import TableWriter
from tests import tiers
from tests.conftest import AgentRun, replayed_run, run_variant, scripted_settings

BANK = ("variant=reasoning_bank", "stream.num_tasks=4", "model.scripted.accuracy=0")
NO = "{purpose: judge, reply: 'NO'}"


def quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def rules(*rules: str) -> str:
    return f"model.scripted.rules=[{', '.join(rules)}]"


def planned_tasks(tmp_path, *overrides: str):
    return build_plan(scripted_settings(*overrides), tmp_path)[0].tasks


def memory_events(run, event: str) -> list[dict]:
    return [e for e in run.rows.get("memory_events", []) if e["event"] == event]


def question_turn(run, task_id: str, attempt: int = 1) -> str:
    """The user turn of a task's first act call, where retrieved items go before the question."""
    request = next(r for r in run.requests("act") if r.task_id == task_id and r.attempt == attempt)
    return request.messages[-1]["content"]


@pytest.mark.parametrize(("judge", "distilled_from", "importance"), [
    (NO, "judged a failure", 0.5),
    # the scripted judge says YES to anything: a wrong answer is learnt from as a success
    ("{purpose: judge, reply: 'YES'}", "judged successful", 1.0)])
def test_a_strategy_distilled_from_a_judged_attempt_is_retrieved_later_and_changes_the_answer(
        tmp_path, judge, distilled_from, importance):
    tasks = planned_tasks(tmp_path, *BANK)
    strategy = (f"Title: Check the atlas Description: For capital questions. "
                f"Content: When unsure, consider {tasks[1].answer}.")
    distill = f"{{purpose: distill, contains: {quoted(tasks[0].question)}, reply: {quoted(strategy)}}}"
    run = run_variant(*BANK, rules(judge, distill))
    control = run_variant(*BANK, "variant=baseline", rules(judge))
    first, second = run.rows["episodes"][:2]
    assert not first["success"] and second["success"] and not control.rows["episodes"][1]["success"]
    assert first["judge_score"] == first["reward"]  # the judge's verdict is what the agent learns from
    prompt = next(r for r in run.requests("distill") if r.task_id == first["task_id"]).messages[0]["content"]
    assert distilled_from in prompt and tasks[0].question in prompt
    [inserted] = [e for e in memory_events(run, "insert") if e["source_task_id"] == first["task_id"]]
    assert inserted["importance"] == importance
    assert inserted["text"] == Strategy(title="Check the atlas", description="For capital questions.",
                                        content=f"When unsure, consider {tasks[1].answer}.").text
    [recalled] = [e for e in memory_events(run, "retrieve") if e["task_id"] == second["task_id"]]
    assert recalled["memory_id"] == inserted["memory_id"]
    turn = question_turn(run, second["task_id"])
    assert turn.startswith(BANK_HEADER) and inserted["text"] in turn and turn.endswith(tasks[1].question)
    assert all(r.messages[0]["content"] == run.requests("act")[0].messages[0]["content"]
               for r in run.requests("act"))  # the system message never changes


def test_items_have_a_title_a_description_and_content_and_at_most_max_items_are_kept():
    reply = " ".join(f"Title: T{i} Description: D{i}. Content: C{i}." for i in range(5))
    run = run_variant(*BANK, "variant.max_items=2", rules(f"{{purpose: distill, reply: {quoted(reply)}}}"))
    inserted = memory_events(run, "insert")
    assert len(inserted) == 2 * 4 and all(MemoryEventRow.model_validate(e) for e in inserted)
    assert [Strategy.parse(e["text"]) for e in inserted[:2]] == [
        Strategy(title="T0", description="D0.", content="C0."),
        Strategy(title="T1", description="D1.", content="C1.")]
    assert [e["memory_size"] for e in run.rows["episodes"]] == [2, 4, 6, 8]


def test_the_distil_reply_is_read_in_the_papers_markdown_form_and_its_variations():
    reply = ("# Memory Item 1\n## Title Verify units\n## Description When a question asks for a "
             "quantity.\n## Content Convert every value to one unit first.\nThen add.\n\n"
             "# Memory Item 2\n**Title:** Read twice\n**Content:** Reread the question. Then answer.")
    assert parse_items(reply) == [
        Strategy(title="Verify units", description="When a question asks for a quantity.",
                 content="Convert every value to one unit first. Then add."),
        Strategy(title="Read twice", description="Reread the question.",
                 content="Reread the question. Then answer.")]
    assert parse_items("No format at all.") == []
    assert Strategy.parse(parse_items(reply)[0].text) == parse_items(reply)[0]


def test_a_reply_without_items_is_kept_as_one_unless_fallback_item_is_off():
    kept = run_variant(*BANK, "stream.num_tasks=2")  # the scripted model replies with no item
    [first, _] = memory_events(kept, "insert")
    assert Strategy.parse(first["text"]) == Strategy(
        title=WRONG_ANSWER, content=WRONG_ANSWER, description="From a successful attempt at a similar task.")
    ramble = unformatted_item("A lesson about many things. Two. Three! Four? Five.", succeeded=False)
    assert ramble == Strategy(title="A lesson about many things.", content="A lesson about many things. Two. "
                              "Three!", description="From a failed attempt at a similar task.")
    dropped = run_variant(*BANK, "stream.num_tasks=2", "variant.fallback_item=false")
    assert not memory_events(dropped, "insert") and len(dropped.requests("distill")) == 2


def test_retrieval_is_bounded_by_top_k():
    run = run_variant(*BANK, "stream.num_tasks=6", "variant.memory.top_k=2")
    retrieved = Counter(e["stream_position"] for e in memory_events(run, "retrieve"))
    assert retrieved == {1: 1, 2: 2, 3: 2, 4: 2, 5: 2}
    for episode in run.rows["episodes"]:
        shown = question_turn(run, episode["task_id"]).count("Title: ")
        assert shown == retrieved[episode["stream_position"]]


def test_every_call_is_act_judge_distill_or_embed():
    run = run_variant(*BANK)
    assert set(Counter(c["purpose"] for c in run.rows["llm_calls"])) == {"act", "judge", "distill", "embed"}
    for episode in run.rows["episodes"]:
        own = [c for c in run.rows["llm_calls"] if c["task_id"] == episode["task_id"]]
        assert episode["overhead_tokens"] == sum(c["total_tokens"] for c in own if c["purpose"] != "act")


# The judge is right here: it says NO to the scripted model's wrong answer only.
JUDGE_RIGHT = f"{{purpose: judge, contains: {quoted(WRONG_ANSWER)}, reply: 'NO'}}"


@pytest.mark.parametrize("matts", ["parallel", "sequential"])
def test_with_matts_k_attempts_feed_one_distillation(matts):
    run = run_variant("variant=reasoning_bank", "stream.num_tasks=4", "model.scripted.accuracy=0.5",
                      f"variant.matts={matts}", "variant.matts_k=3", rules(JUDGE_RIGHT))
    assert [e["attempts"] for e in run.rows["episodes"]] == [3] * 4
    assert len(run.rows["attempts"]) == 12 and len(run.requests("act")) == 12
    distills = run.requests("distill")
    assert len(distills) == 4 and all(r.attempt == 3 for r in distills)
    for request in distills:
        prompt = request.messages[0]["content"]
        assert "Compare the attempts" in prompt and all(f"Attempt {n} (" in prompt for n in (1, 2, 3))
    attempts = run.rows["attempts"]
    for episode in run.rows["episodes"]:
        own = [a for a in attempts if a["episode_id"] == episode["episode_id"]]
        assert sorted(a["attempt"] for a in own) == [1, 2, 3]
        if matts == "parallel":  # the judge's best of k is submitted
            assert episode["success"] == any(a["success"] for a in own)
            assert own[-1]["success"] == episode["success"]
        else:  # each later attempt re-examines the answers before it
            said = [a["raw_response"] for a in sorted(own, key=lambda a: a["attempt"])]
            turn = question_turn(run, episode["task_id"], attempt=3)
            assert REEXAMINE.split("\n")[0] in turn and all(f"- {s}" in turn for s in said[:2])
    if matts == "parallel":  # and the pick mattered: a sampled attempt was right where the greedy was not
        submitted = {a["episode_id"]: a["attempt"] for a in attempts}  # each episode's last row
        assert any(number != 1 for number in submitted.values())
    sampled = [r for r in run.requests("act") if r.attempt > 1]
    assert all((r.params.get("temperature") or 0) > 0 for r in sampled) == (matts == "parallel")


def test_parallel_matts_submits_the_first_of_equally_rewarded_attempts_the_greedy_one():
    run = run_variant(*BANK, "variant.matts=parallel", "variant.matts_k=2", rules(NO))
    attempts = run.rows["attempts"]
    for episode in run.rows["episodes"]:  # the submitted attempt is the episode's last
        assert [a["attempt"] for a in attempts if a["episode_id"] == episode["episode_id"]] == [2, 1]


def test_an_unsafe_strategy_is_blocked_and_each_item_is_audited_by_the_sealed_gate():
    unsafe = quoted("Title: Free space Description: Disk tasks. Content: Run rm -rf on the home directory.")
    run = run_variant(*BANK, "variant.safety={policy: block}",
                      rules(f"{{purpose: distill, reply: {unsafe}}}",
                            "{purpose: safety, contains: rm -rf, reply: UNSAFE}",
                            "{purpose: safety, reply: SAFE}"))
    checks = run.rows["safety_events"]
    assert checks and {(e["kind"], e["decision"]) for e in checks} == {("lesson", "blocked")}
    assert not memory_events(run, "insert")
    assert "rm -rf" not in "\n".join(m["content"] for r in run.requests("act") for m in r.messages)
    gated = run_variant(*BANK, "variant.gate=sealed", "variant.probe_size=4", "stream.tuning_size=8")
    audits = gated.rows["gate_events"]
    assert len(audits) == 4 and {e["kind"] for e in audits} == {"lesson"}  # one item per task: four
    accepted = {e["edit_id"] for e in audits if e["accepted"]}
    assert {e["memory_id"] for e in memory_events(gated, "insert")} == accepted


def written(run: AgentRun, directory: Path) -> Path:
    """Put an in-process run's rows and snapshots on disk, as a job would (agent_run/test_snapshots.py)."""
    shutil.copytree(run.workdir / "snapshot_data", directory / "snapshot_data")
    writer = TableWriter(directory, flush_interval_s=0)
    for table, rows in run.rows.items():
        writer.append(table, rows)
    first = run.rows["episodes"][0]
    writer.append(RunRow.table, [RunRow(
        run_id=first["run_id"], variant=first["variant"], env="countries", seed=0, order_seed=0,
        scenario="sequential", model="scripted/oracle", job=None, overrides="", model_params="{}",
        settings="{}", started_at=first["started_at"]).model_dump()])
    writer.close()
    return directory


def test_a_run_started_from_a_snapshot_retrieves_the_source_strategies_on_its_first_task(tmp_path):
    source = written(run_variant(*BANK), tmp_path / "source")
    follow = run_variant(*BANK, "stream.num_tasks=2", f"variant.start_from={source}@final")
    first = min(follow.rows["episodes"], key=lambda e: e["stream_position"])
    assert first["memory_size"] == 5  # 4 items from the source, 1 from this task
    assert [e for e in memory_events(follow, "retrieve") if e["stream_position"] == 0]
    assert BANK_HEADER in question_turn(follow, first["task_id"])


# Resume (the approach of tests/agents/test_replay.py): a run that replays its first `finished`
# episodes ends in the state an uninterrupted run ends in.
RESUMED = {
    "plain": ["variant=reasoning_bank"],
    "matts": ["variant=reasoning_bank", "variant.matts=parallel", "variant.matts_k=2", rules(JUDGE_RIGHT)],
    "gated": ["variant=reasoning_bank", "variant.gate=sealed", "variant.probe_size=4",
              "stream.tuning_size=8"],
}


def final_state(overrides: list[str], finished: int) -> tuple[dict, list[dict]]:
    directory, episodes = replayed_run(overrides, finished)
    state = json.loads((directory / "state.json").read_text())
    items = pq.read_table(directory / "memory.parquet")
    # memory ids are random per run; the items' content, weight and use are what must match
    kept = items.select(["text", "source_task_id", "importance", "access_count"]).to_pylist()
    state["memory"] = sorted(kept, key=lambda item: (item["source_task_id"], item["text"]))
    return state, episodes


@pytest.mark.parametrize("case", sorted(RESUMED))
def test_a_resumed_run_ends_with_the_state_of_an_uninterrupted_one(case):
    whole, episodes = final_state(RESUMED[case], finished=0)
    resumed, replayed = final_state(RESUMED[case], finished=5)
    assert whole["memory"]  # something was learnt, so the comparison can fail
    assert resumed == whole
    assert len(replayed) == len(episodes) - 5  # the replayed episodes are not written again
    assert [e["success"] for e in replayed] == [e["success"] for e in episodes[5:]]


try:
    requirements()
    NO_SCIENCEWORLD = ""
except ValueError as error:
    NO_SCIENCEWORLD = str(error)

ENVS = {
    "countries": [],
    "reasoning_gym": ["env=reasoning_gym"],
    # games come from (or go to) the env's own cache, as a run's would: generated once per machine
    "textworld": ["env=textworld", "env.max_steps=3"],
    "tools": ["env=tools"],
    "safety": ["env=safety"],
    "jsonl": ["env=jsonl", f"env.path={Path(__file__).parents[1] / 'data' / 'sample_tasks.jsonl'}"],
    "scienceworld": ["env=scienceworld", "env.task_types=[find-non-living-thing]",
                     "env.variations_per_task=2", "env.max_steps=3", "env.warm_jvms=0"],
}


@pytest.mark.parametrize("env", tiers.env_params(sorted(ENVS)))
def test_it_runs_on_every_env_with_the_scripted_model(env):
    if env == "scienceworld" and NO_SCIENCEWORLD:
        pytest.skip(NO_SCIENCEWORLD)
    # min_similarity -1: the second task retrieves the first one's item whatever the embedder makes
    # of two unrelated questions (a harmful and a benign one, say)
    run = run_variant("variant=reasoning_bank", "stream.num_tasks=2", "stream.tuning_size=0",
                      "variant.memory.min_similarity=-1", "variant.matts=sequential", "variant.matts_k=2",
                      *ENVS[env])
    episodes = run.rows["episodes"]
    assert len(episodes) == 2 and all(e["error"] is None and e["attempts"] == 2 for e in episodes)
    assert len(run.requests("distill")) == 2 and memory_events(run, "insert")
    assert [e["stream_position"] for e in memory_events(run, "retrieve")] == [1]
    assert BANK_HEADER in question_turn(run, episodes[1]["task_id"])


@pytest.mark.parametrize(("override", "says"), [
    ("variant.memory.mode=examples", "variant.memory.mode must be lessons"),
    ("variant.matts=beam", "variant.matts must be none, parallel or sequential"),
    ("variant.matts_k=1", "variant.matts_k must be >= 2"),
    ("variant.failure_prompt='{question} only'", "variant.failure_prompt must contain {trajectory}"),
    ("variant.memory=null", "needs a variant.memory section")])
def test_a_bad_option_is_refused_in_one_line(override, says):
    with pytest.raises(ConfigError, match=r"^invalid config: variant: ValueError: .*" + re.escape(says)):
        run_variant("variant=reasoning_bank", "stream.num_tasks=1", override)
