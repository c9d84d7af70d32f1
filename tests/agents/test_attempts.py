"""Retry, Reflexion, best-of-k and the judge: each changes behaviour for the right reason."""

import asyncio
from collections import Counter

import pytest

from agents.best_of_k import BestOfKAgent
from harness.agent_api import AgentContext
from tests.conftest import run_variant


def test_retry_retries_only_after_failures_and_stops_at_max_attempts():
    run = run_variant("variant=retry", "variant.max_attempts=3", "stream.num_tasks=30")
    for episode in run.rows["episodes"]:
        attempts = [a for a in run.rows["attempts"] if a["task_id"] == episode["task_id"]]
        assert [a["attempt"] for a in attempts] == list(range(1, episode["attempts"] + 1))
        assert all(not a["success"] for a in attempts[:-1])  # no retry after a success
        assert attempts[-1]["success"] or len(attempts) == 3
    assert {e["attempts"] for e in run.rows["episodes"]} >= {1, 3}


def test_retry_resamples_so_a_retry_can_succeed_where_greedy_failed():
    run = run_variant("variant=retry", "stream.num_tasks=30")
    late_wins = [e for e in run.rows["episodes"] if e["success"] and e["attempts"] > 1]
    assert late_wins
    retries = [r for r in run.requests("act") if r.attempt > 1]
    assert all(r.params["temperature"] > 0 for r in retries)
    assert len({r.params["seed"] for r in retries}) > 1


def test_retry_makes_no_overhead_calls():
    run = run_variant("variant=retry", "model.scripted.accuracy=0")
    assert {r.purpose for r in run.gateway.requests} == {"act"}
    assert all(e["overhead_tokens"] == 0 and e["attempts"] == 3 for e in run.rows["episodes"])


def test_reflexion_reflects_after_each_failure_and_carries_the_reflection_into_the_retry():
    run = run_variant("variant=reflexion", "model.scripted.accuracy=0", "stream.num_tasks=3")
    reflections = run.requests("reflect")
    assert len(reflections) == 3 * 2  # three tasks, two failed attempts before the last
    for attempt in run.rows["attempts"]:
        acts = [r for r in run.requests("act")
                if r.task_id == attempt["task_id"] and r.attempt == attempt["attempt"]]
        question_turn = acts[0].messages[-1]["content"]  # reflections go before the question
        if attempt["attempt"] == 1:
            assert attempt["reflection"] is None and "reflections" not in question_turn
        else:
            assert attempt["reflection"] and attempt["reflection"] in question_turn


def test_reflexion_overhead_is_exactly_its_reflect_calls():
    run = run_variant("variant=reflexion", "model.scripted.accuracy=0", "stream.num_tasks=4")
    for episode in run.rows["episodes"]:
        own = [c for c in run.rows["llm_calls"] if c["task_id"] == episode["task_id"]]
        assert episode["overhead_tokens"] == sum(c["total_tokens"] for c in own if c["purpose"] != "act") > 0
        assert episode["act_tokens"] == sum(c["total_tokens"] for c in own if c["purpose"] == "act")
        assert episode["act_tokens"] + episode["overhead_tokens"] == episode["total_tokens"]


def test_reflexion_stops_after_a_success():
    run = run_variant("variant=reflexion", "model.scripted.accuracy=1")
    assert all(e["attempts"] == 1 and e["success"] for e in run.rows["episodes"])
    assert run.requests("reflect") == []


def test_the_judge_never_sees_the_reference_and_its_score_sits_beside_the_truth():
    run = run_variant("variant=baseline", "variant.judge={}", "model.scripted.accuracy=0")
    for request in run.requests("judge"):
        task = next(e for e in run.rows["episodes"] if e["task_id"] == request.task_id)
        assert task["reference"] not in request.messages[-1]["content"]
    episodes = run.rows["episodes"]
    assert all(e["judge_score"] == 1.0 and not e["success"] for e in episodes)  # a lenient self-judge
    assert all(e["reward"] == e["score"] == 0.0 for e in episodes)  # reward_source=truth


@pytest.mark.parametrize("source,retries_expected", [("truth", True), ("judge", False)])
def test_the_reward_source_decides_whether_reflexion_retries(source, retries_expected):
    run = run_variant("variant=reflexion", "variant.judge={}", f"variant.reward_source={source}",
                      "model.scripted.accuracy=0")
    attempts = Counter(e["attempts"] for e in run.rows["episodes"])
    assert (attempts[3] == 6) if retries_expected else (attempts[1] == 6)
    assert all(e["reward"] == (0.0 if source == "truth" else 1.0) for e in run.rows["episodes"])


def test_best_of_k_samples_k_distinct_draws_per_task():
    run = run_variant("variant=best_of_k", "variant.k=5", "stream.num_tasks=10")
    for episode in run.rows["episodes"]:
        acts = [r for r in run.requests("act") if r.task_id == episode["task_id"]]
        assert len(acts) == 5 and len({r.params["seed"] for r in acts}) == 5
        assert all(r.params["temperature"] == 0.7 for r in acts)


def test_best_of_k_submits_the_majority_answer_first_sampled_on_ties():
    agent = BestOfKAgent(AgentContext(llm=None), k=4)
    assert asyncio.run(agent._choose("q", ["Rome", "Paris.", "paris", "Lyon"])) == "Paris."
    assert asyncio.run(agent._choose("q", ["Rome", "Lyon"])) == "Rome"


def test_best_of_k_by_judge_makes_k_judge_calls():
    run = run_variant("variant=best_of_k", "variant.select=judge", "variant.judge={}", "variant.k=3")
    per_task = Counter(r.task_id for r in run.requests("judge"))
    # k to choose, plus one on the submitted answer
    assert set(per_task.values()) == {4}
