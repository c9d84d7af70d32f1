"""A DSPy program as an outside agent (examples/outside_agents/dspy_agent.py), run through the CLI on
the scripted model: two agent runs (seeds 0 and 1) at once in one worker process, each with its own
`dspy.LM` on its own run's endpoint and a few-shot memory of its last K rewarded answers."""

from __future__ import annotations

import json
import types
from pathlib import Path

import polars as pl
import pytest

from harness.tables.reading import read_table
from tests import tiers
from tests.processes import QUIET, run_cli

ENTRY = "examples.outside_agents.dspy_agent:DSPyAgent"
K = 2
TASKS = 8
INSTRUCTIONS = "You are a concise assistant. Answer with the answer only, no explanation."


@pytest.fixture(scope="module")
@tiers.starts_processes
def dspy_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("dspy") / "run"
    result = run_cli(*QUIET, "variant=external", f"variant.entry={ENTRY}", f"variant.options={{k:{K}}}",
                     "model=scripted", "embedder=hashing", "cache.enabled=false", f"stream.num_tasks={TASKS}",
                     "seeds=[0,1]", "model.scripted.latency_s=0.05", f"hydra.run.dir={run_dir}", timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def episodes(dspy_run) -> pl.DataFrame:
    return read_table(dspy_run, "episodes").sort("run_id", "stream_position")


def rewarded_before(episodes: pl.DataFrame, run_id: str, position: int) -> list[tuple[str, str]]:
    """(question, answer) of the run's rewarded episodes before `position`, oldest first."""
    done = episodes.filter((pl.col("run_id") == run_id) & (pl.col("stream_position") < position)
                           & pl.col("success"))
    return list(zip(done["question"], done["response"], strict=True))


def test_every_episode_of_both_runs_finishes_without_an_error(episodes):
    assert episodes.height == 2 * TASKS
    assert episodes["run_id"].n_unique() == 2
    assert episodes.filter(pl.col("error").is_not_null()).height == 0, episodes["error"].to_list()


def test_every_dspy_call_reaches_the_endpoint_as_one_act_call_per_task(dspy_run, episodes):
    calls = read_table(dspy_run, "llm_calls")
    assert calls["purpose"].to_list() == ["act"] * episodes.height
    assert (calls["total_tokens"] > 0).all() and (calls["prompt_tokens"] > 0).all()
    assert calls["error"].is_null().all() and not calls["cached"].any()
    assert episodes["n_calls"].to_list() == [1] * episodes.height


def test_each_prompt_is_plain_chat_with_the_last_k_rewarded_answers_of_its_own_run(dspy_run, episodes):
    transcripts = read_table(dspy_run, "transcripts")
    assert transcripts.height == episodes.height
    prompts = {row["episode_id"]: json.loads(row["messages"]) for row in transcripts.iter_rows(named=True)}
    windows = []
    for episode in episodes.iter_rows(named=True):
        demos = rewarded_before(episodes, episode["run_id"], episode["stream_position"])[-K:]
        expected = [{"role": "system", "content": INSTRUCTIONS}]
        for question, answer in demos:
            expected += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        expected.append({"role": "user", "content": episode["question"]})
        sent = [{"role": m["role"], "content": m["content"]} for m in prompts[episode["episode_id"]]]
        assert sent == expected
        windows.append(len(rewarded_before(episodes, episode["run_id"], episode["stream_position"])))
    # Not vacuous: some prompts carry demos, and some runs had more rewarded answers than K to drop.
    assert max(windows) > K and sum(w > 0 for w in windows) >= 4


def test_the_two_runs_were_in_flight_at_the_same_time(episodes):
    spans = episodes.group_by("run_id").agg(pl.col("started_at").min(), pl.col("finished_at").max())
    assert spans["started_at"].max() < spans["finished_at"].min()


def test_the_final_snapshot_keeps_the_demos_the_agent_saved(dspy_run, episodes):
    snapshots = read_table(dspy_run, "snapshots").filter(pl.col("final"))
    assert sorted(snapshots["run_id"]) == sorted(episodes["run_id"].unique())
    for snapshot in snapshots.iter_rows(named=True):
        saved = json.loads((dspy_run / snapshot["path"] / "files" / "demos.json").read_text())
        demos = rewarded_before(episodes, snapshot["run_id"], TASKS)[-K:]
        assert saved == [{"question": q, "answer": a} for q, a in demos] and saved
        assert json.loads((dspy_run / snapshot["path"] / "state.json").read_text())["kept"] == "save"


def test_save_then_load_restores_the_last_k_demos_into_a_fresh_agent(tmp_path):
    from examples.outside_agents.dspy_agent import DSPyAgent

    llm = types.SimpleNamespace(model="scripted/oracle", base_url="http://127.0.0.1:9/v1", api_key="unused")
    agent = DSPyAgent(llm, str(tmp_path), seed=0, k=K)
    task = {"task_id": "t", "family": "f"}
    for i in range(4):
        agent.learn({**task, "question": f"q{i}"}, f"a{i}", {"rewarded": i != 2, "reward": 1.0 * (i != 2)})
    agent.learn({**task, "question": "q4"}, "a4", {"rewarded": False, "reward": 0.0})
    agent.save(str(tmp_path))
    fresh = DSPyAgent(llm, str(tmp_path), seed=0, k=K)
    fresh.load(str(tmp_path))
    assert [(d.question, d.answer) for d in fresh.demos] == [("q1", "a1"), ("q3", "a3")]
    assert fresh.demos[0].inputs().toDict() == {"question": "q1"}
