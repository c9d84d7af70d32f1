"""The gateway: one record per call with real tokens, retries, limits; failures never raise."""

import asyncio

import litellm
import pytest

from harness.models.gateway import Gateway, _usage
from harness.models.model_client import CallRequest
from harness.models.scripted import WRONG_ANSWER, ScriptedLLM
from tests.conftest import scripted_settings

QUESTION = "What is the capital city of France? Reply with the city name only."
KEY = {QUESTION: "Paris"}


def gateway(*overrides: str) -> Gateway:
    settings = scripted_settings(*overrides)
    return Gateway([settings.model, settings.embedder], answer_key=KEY)


def request(content: str = QUESTION, purpose: str = "act", system: str = "Be brief.") -> CallRequest:
    return CallRequest(model="scripted/oracle", purpose=purpose, run_id="run-1", task_id="capital:FRA",
                       attempt=1, messages=[{"role": "system", "content": system},
                                            {"role": "user", "content": content}])


def complete(gw: Gateway, req: CallRequest):
    return asyncio.run(gw.call(req))


def test_a_call_is_recorded_with_real_token_counts_and_its_attribution():
    req = request(purpose="reflect")
    result = complete(gateway("model.scripted.accuracy=1"), req)
    record = result.record
    assert result.text == "Paris"
    assert record.prompt_tokens == litellm.token_counter(model="gpt-3.5-turbo", messages=req.messages)
    assert record.completion_tokens >= 1
    assert record.total_tokens == record.prompt_tokens + record.completion_tokens
    assert (record.run_id, record.task_id, record.purpose) == ("run-1", "capital:FRA", "reflect")
    assert record.model == "scripted/oracle" and record.usage_source == "provider"
    assert record.error is None and record.retries == 0 and not record.cached


def test_cost_uses_the_configured_price():
    record = complete(gateway("model.price.input_per_token=0.001", "model.price.output_per_token=0.01"),
                      request()).record
    assert record.cost_usd == pytest.approx(record.prompt_tokens * 0.001 + record.completion_tokens * 0.01)


def test_cost_is_unknown_not_zero_when_no_price_is_known():
    assert complete(gateway("model.price=null"), request()).record.cost_usd is None


def test_rate_limits_are_retried_and_counted():
    result = complete(gateway("model.scripted.fail_rate=1", "model.scripted.fail_attempts=2",
                              "model.max_retries=3"), request())
    assert result.record.error is None and result.record.retries == 2 and result.text is not None


def test_a_call_failing_after_all_retries_is_recorded_not_raised():
    result = complete(gateway("model.scripted.fail_rate=1", "model.scripted.fail_attempts=99",
                              "model.max_retries=2"), request())
    assert result.text is None
    assert result.record.retries == 2 and result.record.error.startswith("RateLimitError")
    assert result.record.total_tokens == 0


def test_concurrency_limit_queues_the_extra_calls():
    gw = gateway("model.max_concurrency=2", "model.scripted.latency_s=0.05")

    async def burst():
        return await asyncio.gather(*(gw.call(request(f"q{i}")) for i in range(6)))

    queued = sorted(r.record.queued_s for r in asyncio.run(burst()))
    assert queued[:2] == pytest.approx([0, 0], abs=0.03)
    assert all(q >= 0.04 for q in queued[2:])  # four calls waited for a free slot


def test_usage_is_counted_and_flagged_when_the_provider_reports_none():
    class NoUsage:
        usage = None

    counted = _usage("gpt-3.5-turbo", request(), NoUsage(), "Paris")
    assert counted.usage_source == "counted" and counted.prompt_tokens > 0 and counted.completion_tokens >= 1
    # what the provider would have said of its cache and its reasoning is unknown, not zero
    unknown = (counted.cache_read_tokens, counted.cache_write_tokens, counted.reasoning_tokens)
    assert unknown == (None, None, None)


