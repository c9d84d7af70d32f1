"""The lean path (harness/models/direct.py) gives the rows litellm gives.

The same calls go through a gateway that sends everything through litellm and one that sends
OpenAI-compatible chat calls itself, each to a fresh `WireServer` (its prefix cache then sees the
same history): every column of every row but the call id, the clocks and the latency is equal, the
replies are equal, and the servers received the same request bodies.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from harness.config import ModelSettings, Price
from harness.models.gateway import Gateway
from harness.models.model_client import CallRequest, CallResult
from harness.models.wire_server import WireServer

CLOCKS = {"call_id", "started_at", "latency_s", "harness_s", "queued_s"}
SYSTEM = "You are a careful assistant. " * 12  # long and repeated: the server's prefix cache reads it
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look a country up.",
                                           "parameters": {"type": "object",
                                                          "properties": {"country": {"type": "string"}}}}}]


def model(name: str, api_base: str, **settings: Any) -> ModelSettings:
    return ModelSettings(**{"name": name, "api_base": api_base, "max_concurrency": 8,
                            "requests_per_minute": None, "max_retries": 2, "retry_backoff_s": 0.0,
                            "timeout_s": 30, "price": None,
                            "params": {}, "function_calling": None, **settings})


def ask(question: str, model_name: str, **params: Any) -> CallRequest:
    return CallRequest(model=model_name, messages=[{"role": "system", "content": SYSTEM},
                                                   {"role": "user", "content": question}],
                       purpose="act", run_id="run", episode_id="e", task_id="t", attempt=1, params=params)


def both_ways(calls: list[tuple[str, CallRequest]], prepare: Any = None,
              **model_settings: Any) -> tuple[list[tuple[CallResult, CallResult]], list[list[dict]]]:
    """Each call through litellm and on the lean path, each way to a server of its own."""
    results: list[list[CallResult]] = []
    bodies: list[list[dict]] = []
    for direct in (False, True):
        with WireServer(cache_block=4, cache_min_tokens=8) as server:
            if prepare is not None:
                prepare(server)
            names = dict.fromkeys(name for name, _ in calls)
            gateway = Gateway([model(name, server.openai_base, **model_settings) for name in names],
                              direct=direct)

            results.append(asyncio.run(call_in_turn(gateway, [request for _, request in calls])))
            bodies.append([r["body"] for r in server.requests])
    return list(zip(*results, strict=True)), bodies


async def call_in_turn(gateway: Gateway, requests: list[CallRequest]) -> list[CallResult]:
    return [await gateway.call(request) for request in requests]


def assert_same(pairs: list[tuple[CallResult, CallResult]]) -> None:
    for through_litellm, direct in pairs:
        assert direct.record.model_dump(exclude=CLOCKS) == through_litellm.record.model_dump(exclude=CLOCKS)
        assert (direct.text, direct.tool_calls, direct.fatal) == (
            through_litellm.text, through_litellm.tool_calls, through_litellm.fatal)


def test_replies_usage_cache_reads_and_dollars_are_litellms():
    calls = [(m, ask(q, m, temperature=0.0, max_tokens=32, seed=i))
             for m in ("openai/gpt-4o-mini", "openai/fake") for i, q in enumerate(["Capital of France?",
                                                                                   "Capital of Peru?"])]
    pairs, bodies = both_ways(calls)
    assert_same(pairs)
    assert bodies[0] == bodies[1]
    assert pairs[1][1].record.cache_read_tokens > 0  # the system prompt came from the server's cache
    assert pairs[1][1].record.cost_usd > 0  # priced by litellm's map
    assert pairs[2][1].record.cost_usd is None  # a model no map knows: unknown, as through litellm


def test_a_reasoning_models_parameters_are_mapped_as_litellm_maps_them():
    calls = [("openai/gpt-5-mini", ask("Capital of Chile?", "openai/gpt-5-mini", max_tokens=64, seed=1))]
    pairs, bodies = both_ways(calls)
    assert_same(pairs)
    assert bodies[0] == bodies[1] and bodies[1][0]["max_completion_tokens"] == 64
    assert pairs[0][1].record.reasoning_tokens > 0


def test_a_configured_price_and_tool_calls():
    def calls_a_tool(server: WireServer) -> None:
        server.tool_call = ("lookup", '{"country": "Peru"}')

    calls = [("openai/local", ask("Capital of Peru?", "openai/local", tools=TOOLS, temperature=0.0))]
    price = Price(input_per_token=1e-6, output_per_token=2e-6)
    pairs, bodies = both_ways(calls, prepare=calls_a_tool, price=price)
    assert_same(pairs)
    assert bodies[0] == bodies[1]
    direct = pairs[0][1]
    assert [(c.name, c.arguments) for c in direct.tool_calls] == [("lookup", '{"country": "Peru"}')]
    assert direct.record.cost_usd == pytest.approx(price.cost(direct.record.prompt_tokens,
                                                              direct.record.completion_tokens, 0, 0))


@pytest.mark.parametrize("statuses", [[429], [500, 503], [429, 429, 429], [400], [401]],
                         ids=["retried once", "retried twice", "out of retries", "bad request", "fatal"])
def test_an_error_reply_is_litellms_error_retried_as_litellm_retries_it(statuses):
    def fails(server: WireServer) -> None:
        server.failures = list(statuses)

    calls = [("openai/gpt-4o-mini", ask("Capital of Peru?", "openai/gpt-4o-mini", temperature=0.0))]
    pairs, bodies = both_ways(calls, prepare=fails)
    assert_same(pairs)
    assert len(bodies[0]) == len(bodies[1])  # as many requests sent either way: nothing sent twice
    record = pairs[0][1].record
    assert record.retries == min(len(statuses), 2) if statuses[0] in (429, 500) else record.retries == 0


def test_a_server_that_is_not_there_is_the_error_litellm_gives_retried_as_it_is():
    settings = model("openai/gpt-4o-mini", "http://127.0.0.1:9/v1")  # nothing listens on port 9
    request = ask("Capital of Peru?", "openai/gpt-4o-mini", temperature=0.0)
    records = [asyncio.run(Gateway([settings], direct=direct).call(request)).record
               for direct in (False, True)]
    assert [r.model_dump(exclude=CLOCKS) for r in records[1:]] == [records[0].model_dump(exclude=CLOCKS)]
    assert records[1].retries == 2 and "Connection error" in records[1].error


def test_calls_litellm_would_send_otherwise_go_through_litellm():
    blocks = CallRequest(model="openai/fake", messages=[{"role": "user", "content": [
        {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}],
        purpose="act", run_id="r", task_id="t", attempt=1)
    gateway = Gateway([])
    assert not gateway.takes_direct("openai/fake", blocks)
    assert not gateway.takes_direct("openai/fake", ask("hi", "openai/fake", extra_headers={"X": "1"}))
    assert not gateway.takes_direct("anthropic/claude-sonnet-4-5", ask("hi", "anthropic/claude-sonnet-4-5"))
    assert gateway.takes_direct("openai/fake", ask("hi", "openai/fake", temperature=0.0, seed=3))


def test_a_reply_slower_than_the_timeout_is_litellms_timeout_retried_as_it_is():
    from harness.bench.fake_chat import FakeChatServer

    with FakeChatServer(latency_s=2.0) as slow:
        settings = model("openai/fake", slow.api_base, timeout_s=0.3, max_retries=1)
        request = ask("Capital of Peru?", "openai/fake", temperature=0.0)
        records = [asyncio.run(Gateway([settings], direct=direct).call(request)).record
                   for direct in (False, True)]
    # The error's text carries a clock too: the seconds litellm saw the replayed request take.
    unclocked = [{**r.model_dump(exclude=CLOCKS), "error": re.sub(r"time taken=[\d.]+", "", r.error or "")}
                 for r in records]
    assert unclocked[1] == unclocked[0]
    assert records[1].retries == 1 and records[1].error.startswith("Timeout")


def test_a_parameter_the_model_refuses_is_litellms_error_and_nothing_is_sent():
    calls = [("openai/gpt-5-mini", ask("Capital of Peru?", "openai/gpt-5-mini", temperature=0.5))]
    pairs, bodies = both_ways(calls)
    assert_same(pairs)
    assert bodies == [[], []]
    assert pairs[0][1].record.error.startswith("UnsupportedParamsError: litellm.UnsupportedParamsError")


@pytest.mark.parametrize("direct", [False, True], ids=["through litellm", "lean path"])
def test_a_reply_with_no_choices_is_recorded_with_what_the_provider_sent(direct):
    sent = {"id": "reply-1", "object": "chat.completion", "model": "fake", "choices": [],
            "usage": {"prompt_tokens": 12, "completion_tokens": 0, "total_tokens": 12}}

    def serves_no_choices(server: WireServer) -> None:
        server.reply_body = sent

    calls = [("openai/fake", ask("Capital of Peru?", "openai/fake", temperature=0.0))]
    pairs, _ = both_ways(calls, prepare=serves_no_choices)
    record = pairs[0][1 if direct else 0].record
    assert record.error is not None and record.error.startswith("the provider's reply holds no message: ")
    assert "IndexError" not in record.error
