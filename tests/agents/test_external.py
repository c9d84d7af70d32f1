"""Outside agents (variant=external, issue 29): measured like native ones, and faults that stay in
their episode (item 4). The agents that misbehave are in tests/agents/outside_fakes.py."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from harness.tables.records import TABLES
from tests.conftest import AgentRun, run_variant

ROOT = Path(__file__).resolve().parents[2]
FAKES = "tests.agents.outside_fakes"
BASELINE = "variant.entry=examples.outside_agents.baseline_agent:BaselineAgent"
PROCESS = f"variant.command=[python,{ROOT / 'tests/agents/outside_fakes.py'}]"
VARYING = {"call_id", "run_id", "episode_id", "variant", "run_in_flight", "path", "memory_id"}


def external(*overrides: str) -> AgentRun:
    return run_variant("variant=external", *overrides)


def frame(run: AgentRun, table: str) -> pl.DataFrame:
    rows = pl.DataFrame(run.rows.get(table, []), infer_schema_length=None)
    rows = rows.drop([c for c in rows.columns if c in VARYING or c.endswith(("_s", "_at"))])
    return rows.sort(rows.columns) if rows.columns else rows


def errors(run: AgentRun) -> list[str | None]:
    return [e["error"] for e in sorted(run.rows["episodes"], key=lambda e: e["stream_position"])]


def task_ids(run: AgentRun, *positions: int) -> list[str]:
    by_position = {e["stream_position"]: e["task_id"] for e in run.rows["episodes"]}
    return [by_position[p] for p in positions]


def learnt_by_the_end(run: AgentRun) -> list[str]:
    """What the fake outside agent had learnt (the task ids), as its final snapshot keeps it."""
    [final] = [s for s in run.rows["snapshots"] if s["final"]]
    return json.loads((run.workdir / final["path"] / "files" / "learnt.json").read_text())


def test_the_baseline_written_as_an_outside_agent_has_the_native_baselines_rows():
    native = run_variant("variant=baseline", "stream.num_tasks=8", "output.transcripts=true")
    outside = external(BASELINE, "stream.num_tasks=8", "output.transcripts=true")
    for table in ("llm_calls", "transcripts", "attempts", "episodes"):
        assert frame(outside, table).equals(frame(native, table)), table
    assert {r["purpose"] for r in outside.rows["llm_calls"]} == {"act"}
    assert 0 < sum(e["success"] for e in outside.rows["episodes"]) < 8


def test_a_start_slower_than_the_timeout_of_a_task_is_no_fault():
    """Building the agent gets at least STARTUP_S (imports can take seconds on a busy machine); its
    tasks are held to variant.timeout_s."""
    run = external(f"variant.entry={FAKES}:Answering", "variant.options={start_s:1.5}", "variant.timeout_s=1",
                   "stream.num_tasks=2")
    assert errors(run) == [None, None]


@pytest.mark.parametrize(("fault", "error"), [
    ("raise", "OutsideAgentError: tests.agents.outside_fakes.Answering.solve raised ValueError: the outside "
              "agent tripped (outside_fakes.py:"),
    ("number", "OutsideAgentError: tests.agents.outside_fakes.Answering's solve returned int, not a string"),
])
def test_an_exception_or_a_wrong_answer_of_outside_code_fails_its_episode_and_the_run_goes_on(fault, error):
    run = external(f"variant.entry={FAKES}:Answering", f"variant.options={{fail_on:2,fault:{fault}}}",
                   "stream.num_tasks=4")
    first, second, *rest = errors(run)
    assert first is None and rest == [None, None]
    assert second.startswith(error) and "\n" not in second
    assert len(run.rows["llm_calls"]) == 3  # the failed task made no call
    assert run.outcome.stopped_by is None and run.outcome.episodes == 4


def test_a_task_over_the_timeout_fails_and_the_agent_is_rebuilt_with_what_it_saved():
    run = external(f"variant.entry={FAKES}:Answering", "variant.options={fail_on:2,fault:hang}",
                   "variant.timeout_s=1", "stream.num_tasks=4")
    assert errors(run) == [None, "OutsideAgentRestarted: the outside agent's solve did not return within "
                                 "variant.timeout_s=1 s", None, None]
    assert learnt_by_the_end(run) == task_ids(run, 0, 2, 3)  # the first, saved and reloaded after the restart


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "error"), [
    ("crash", "exited with code 3 (its stderr ends: about to crash on purpose)"),
    ("garbage", "printed something that is not a JSON object: 'this is not JSON'"),
    ("error", "solve failed: File \"x.py\", line 3, in solve: KeyError: 'question'"),
    ("hang", "the outside agent's solve did not return within variant.timeout_s=2 s"),
])
def test_a_process_that_crashes_prints_garbage_fails_or_hangs_fails_only_that_task(fault, error):
    run = external(PROCESS, f"variant.options={{fail_on:2,fault:{fault}}}", "variant.timeout_s=2",
                   "stream.num_tasks=4")
    first, second, *rest = errors(run)
    assert first is None and rest == [None, None], errors(run)
    assert error in second and "\n" not in second
    assert learnt_by_the_end(run) == task_ids(run, 0, 2, 3)  # a restarted process loaded the last one's save


def test_a_multi_step_outside_agent_acts_through_env_step_and_its_actions_are_rows():
    run = external(f"variant.entry={FAKES}:ToolUser", "env=tools", "stream.num_tasks=4")
    native = run_variant("variant=baseline", "env=tools", "stream.num_tasks=4", "model.function_calling=true")
    assert errors(run) == [None] * 4
    steps = pl.DataFrame(run.rows["steps"])
    assert steps.filter(pl.col("tool").is_not_null()).height > 0
    assert steps.filter(pl.col("tool").is_null())["done"].all()  # the final reply, an action of its own
    assert frame(run, "steps").drop("prompt_tokens", "completion_tokens").equals(
        frame(native, "steps").drop("prompt_tokens", "completion_tokens"))
    assert [e["success"] for e in run.rows["episodes"]] == [e["success"] for e in native.rows["episodes"]]
    calls = pl.DataFrame(run.rows["llm_calls"])
    assert calls["purpose"].unique().to_list() == ["act"] and calls.height == len(native.rows["llm_calls"])


def test_a_single_turn_agent_in_a_multi_step_environment_is_a_one_line_error():
    run = external(BASELINE, "env=tools", "stream.num_tasks=2")
    assert errors(run) == [
        "OutsideAgentError: examples.outside_agents.baseline_agent.BaselineAgent cannot act in a multi-step "
        "environment: it needs solve(task, env) (a process: 'step' among its ops)"] * 2


def test_the_tables_of_an_outside_agent_run_are_the_harness_tables():
    run = external(f"variant.entry={FAKES}:Answering", "stream.num_tasks=2")
    assert set(run.rows) <= set(TABLES)


def test_a_spent_budget_stops_an_outside_agents_run_as_it_stops_a_native_one():
    native = run_variant("variant=baseline", "stream.num_tasks=8", "budget.max_tokens=150")
    outside = external(BASELINE, "stream.num_tasks=8", "budget.max_tokens=150")
    assert outside.outcome.stopped_by is not None and outside.outcome.stopped_by == native.outcome.stopped_by
    assert frame(outside, "episodes").equals(frame(native, "episodes"))
    assert frame(outside, "llm_calls").equals(frame(native, "llm_calls"))
    assert not all(e["attempted"] for e in outside.rows["episodes"])
