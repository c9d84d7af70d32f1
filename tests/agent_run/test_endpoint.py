"""The run's OpenAI-compatible endpoint (issue 29, item 1): what the `openai` SDK sends becomes a
call of the run, billed by the URL's purpose, as a native agent's call is; what it cannot take is a
one-line error the SDK raises."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import openai
import pytest

from harness.agent_run.endpoint import HttpEndpoint
from harness.config import BudgetSettings
from harness.models.chat import ToolCall
from harness.models.gateway import Gateway
from harness.models.model_client import BUDGET_EXHAUSTED, AgentModelClient, CallRequest, CallResult
from tests.conftest import scripted_settings

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


class Recording:
    def __init__(self, inner: Any, tool_call: ToolCall | None = None) -> None:
        self.inner, self.tool_call = inner, tool_call
        self.requests: list[CallRequest] = []

    async def call(self, request: CallRequest) -> CallResult:
        self.requests.append(request)
        result = await self.inner.call(request)
        if self.tool_call is not None and request.kind == "chat":
            result = result.model_copy(update={"text": "", "tool_calls": [self.tool_call]})
        return result


def serve(test: Callable[[HttpEndpoint, Recording], Awaitable[None]], budget: BudgetSettings | None = None,
          tool_call: ToolCall | None = None) -> None:
    settings = scripted_settings()
    gateway = Recording(Gateway([settings.model, settings.embedder],
                                answer_key={QUESTION[0]["content"]: "Paris"}), tool_call)
    llm = AgentModelClient(gateway, model=settings.model.name, run_id="run", embedder=settings.embedder.name,
                           budget=budget)
    llm.start_episode("run/0", "task-0")

    async def main() -> None:
        endpoint = await HttpEndpoint(llm).start()
        try:
            await test(endpoint, gateway)
        finally:
            await endpoint.close()

    asyncio.run(main())


def client(endpoint: HttpEndpoint, purpose: str = "act", key: str | None = None) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=endpoint.url(purpose), api_key=key or endpoint.api_key, max_retries=2)


def test_a_call_is_a_call_of_the_run_billed_by_the_url_or_header_purpose():
    async def test(endpoint: HttpEndpoint, gateway: Recording) -> None:
        act = await client(endpoint).chat.completions.create(model="any", messages=QUESTION)
        await client(endpoint, "reflect").chat.completions.create(model="any", messages=QUESTION)
        await client(endpoint).chat.completions.create(model="any", messages=QUESTION,
                                                       extra_headers={"X-Harness-Purpose": "distill"})
        assert act.choices[0].message.content == "Paris" and act.choices[0].finish_reason == "stop"
        records = endpoint.llm.take_records()
        assert [r.purpose for r in records] == ["act", "reflect", "distill"]
        assert all(r.episode_id == "run/0" and r.task_id == "task-0" for r in records)
        assert act.usage.total_tokens == records[0].total_tokens > 0
        assert [r.messages for r in gateway.requests] == [QUESTION] * 3

    serve(test)


def test_parameters_reach_the_model_and_n_choices_are_n_calls_with_their_own_seeds():
    async def test(endpoint: HttpEndpoint, gateway: Recording) -> None:
        reply = await client(endpoint).chat.completions.create(
            model="any", messages=QUESTION, n=3, temperature=0.7, seed=10, max_completion_tokens=20,
            response_format={"type": "text"})
        assert [c.index for c in reply.choices] == [0, 1, 2]
        assert [r.params["seed"] for r in gateway.requests] == [10, 11, 12]
        assert all(r.params["temperature"] == 0.7 and r.params["max_tokens"] == 20
                   and r.params["response_format"] == {"type": "text"} for r in gateway.requests)
        assert reply.usage.total_tokens == sum(r.total_tokens for r in endpoint.llm.take_records())

    serve(test)


def test_a_streamed_answer_is_the_same_answer_with_its_usage_last():
    async def test(endpoint: HttpEndpoint, gateway: Recording) -> None:
        stream = await client(endpoint).chat.completions.create(
            model="any", messages=QUESTION, stream=True, stream_options={"include_usage": True})
        chunks = [chunk async for chunk in stream]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        [record] = endpoint.llm.take_records()
        assert text == "Paris"
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
        assert chunks[-1].usage.total_tokens == record.total_tokens

    serve(test)


def test_tool_calls_come_back_as_the_sdk_reads_them_streamed_or_not():
    call = ToolCall.new("lookup", json.dumps({"country": "France"}))

    async def test(endpoint: HttpEndpoint, gateway: Recording) -> None:
        tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
        reply = await client(endpoint).chat.completions.create(model="any", messages=QUESTION, tools=tools)
        [made] = reply.choices[0].message.tool_calls
        assert (made.id, made.function.name, json.loads(made.function.arguments)) == (
            call.id, "lookup", {"country": "France"})
        assert reply.choices[0].finish_reason == "tool_calls" and gateway.requests[0].params["tools"] == tools
        stream = await client(endpoint).chat.completions.create(model="any", messages=QUESTION, tools=tools,
                                                                stream=True)
        deltas = [c.choices[0].delta for c in [chunk async for chunk in stream] if c.choices]
        [streamed] = [t for d in deltas for t in d.tool_calls or []]
        assert (streamed.id, streamed.function.name) == (call.id, "lookup")

    serve(test, tool_call=call)


def test_embeddings_come_back_as_floats_or_base64_as_the_sdk_asks():
    async def test(endpoint: HttpEndpoint, gateway: Recording) -> None:
        expected = await endpoint.llm.embed(["a", "b"])
        decoded = await client(endpoint).embeddings.create(model="any", input=["a", "b"])  # base64 by default
        floats = await client(endpoint).embeddings.create(model="any", input="a", encoding_format="float")
        for got, want in zip(decoded.data, expected, strict=True):
            assert got.embedding == pytest.approx(want, abs=1e-6)
        assert floats.data[0].embedding == pytest.approx(expected[0])
        assert [r.purpose for r in endpoint.llm.take_records()] == ["embed"] * 3

    serve(test)


def test_a_key_that_is_not_the_runs_is_refused_and_a_rotated_key_stops_working():
    async def test(endpoint: HttpEndpoint, gateway: Recording) -> None:
        with pytest.raises(openai.AuthenticationError, match="does not belong to this agent run"):
            await client(endpoint, key="harness-run-x").chat.completions.create(model="m", messages=QUESTION)
        old = endpoint.api_key
        endpoint.rotate_key()
        with pytest.raises(openai.AuthenticationError):
            await client(endpoint, key=old).chat.completions.create(model="m", messages=QUESTION)
        await client(endpoint).chat.completions.create(model="m", messages=QUESTION)
        assert len(gateway.requests) == 1

    serve(test)


@pytest.mark.parametrize(("body", "message"), [
    ({"model": "m"}, "'messages' must be a non-empty list"),
    ({"model": "m", "messages": [{"content": "hi"}]}, "messages[0] must be an object whose 'role' is one of"),
    ({"model": "m", "messages": QUESTION, "n": 0}, "'n' must be an integer from 1 to 16, got 0"),
    ({"model": "m", "messages": QUESTION, "frobnicate": 1}, "unsupported parameter 'frobnicate'"),
    ({"model": "m", "messages": QUESTION, "seed": "x"}, "'seed' must be an integer, got 'x'"),
], ids=["no messages", "no role", "n=0", "unknown parameter", "seed not an integer"])
def test_a_malformed_request_is_a_400_with_one_line_naming_what_is_wrong(body, message):
    async def test(endpoint: HttpEndpoint, gateway: Recording) -> None:
        headers = {"Authorization": f"Bearer {endpoint.api_key}"}
        async with httpx.AsyncClient() as http:
            answer = await http.post(f"{endpoint.base_url}/chat/completions", headers=headers, json=body)
        assert answer.status_code == 400
        assert message in answer.json()["error"]["message"] and "\n" not in answer.json()["error"]["message"]
        with pytest.raises(openai.BadRequestError, match="unsupported parameter 'frobnicate'"):
            await client(endpoint).chat.completions.create(model="m", messages=QUESTION,
                                                           extra_body={"frobnicate": 1})
        assert gateway.requests == []

    serve(test)


def test_an_unknown_purpose_or_a_body_that_is_not_json_is_a_400():
    async def test(endpoint: HttpEndpoint, gateway: Recording) -> None:
        root = endpoint.base_url.removesuffix("/v1")
        headers = {"Authorization": f"Bearer {endpoint.api_key}"}
        async with httpx.AsyncClient() as http:
            unknown = await http.post(f"{root}/gossip/v1/chat/completions", headers=headers,
                                      json={"messages": QUESTION})
            garbled = await http.post(f"{endpoint.base_url}/chat/completions", headers=headers,
                                      content=b"{nope")
        assert unknown.status_code == 400 and "unknown purpose 'gossip'" in unknown.json()["error"]["message"]
        assert garbled.status_code == 400
        assert garbled.json()["error"]["message"] == "the request body is not JSON"
        assert gateway.requests == []

    serve(test)


def test_a_spent_budget_is_an_error_the_sdk_raises_at_once_and_the_run_is_told():
    async def test(endpoint: HttpEndpoint, gateway: Recording) -> None:
        await client(endpoint).chat.completions.create(model="m", messages=QUESTION)  # spends the budget
        with pytest.raises(openai.RateLimitError) as refused:
            await client(endpoint).chat.completions.create(model="m", messages=QUESTION)
        assert BUDGET_EXHAUSTED in refused.value.message and refused.value.code == "insufficient_quota"
        records = endpoint.llm.take_records()
        assert len(records) == 2 and records[1].error.startswith(BUDGET_EXHAUSTED)  # not retried
        assert len(gateway.requests) == 1
        stop = endpoint.take_stop()
        assert stop is not None and stop.record.call_id == records[1].call_id and endpoint.take_stop() is None

    serve(test, budget=BudgetSettings(max_tokens=5, max_cost_usd=None))


def test_an_outside_process_gets_the_runs_url_and_key_and_none_of_the_harness_secrets(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-value")
    monkeypatch.setenv("MY_DATABASE_PASSWORD", "hunter2hunter2")

    async def test(endpoint: HttpEndpoint, gateway: Recording) -> None:
        environment = endpoint.environment()
        assert "ANTHROPIC_API_KEY" not in environment and "MY_DATABASE_PASSWORD" not in environment
        assert environment["OPENAI_API_KEY"] == environment["HARNESS_API_KEY"] == endpoint.api_key
        assert environment["OPENAI_BASE_URL"] == environment["HARNESS_BASE_URL"] == endpoint.base_url
        assert json.loads(environment["HARNESS_URLS"])["reflect"] == endpoint.url("reflect")
        assert environment["PATH"]

    serve(test)
