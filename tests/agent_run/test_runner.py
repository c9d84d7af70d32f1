"""The agent-run loop: episodes add up to their calls, failures are recorded, budgets stop runs."""

from collections import defaultdict

from agents.base import BaseAgent
from envs.base import EnvEpisode
from harness.agent_api import Attempt
from harness.agent_run.runner import RunOutcome
from harness.tables.records import MemoryEventRow
from tests.conftest import ListSink, run_variant


class MiswritingAgent(BaseAgent):
    """Writes a memory event with a column its table does not have, on every other task."""

    async def solve(self, episode: EnvEpisode) -> Attempt:
        await self.llm.complete(self.messages_for(episode.observation))
        if self.stream_position % 2:
            self.recorder.emit(MemoryEventRow, event="insert", no_such_column=1)
        episode.step("Paris")
        return Attempt(final_output="Paris", steps=1)


class ExplodingAgent(BaseAgent):
    async def solve(self, episode: EnvEpisode) -> Attempt:
        await self.llm.complete(self.messages_for(episode.observation))
        raise ValueError("agent bug")


def run_one(*overrides: str) -> tuple[RunOutcome, ListSink]:
    run = run_variant(*overrides)
    return run.outcome, run.sink


def test_every_task_yields_one_episode_whose_totals_are_the_sum_of_its_calls():
    outcome, sink = run_one("stream.num_tasks=8", "model.price.input_per_token=0.001")
    episodes, calls = sink.rows["episodes"], sink.rows["llm_calls"]
    assert outcome.episodes == 8 and outcome.stopped_by is None
    assert [e["stream_position"] for e in episodes] == list(range(8))
    by_task = defaultdict(list)
    for call in calls:
        by_task[call["task_id"]].append(call)
    for episode in episodes:
        own = by_task[episode["task_id"]]
        assert episode["n_calls"] == len(own) == 1
        for column in ("prompt_tokens", "completion_tokens", "total_tokens", "cost_usd"):
            assert episode[column] == sum(c[column] for c in own)
        assert episode["cost_usd"] > 0 and episode["latency_s"] > 0


def test_success_is_the_checkers_verdict_on_the_models_answer():
    _, right = run_one("model.scripted.accuracy=1")
    _, wrong = run_one("model.scripted.accuracy=0")
    assert all(e["success"] and e["response"] == e["reference"] for e in right.rows["episodes"])
    assert not any(e["success"] for e in wrong.rows["episodes"])


def test_rows_say_scripted():
    _, sink = run_one()
    rows = sink.rows["episodes"] + sink.rows["llm_calls"]
    assert rows and all(row["model"] == "scripted/oracle" for row in rows)


def test_a_failing_provider_is_recorded_on_each_episode_and_the_run_goes_on():
    outcome, sink = run_one("model.scripted.fail_rate=1", "model.scripted.fail_attempts=99",
                            "model.max_retries=1")
    episodes = sink.rows["episodes"]
    assert outcome.episodes == len(episodes) == 6
    assert all(not e["success"] and "RateLimitError" in e["error"] for e in episodes)
    assert all(c["error"] and c["retries"] == 1 for c in sink.rows["llm_calls"])


def test_an_agent_bug_is_recorded_on_the_episode_with_its_calls():
    _, sink = run_one("variant._target_=tests.agent_run.test_runner.ExplodingAgent", "~variant.max_steps",
                      "~variant.system_prompt")
    assert all(e["error"] == "ValueError: agent bug" and e["n_calls"] == 1 for e in sink.rows["episodes"])
    assert len(sink.rows["llm_calls"]) == 6


def test_a_row_an_agent_makes_wrong_fails_its_own_episode_and_the_run_goes_on():
    outcome, sink = run_one("variant._target_=tests.agent_run.test_runner.MiswritingAgent")
    errors = [e["error"] for e in sink.rows["episodes"]]
    assert outcome.episodes == 6 and all(e is None for e in errors[::2])
    assert all(e.startswith("ValidationError") and "no_such_column" in e for e in errors[1::2])
    assert "memory_events" not in sink.rows  # nothing half-made was written
    assert len(sink.rows["llm_calls"]) == 6  # and every call that was sent has its row
