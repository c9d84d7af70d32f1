"""The accounting invariant: every call sent has its row, whatever fails around it. For every run,
its ledger equals the sum of its `llm_calls` rows, and every episode's token and cost columns equal
the sum of its own calls."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from harness.errors import one_line
from harness.models.cache import ResponseCache
from harness.models.gateway import Gateway
from harness.models.model_client import AgentModelClient, CallRequest, CallResult, ModelCallError
from harness.tables.records import Usage
from tests.conftest import AgentRun, RecordingGateway, run_variant, scripted_settings


def assert_books_balance(run: AgentRun) -> None:
    calls = run.rows["llm_calls"]
    assert len({c["call_id"] for c in calls}) == len(calls), "a call was written twice"
    by_run: dict[str, Usage] = defaultdict(Usage)
    by_episode: dict[str, Usage] = defaultdict(Usage)
    for c in calls:
        usage = Usage(prompt_tokens=c["prompt_tokens"], completion_tokens=c["completion_tokens"],
                      cost_usd=c["cost_usd"])
        by_run[c["run_id"]] += usage
        by_episode[c["episode_id"]] += usage
    for run_id, written in by_run.items():
        spent = run.outcome.spent
        assert run_id == run.outcome.run_id
        assert (written.total_tokens, written.cost_usd) == (spent.total_tokens, spent.cost_usd)
    unsent = [c for c in calls if (c["error"] or "").startswith("BudgetExhausted")]
    assert len(run.gateway.requests) == len(calls) - len(unsent), "a request was sent and left no row"
    for episode in run.rows["episodes"]:
        mine = by_episode[episode["episode_id"]]
        assert episode["total_tokens"] == mine.total_tokens
        assert episode["n_calls"] == sum(c["episode_id"] == episode["episode_id"] for c in calls)


def test_when_one_of_several_concurrent_calls_fails_the_others_are_still_written():
    # The first call of each question fails (no retries); its k-1 concurrent siblings are answered.
    run = run_variant("variant=best_of_k", "variant.k=4", "stream.num_tasks=5", "model.max_retries=0",
                      "model.scripted.fail_rate=1.0", "model.scripted.fail_attempts=1",
                      "model.scripted.latency_s=0.02")
    calls = run.rows["llm_calls"]
    failed = [c for c in calls if c["error"]]
    answered = [c for c in calls if not c["error"] and c["total_tokens"] > 0]
    assert failed and answered, "the fault was not injected"
    assert len(calls) == 5 * 4
    assert all(e["error"] and "RateLimitError" in e["error"] for e in run.rows["episodes"])
    assert_books_balance(run)


class SlowSecondAnswer(RecordingGateway):
    """The second call of the run is answered (and billed) only after a later call was refused."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.refusal_seen = asyncio.Event()

    async def call(self, request: CallRequest) -> CallResult:
        index = len(self.requests)
        self.requests.append(request)
        if index == 1:
            await self.refusal_seen.wait()
        return await self.inner.call(request)


def test_a_budget_refusal_while_a_sibling_is_in_flight_loses_no_admitted_call():
    settings = scripted_settings("budget.max_tokens=20")
    link = SlowSecondAnswer(Gateway([settings.model, settings.embedder]))
    llm = AgentModelClient(link, model=settings.model.name, run_id="r", budget=settings.budget)
    llm.start_episode("r/0", "t")
    ask = [{"role": "user", "content": "capital of France?"}]

    async def episode() -> str:
        first = asyncio.ensure_future(llm.complete(ask))
        slow = asyncio.ensure_future(llm.complete(ask))  # admitted together with the first
        await first  # billed: the budget is now spent, the second still in flight
        try:
            await llm.complete(ask)
        except ModelCallError as refused:
            link.refusal_seen.set()
            slow.cancel()  # the agent gives up on the sibling: its call must still be recorded
            await llm.settle()
            return refused.record.error
        return "not refused"

    error = asyncio.run(episode())
    calls = llm.take_records()
    assert error.startswith("BudgetExhausted: token budget spent")
    assert [c.error is None for c in calls] == [True, False, True]  # the refusal came before the sibling
    answered = [c for c in calls if c.error is None]
    assert len(answered) == len(link.requests) == 2, "an admitted call lost its row"
    assert llm.ledger.spent.total_tokens == sum(c.total_tokens for c in calls) > 20
    assert llm.ledger.in_flight == 0


def test_a_cache_that_cannot_be_written_costs_reuse_never_the_record(monkeypatch, tmp_path):
    def refuse(self, key, answer):
        raise PermissionError(13, "Permission denied", str(self.directory))

    monkeypatch.setattr(ResponseCache, "put", refuse)
    run = run_variant("stream.num_tasks=4", "cache.enabled=true", f"cache.dir={tmp_path}")
    calls = run.rows["llm_calls"]
    assert len(calls) == 4 and all(c["error"] is None and c["total_tokens"] > 0 for c in calls)
    assert_books_balance(run)


def test_a_gateway_fault_after_sending_is_recorded_not_raised(monkeypatch):
    from harness.models import gateway

    def broken_usage(*args, **kwargs):
        raise ValueError("provider sent a usage block the gateway cannot read")

    monkeypatch.setattr(gateway, "_usage", broken_usage)
    run = run_variant("stream.num_tasks=3")
    calls = run.rows["llm_calls"]
    assert len(calls) == 3
    assert all(c["error"].startswith("GatewayError: ValueError: provider sent") for c in calls)
    assert all(c["cost_usd"] is None for c in calls)  # sent, maybe billed: unknown, never zero
    for episode in run.rows["episodes"]:
        assert "\n" not in episode["error"] and "Traceback" not in episode["error"]


def test_an_agent_error_with_a_traceback_becomes_one_clean_line(monkeypatch):
    from agents.baseline import BaselineAgent

    async def crash(self, episode):
        raise RuntimeError("Traceback (most recent call last):\n  File 'x.py', line 1\n"
                           "\x1b[31mKeyError: 'answer'\x1b[0m\n")

    monkeypatch.setattr(BaselineAgent, "solve", crash)
    run = run_variant("stream.num_tasks=2")
    assert [e["error"] for e in run.rows["episodes"]] == ["RuntimeError: KeyError: 'answer'"] * 2


@pytest.mark.parametrize("text, expected", [
    ("\x1b[36mray::AgentWorker.run()\x1b[39m (pid=1)\nTraceback (most recent call last):\n"
     "  File \"a.py\", line 3, in f\nOSError: [Errno 30] Read-only file system",
     "OSError: [Errno 30] Read-only file system"),
    ("plain   message\nover lines", "plain message over lines"),
])
def test_one_line_strips_escape_codes_and_tracebacks(text, expected):
    assert one_line(text) == expected


def test_one_line_names_the_root_cause_of_a_wrapped_error():
    class Wrapper(Exception):
        def __init__(self, cause):
            super().__init__("\x1b[31mlong remote traceback\x1b[0m\n...")
            self.cause = cause

    wrapped = Wrapper(ConnectionError("model server refused"))
    assert one_line(wrapped) == "ConnectionError: model server refused"