def test_scripted_model_is_deterministic_and_learns_from_its_prompt():
    never = ScriptedLLM(accuracy=0.0, answer_key=KEY)
    always = ScriptedLLM(accuracy=1.0, answer_key=KEY)
    plain = request().messages
    assert never.reply(plain) == WRONG_ANSWER and always.reply(plain) == "Paris"
    with_lesson = request(system="Lesson: the capital of France is Paris.").messages
    assert never.reply(with_lesson) == "Paris"
    assert never.reply(request("Something else").messages).startswith("Scripted reply")


def embed_request(texts: list[str], model: str) -> CallRequest:
    return CallRequest(kind="embed", model=model, texts=texts, purpose="embed", run_id="run-1",
                       task_id="t", attempt=1)


def test_hashing_embeddings_are_recorded_as_embed_calls():
    gw = gateway()
    result = asyncio.run(gw.call(embed_request(["capital of France", "capital of Spain"], "hashing/384")))
    assert len(result.vectors) == 2 and len(result.vectors[0]) == 384
    assert result.record.purpose == "embed" and result.record.model == "hashing/384"
    assert result.record.prompt_tokens == 6 and result.record.completion_tokens == 0


@pytest.mark.e2e
def test_minilm_embeddings_are_real_batched_and_token_counted():
    settings = scripted_settings("embedder=minilm")
    gw = Gateway([settings.model, settings.embedder])

    async def concurrent():
        texts = [["What is the capital of France?"], ["What is the capital city of Spain?"],
                 ["How many legs does a spider have?"]]
        return await asyncio.gather(*(gw.call(embed_request(t, settings.embedder.name)) for t in texts))

    france, spain, spider = asyncio.run(concurrent())
    vectors = [r.vectors[0] for r in (france, spain, spider)]
    assert all(len(v) == 384 and abs(sum(x * x for x in v) - 1) < 1e-3 for v in vectors)
    cosine = [sum(a * b for a, b in zip(vectors[0], v, strict=True)) for v in vectors[1:]]
    assert cosine[0] > cosine[1] + 0.2  # capitals are closer to each other than to spiders
    assert france.record.model == "local/all-MiniLM-L6-v2" and france.record.prompt_tokens == 9
    assert france.record.usage_source == "provider" and france.record.cost_usd == 0


@pytest.mark.e2e
def test_the_nodes_embedder_service_loads_its_model_when_it_starts_not_on_the_first_request():
    from harness.models.minilm import MiniLMService

    service = MiniLMService()
    service.loaded.join(timeout=300)
    assert service._model is not None  # nothing was asked of it yet
    vectors, tokens = asyncio.run(service.encode(["What is the capital of France?"]))
    assert len(vectors[0]) == 384 and tokens == 9


def test_requests_per_minute_pace_the_sends_and_the_wait_is_queued_time():
    gw = gateway("model.requests_per_minute=600")  # one send every 0.1 s

    async def burst():
        return await asyncio.gather(*(gw.call(request(f"q{i}")) for i in range(5)))

    records = [r.record for r in asyncio.run(burst())]
    # When each was sent (its start, plus its wait): the fifth slot is 0.4 s after the first, however
    # late a loaded machine let each call reach the gate (a late one waits the less for its slot).
    sends = sorted(r.started_at.timestamp() + r.queued_s for r in records)
    assert sends[-1] - sends[0] >= 0.35
    assert min(r.queued_s for r in records) < 0.05  # the first went at once


def test_a_rate_limit_makes_every_caller_of_the_model_back_off_together():
    gw = gateway("model.scripted.fail_rate=1", "model.scripted.fail_attempts=1", "model.max_retries=2",
                 "model.retry_backoff_s=2.0")  # a 1-2 s back-off: long beside a call, even on a busy machine

    async def burst():
        await gw.call(request("warm-up"))  # a process's first send pays litellm's lazy imports
        return await asyncio.gather(*(gw.call(request(f"q{i}")) for i in range(4)))

    records = [r.record for r in asyncio.run(burst())]
    assert all(r.error is None and r.retries == 1 for r in records)
    assert all(r.queued_s >= 0.95 for r in records)  # each waited out the shared back-off
    assert all(r.latency_s < 0.9 for r in records)  # and that wait is not counted as work
