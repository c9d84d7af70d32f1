"""The wire server speaks OpenAI's, Anthropic's and Gemini's formats well enough that litellm 1.110.2,
pointed at it with `api_base`, reads its usage reports: cache reads and writes, reasoning tokens, and
dollar costs at the cache prices. Every call goes through litellm, as the gateway's would."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import litellm  # conftest imports harness first, which sets LITELLM_LOCAL_MODEL_COST_MAP=True
import pytest

from harness.models.wire_server import WireServer, tokens

SYSTEM = " ".join(f"rule{i}" for i in range(40))  # 40 tokens


@pytest.fixture
def server() -> Iterator[WireServer]:
    with WireServer(cache_block=16, cache_min_tokens=8) as server:
        yield server


def _ask(server: WireServer, model: str, question: str, *, marked: bool = False, **kwargs: object):
    provider = model.split("/")[0]
    base = {"openai": server.openai_base, "anthropic": server.anthropic_base, "gemini": server.gemini_base}
    system: dict = {"type": "text", "text": SYSTEM}
    if marked:
        system["cache_control"] = {"type": "ephemeral"}
    messages = [{"role": "system", "content": [system]}, {"role": "user", "content": question}]
    if provider == "anthropic":
        kwargs.setdefault("max_tokens", 2048)
    return litellm.completion(model=model, messages=messages, api_base=base[provider], api_key="test",
                              num_retries=0, **kwargs)


def _price(model: str) -> dict[str, float]:
    return litellm.model_cost[model]


def test_tokens_are_word_runs_and_single_other_characters():
    assert tokens("What is 2+2?") == ["What", "is", "2", "+", "2", "?"]
    assert len(tokens(SYSTEM)) == 40


# --- OpenAI -------------------------------------------------------------------------------------


def test_openai_prefix_cache_reaches_litellm_as_cached_tokens_billed_at_the_cache_price(server):
    first = _ask(server, "openai/gpt-5-mini", "first question")
    second = _ask(server, "openai/gpt-5-mini", "second question")
    # prompt: "system" + 40 words + "user" + 2 words = 44; common prefix 42, in blocks of 16: 32
    assert first.usage.prompt_tokens == second.usage.prompt_tokens == 44
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens == 32
    # a reasoning model's reasoning tokens are inside completion_tokens, as OpenAI reports them
    assert second.usage.completion_tokens_details.reasoning_tokens == 64
    assert second.usage.completion_tokens == 64 + 1 and second.choices[0].message.content == "Paris"
    price = _price("gpt-5-mini")
    expected = (12 * price["input_cost_per_token"] + 32 * price["cache_read_input_token_cost"]
                + 65 * price["output_cost_per_token"])
    assert litellm.completion_cost(completion_response=second) == pytest.approx(expected, rel=1e-9)
    assert litellm.completion_cost(completion_response=first) == pytest.approx(
        44 * price["input_cost_per_token"] + 65 * price["output_cost_per_token"], rel=1e-9)


def test_openai_caches_nothing_below_its_minimum_and_keeps_models_apart():
    with WireServer(cache_block=16, cache_min_tokens=64) as server:
        _ask(server, "openai/gpt-5-mini", "first question")
        again = _ask(server, "openai/gpt-5-mini", "first question")  # 44 identical tokens < 64
        other = _ask(server, "openai/gpt-4o-mini", "first question")
    assert again.usage.prompt_tokens_details.cached_tokens == 0
    assert other.usage.prompt_tokens_details.cached_tokens == 0
    assert other.usage.completion_tokens_details.reasoning_tokens == 0 and other.usage.completion_tokens == 1


def test_litellm_refuses_temperature_zero_for_gpt5_mini_itself_and_the_server_refuses_it_too(server):
    with pytest.raises(litellm.UnsupportedParamsError):  # litellm's own check: nothing is sent
        _ask(server, "openai/gpt-5-mini", "q", temperature=0.0)
    assert server.requests == []
    _ask(server, "openai/gpt-5-mini", "q", temperature=0.0, drop_params=True)  # dropped silently
    assert "temperature" not in server.requests[-1]["body"]
    # sent anyway: the server's 400 (UnsupportedParamsError is a BadRequestError too: match its words)
    with pytest.raises(litellm.BadRequestError, match=r"Only the default \(1\) value") as refused:
        _ask(server, "openai/gpt-5-mini", "q", extra_body={"temperature": 0.0})
    assert refused.value.status_code == 400 and not isinstance(refused.value, litellm.UnsupportedParamsError)
    assert server.requests[-1]["body"]["temperature"] == 0.0
    _ask(server, "openai/gpt-4o-mini", "q", temperature=0.0)  # a non-reasoning model takes it
    assert server.requests[-1]["body"]["temperature"] == 0.0


@pytest.mark.parametrize("model", ["openai/gpt-5-mini", "openai/o4-mini"])
def test_litellm_sends_max_tokens_to_reasoning_models_as_max_completion_tokens(server, model):
    _ask(server, model, "q", max_tokens=50, reasoning_effort="low")
    body = server.requests[-1]["body"]
    assert body["max_completion_tokens"] == 50 and "max_tokens" not in body
    assert body["reasoning_effort"] == "low"
    with pytest.raises(litellm.BadRequestError, match="Use 'max_completion_tokens' instead"):
        _ask(server, model, "q", extra_body={"max_tokens": 50})


# --- Anthropic ----------------------------------------------------------------------------------


def test_anthropic_writes_then_reads_the_marked_prefix_and_litellm_bills_both_prices(server):
    first = _ask(server, "anthropic/claude-sonnet-4-5", "first question", marked=True)
    second = _ask(server, "anthropic/claude-sonnet-4-5", "second question", marked=True)
    # cacheable: the 40 system tokens (up to the marked block); then "user" + 2 words = 3
    assert first.usage.cache_creation_input_tokens == 40 and first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_creation_input_tokens == 0 and second.usage.cache_read_input_tokens == 40
    assert second.usage.prompt_tokens_details.cached_tokens == 40
    assert first.usage.prompt_tokens_details.cache_creation_tokens == 40
    # litellm's prompt_tokens = input_tokens (3) + cache reads + cache writes
    assert first.usage.prompt_tokens == second.usage.prompt_tokens == 43
    assert server.requests[0]["path"] == "/v1/messages"
    assert server.requests[0]["body"]["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert server.requests[0]["headers"]["anthropic-version"] == "2023-06-01"
    price = _price("claude-sonnet-4-5")
    out = first.usage.completion_tokens * price["output_cost_per_token"]
    assert litellm.completion_cost(completion_response=first) == pytest.approx(
        3 * price["input_cost_per_token"] + 40 * price["cache_creation_input_token_cost"] + out, rel=1e-9)
    assert litellm.completion_cost(completion_response=second) == pytest.approx(
        3 * price["input_cost_per_token"] + 40 * price["cache_read_input_token_cost"] + out, rel=1e-9)


def test_anthropic_caches_nothing_without_a_marker(server):
    _ask(server, "anthropic/claude-sonnet-4-5", "same question")
    again = _ask(server, "anthropic/claude-sonnet-4-5", "same question")
    assert again.usage.cache_read_input_tokens == 0 and again.usage.cache_creation_input_tokens == 0
    assert again.usage.prompt_tokens == 43


def test_anthropic_reads_the_longest_prefix_seen_and_writes_the_rest_up_to_the_last_marker(server):
    def turn(question: str):
        messages = [{"role": "system", "content": [{"type": "text", "text": SYSTEM,
                                                    "cache_control": {"type": "ephemeral"}}]},
                    {"role": "user", "content": [{"type": "text", "text": question,
                                                  "cache_control": {"type": "ephemeral"}}]}]
        return litellm.completion(model="anthropic/claude-sonnet-4-5", messages=messages, max_tokens=100,
                                  api_base=server.anthropic_base, api_key="test", num_retries=0)

    turn("first question")
    second = turn("second question")  # system (40) read; "user second question" (3) written
    assert second.usage.cache_read_input_tokens == 40 and second.usage.cache_creation_input_tokens == 3
    assert second.usage.prompt_tokens == 43 and second.usage.prompt_tokens_details.text_tokens == 0


def test_anthropic_thinking_is_a_block_counted_in_output_and_refuses_temperature_zero(server):
    thinking = {"type": "enabled", "budget_tokens": 1024}
    reply = _ask(server, "anthropic/claude-sonnet-4-5", "q", thinking=thinking)
    assert server.requests[-1]["body"]["thinking"] == thinking
    assert reply.choices[0].message.reasoning_content == " ".join(["think"] * 64)
    assert reply.usage.completion_tokens == 64 + 1
    # Anthropic reports no thinking count: litellm estimates it by tokenising the thinking text
    assert reply.usage.completion_tokens_details.reasoning_tokens == 64
    with pytest.raises(litellm.BadRequestError, match="may only be set to 1 when thinking is enabled"):
        _ask(server, "anthropic/claude-sonnet-4-5", "q", temperature=0.0, thinking=thinking)
    assert server.requests[-1]["body"]["temperature"] == 0.0  # litellm passed it on


# --- Gemini -------------------------------------------------------------------------------------


def test_gemini_implicit_cache_and_thoughts_reach_litellm_and_are_billed_at_their_prices(server):
    _ask(server, "gemini/gemini-2.5-flash", "first question")
    second = _ask(server, "gemini/gemini-2.5-flash", "second question")
    assert server.requests[-1]["path"] == "/v1beta/models/gemini-2.5-flash:generateContent"
    # prompt: 40 system words + "user" + 2 words = 43; common prefix 41, in blocks of 16: 32
    assert second.usage.prompt_tokens == 43
    assert second.usage.prompt_tokens_details.cached_tokens == 32 == second.usage.cache_read_input_tokens
    # thoughtsTokenCount is outside candidatesTokenCount; litellm adds it to completion_tokens
    assert second.usage.completion_tokens_details.reasoning_tokens == 64
    assert second.usage.completion_tokens == 65
    price = _price("gemini/gemini-2.5-flash")
    expected = (11 * price["input_cost_per_token"] + 32 * price["cache_read_input_token_cost"]
                + 1 * price["output_cost_per_token"] + 64 * price["output_cost_per_reasoning_token"])
    assert litellm.completion_cost(completion_response=second) == pytest.approx(expected, rel=1e-9)


def test_gemini_thinks_not_at_all_with_a_zero_budget(server):
    reply = _ask(server, "gemini/gemini-2.5-flash", "q", reasoning_effort="disable")
    assert server.requests[-1]["body"]["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 0
    assert reply.usage.completion_tokens == 1 and not reply.usage.completion_tokens_details.reasoning_tokens


def test_gemini_explicit_cache_api_is_not_served_and_litellm_falls_back_to_the_whole_prompt(server):
    long = " ".join(f"w{i}" for i in range(1500))  # over litellm's 1024-token floor for cachedContents
    marked = {"type": "text", "text": long, "cache_control": {"type": "ephemeral"}}
    messages = [{"role": "user", "content": [marked]}, {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "q"}]
    reply = litellm.completion(model="gemini/gemini-2.5-flash", messages=messages,
                               api_base=server.gemini_base, api_key="test", num_retries=0)
    assert [(r["method"], r["path"]) for r in server.requests] == [
        ("GET", "/v1beta/cachedContents"), ("POST", "/v1beta/models/gemini-2.5-flash:generateContent")]
    assert reply.usage.prompt_tokens == 1 + 1500 + 2 + 2  # user + words, model ok, user q


# --- the server itself --------------------------------------------------------------------------


def test_the_log_keeps_every_request_in_order_with_its_keys_redacted(server):
    async def three() -> None:
        await asyncio.gather(*[
            litellm.acompletion(model=model, messages=[{"role": "user", "content": "hi"}], api_base=base,
                                api_key="secret-key", num_retries=0, max_tokens=100)
            for model, base in [("openai/gpt-4o-mini", server.openai_base),
                                ("anthropic/claude-sonnet-4-5", server.anthropic_base),
                                ("gemini/gemini-2.5-flash", server.gemini_base)]])

    asyncio.run(three())
    assert len(server.requests) == 3
    assert "secret-key" not in repr(server.requests)
    assert [r["path"] for r in server.requests].count("/v1/messages") == 1
    for request in server.requests:
        assert [value for name, value in request["headers"].items()
                if name.lower() in ("authorization", "x-api-key", "x-goog-api-key")] == ["<redacted>"]


def test_a_missing_key_is_refused_as_the_provider_would(server):
    async def post(path: str, body: dict) -> int:
        async with aiohttp.ClientSession() as client, client.post(f"{server.anthropic_base}{path}",
                                                                  json=body) as reply:
            return reply.status

    assert asyncio.run(post("/v1/chat/completions", {"model": "gpt-4o", "messages": []})) == 401
    assert asyncio.run(post("/v1/messages", {"model": "claude", "max_tokens": 5, "messages": []})) == 401
    assert asyncio.run(post("/v1beta/models/gemini-2.5-flash:generateContent", {"contents": []})) == 403
