"""Budgets: enforced by each run's ledger before sending; a spent run stops and says what it skipped."""

from tests.conftest import run_variant


def test_a_spent_budget_stops_the_run_and_lists_the_tasks_not_attempted():
    run = run_variant("stream.num_tasks=20", "budget.max_tokens=150")
    episodes = run.rows["episodes"]
    attempted = [e for e in episodes if e["attempted"]]
    skipped = [e for e in episodes if not e["attempted"]]
    assert len(episodes) == 20 and attempted and skipped
    assert [e["stream_position"] for e in episodes] == list(range(20))
    assert run.outcome.stopped_by.startswith("token budget spent")
    assert all(e["error"].startswith("not attempted: token budget spent") and e["total_tokens"] == 0
               for e in skipped)
    spent = sum(e["total_tokens"] for e in attempted)
    assert spent >= 150 > spent - attempted[-1]["total_tokens"]


def test_concurrent_calls_overshoot_the_cap_by_at_most_the_calls_in_flight():
    run = run_variant("variant=best_of_k", "variant.k=8", "stream.num_tasks=6", "budget.max_tokens=300")
    calls = run.rows["llm_calls"]
    admitted = [c for c in calls if not (c["error"] or "").startswith("BudgetExhausted")]
    refused = [c for c in calls if (c["error"] or "").startswith("BudgetExhausted")]
    spent = sum(c["total_tokens"] for c in admitted)
    in_flight = max(c["run_in_flight"] for c in admitted)
    assert in_flight >= 1  # the k samples really were in flight together
    assert spent - 300 <= (in_flight + 1) * max(c["total_tokens"] for c in admitted)
    assert all(c["total_tokens"] == 0 for c in refused)
    assert any(not e["attempted"] for e in run.rows["episodes"])


def test_overhead_counts_against_the_budget_too():
    plain = run_variant("stream.num_tasks=20", "budget.max_tokens=400")
    reflective = run_variant("variant=reflexion", "model.scripted.accuracy=0", "stream.num_tasks=20",
                             "budget.max_tokens=400")
    done = [sum(e["attempted"] for e in r.rows["episodes"]) for r in (plain, reflective)]
    assert done[1] < done[0]  # reflecting costs tasks at equal spend


def test_an_agent_cannot_bill_its_calls_as_the_benchmarks_grading():
    import asyncio

    import pytest

    from harness.agent_run.endpoint import BadRequest, check_purpose
    from harness.models.model_client import AgentModelClient

    llm = AgentModelClient(gateway=None, model="scripted/oracle", run_id="r")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="purpose 'grade' is the benchmark's"):
        asyncio.run(llm.complete([{"role": "user", "content": "hi"}], purpose="grade"))
    with pytest.raises(BadRequest, match="unknown purpose 'grade'"):  # nor an outside agent, by its URL
        check_purpose("grade")
    assert llm.take_records() == []
