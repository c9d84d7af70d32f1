"""The gateway: the one door to models; with the rest of harness.models, the only code importing litellm.

Every call is sent through litellm, held to the model's concurrency limit, retried with
exponential backoff on rate limits, timeouts and connection errors, and accounted in one `LLMCall`
record: tokens (the provider's, or counted when it reports none), dollars, latency, retries, error.
A failed call comes back as a record with its error; it never raises into the agent's worker.

litellm is imported where it is first needed (harness/models/lazy_litellm.py), not with this module:
a worker whose calls all go on the lean path (harness/models/direct.py) with the `ParamMap`s its job
brought never imports it. What litellm knows of a model, asked before anything starts, is
harness/models/capabilities.py; what a call cost, harness/models/pricing.py.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import random
import time
import uuid
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any

from harness.clock import utc_now
from harness.config import CacheSettings, EndpointSettings, endpoint_key
from harness.errors import one_line
from harness.models.adapters import AdapterLoads
from harness.models.cache import CachedAnswer, ResponseCache, cacheable, request_key
from harness.models.capabilities import keys_in_environment
from harness.models.chat import ToolCall
from harness.models.direct import DirectChat, ParamMap
from harness.models.direct import as_json as _as_json
from harness.models.lazy_litellm import (
    IN_PROCESS,
    answer_in_process,
    in_process,
    is_litellm_error,
    load_litellm,
)
from harness.models.limits import Limits, LocalLimits
from harness.models.loop_clock import harness_seconds, watch
from harness.models.minilm import MINILM_PREFIX
from harness.models.model_client import CallRequest, CallResult, GatewayUnavailable
from harness.models.pricing import Pricing, tell_litellm_the_price
from harness.tables.records import LLMCall
from harness.text import safe_text

log = logging.getLogger(__name__)

FATAL_ERRORS = ("AuthenticationError:", "PermissionDeniedError:", "NotFoundError:")
"""litellm's errors that say the model cannot be used at all (bad key, no access, no such model), as
a record's error starts: never retried, and they stop the run (harness.models.model_client's
ModelUnavailable)."""
RETRYABLE = ("RateLimitError", "Timeout", "APIConnectionError", "InternalServerError",
             "ServiceUnavailableError")
"""litellm's errors retried with back-off (by name: a litellm error is raised only where it is loaded)."""
MAX_BACKOFF_S = 30.0
LOCAL_API_KEY = "no-key-needed"
NO_ANSWER = CachedAnswer(prompt_tokens=0, completion_tokens=0, usage_source="provider", cost_usd=0.0,
                         cache_read_tokens=0, cache_write_tokens=0, reasoning_tokens=0)


async def direct_completion(model: str, messages: list[dict[str, Any]],
                            provider: tuple[str, Any] | None = None, **params: Any) -> Any:
    """litellm called as a plain script calls it, with nothing of the gateway around it: the bench's
    baseline (harness.bench). `provider`: an in-process provider (prefix, handler) to answer it."""
    litellm = load_litellm()
    if provider is not None:
        answer_in_process(litellm, *provider)
    return await litellm.acompletion(model=model, messages=messages, **params)


class Gateway:
    def __init__(self, models: list[EndpointSettings], local_servers: dict[str, str] | None = None,
                 answer_key: dict[str, str] | None = None, cache: CacheSettings | None = None,
                 limits: Limits | None = None, direct: bool = True) -> None:
        """`local_servers` maps a model name to the api_base of the server the harness started;
        `limits` are the models' concurrency, rate and back-off, shared with the other replicas
        (harness.models.limits); by default this gateway's own. `direct`: send chat calls to
        OpenAI-compatible servers on the lean path (harness/models/direct.py), else all through
        litellm (the same rows either way)."""
        self.endpoints: dict[str, EndpointSettings] = {}
        """Every model served, with its settings, by endpoint key (harness.config.endpoint_key)."""
        self._first_key: dict[str, str] = {}
        self.default_cache = cache
        self._caches: dict[str, ResponseCache] = {}
        self.local_servers: dict[str, str] = {}
        self._keyless: set[str] = set()
        self.limits = limits or LocalLimits()
        self._unwritable: set[Path] = set()
        self.provider_calls = 0
        """Requests sent to providers (retries included); cached answers send none."""
        self._routes: dict[str, str] = {}
        """The litellm model string of each endpoint."""
        self.direct = DirectChat() if direct else None
        self.pricing = Pricing()
        self.in_process: dict[str, Any] = {}
        """The in-process providers this gateway made (`provider`), by prefix."""
        self._embedding_service: Any = None
        self.adapters = AdapterLoads()
        """The LoRA adapters each server has been asked to load (learner runs')."""
        self.register(models, local_servers, answer_key)

    def register(self, models: list[EndpointSettings], local_servers: dict[str, str] | None = None,
                 answer_key: dict[str, str] | None = None,
                 param_maps: Mapping[str, ParamMap] | None = None) -> None:
        """Serve these models too (each model with its settings is an endpoint of its own, so
        two settings of one model never share limits, answers or cache entries). `param_maps`: what
        litellm sends as given for the lean path's models (harness/models/direct.py), by model."""
        self.local_servers.update(local_servers or {})
        if self.direct is not None:
            self.direct.param_maps.update(param_maps or {})
        for m in models:
            key = endpoint_key(m)
            self.endpoints[key] = m
            self._first_key.setdefault(m.name, key)
            prefix = m.name.split("/", 1)[0]
            provider = self.provider(prefix) if prefix in IN_PROCESS else None
            self._routes[key] = provider.route(key, m.name) if provider is not None else m.name
            if provider is not None:
                provider.serve(self._routes[key], m.name, m, answer_key or {})
            if m.api_base and not keys_in_environment(m.name, m.api_base):
                self._keyless.add(key)  # a server of the user's own: it needs no key, the client does
            tell_litellm_the_price(m, self._routes[key])

    def provider(self, prefix: str) -> Any:
        """This gateway's in-process provider of `prefix` (harness/models/providers.py), made and
        registered with litellm (imported now) on first use; the latest gateway's serves the process."""
        if prefix not in self.in_process:
            litellm = load_litellm()
            made = IN_PROCESS[prefix]()
            if self._embedding_service is not None and prefix == MINILM_PREFIX:
                made.use_service(self._embedding_service)
            self.in_process[prefix] = made
            answer_in_process(litellm, prefix, made)
        return self.in_process[prefix]

    def use_embedding_service(self, service: Any) -> None:
        """Encode with the local MiniLM through this `MiniLMService` actor (a Ray handle), the node's."""
        self._embedding_service = service
        if MINILM_PREFIX in self.in_process:
            self.in_process[MINILM_PREFIX].use_service(service)

    def _cache_for(self, request: CallRequest) -> tuple[ResponseCache | None, bool]:
        settings = request.cache or self.default_cache
        if settings is None or not settings.enabled:
            return None, settings.charge if settings is not None else True
        directory = str(settings.dir)
        if directory not in self._caches:
            self._caches[directory] = ResponseCache(directory)
        return self._caches[directory], settings.charge

    async def call(self, request: CallRequest) -> CallResult:
        """Never raises: whatever fails, the caller gets a record (with its error). Budgets are the
        caller's (harness.models.model_client): the gateway keeps no per-run state."""
        started_at = utc_now()
        watch(asyncio.get_running_loop())  # so that a call's own seconds are told from the model's
        key = request.endpoint or self._first_key.get(request.model, "")
        settings = self.endpoints.get(key)
        if settings is None:
            return self._result(request, started_at, NO_ANSWER, 0.0, 0.0, 0.0, 0.0, 0,
                                f"UnknownModel: the gateway serves {sorted(self._first_key)}, not "
                                f"{request.model!r}", cached=False)
        try:
            result = await self._answer(key, settings, request, started_at)
        except GatewayUnavailable:
            raise  # the shared limits are gone: the run stops (and a resume carries on)
        except Exception as error:  # a harness bug after sending: the call may be billed, so record it
            result = self._result(request, started_at, NO_ANSWER, None, 0.0, 0.0, 0.0, 0,
                                  f"GatewayError: {one_line(error)}", cached=False)
        return _with_compute(result, request, getattr(settings, "parameters", None))

    async def _answer(self, key: str, settings: EndpointSettings, request: CallRequest,
                      started_at: dt.datetime) -> CallResult:
        clock = time.perf_counter()
        cache, charge_cached = self._cache_for(request)
        cache_key = request_key(settings, request) if cache is not None and cacheable(request) else None
        hit = cache.get(cache_key) if cache is not None and cache_key is not None else None
        if hit is not None:
            hit = _safe_answer(hit)  # kept by an older harness, or written by hand
            cost = hit.cost_usd if charge_cached else 0.0
            return self._result(request, started_at, hit, cost, time.perf_counter() - clock, 0.0, 0.0, 0,
                                None, cached=True)
        queued = time.perf_counter()
        async with self.limits.permit(key, settings.max_concurrency):
            clock, own = time.perf_counter(), harness_seconds()
            response, retries, error, paced_s = await self._send_with_retries(key, settings, request)
            # The send's wall time, less the pacing (queued_s) and the harness's own seconds in it
            # (harness/models/loop_clock.py): what is left is the model's.
            harness_s = harness_seconds() - own
            latency_s = max(0.0, time.perf_counter() - clock - paced_s - harness_s)
            queued_s = clock - queued + paced_s
        answer = NO_ANSWER
        if response is not None:
            text, vectors, tool_calls = None, None, []
            if request.kind == "embed":
                vectors = [item["embedding"] for item in response.data]
            elif (message := _message(response)) is None:
                text, error = "", f"the provider's reply holds no message: {_what_was_sent(response)}"
            else:
                # A reply is text from outside: made safe here, before it is counted, cached or shown.
                text = safe_text(message.content or "")
                tool_calls = [_safe_call(ToolCall(
                    id=c.id or ToolCall.new("", "", key=f"{request.run_id}/{text}/{i}").id,
                    name=c.function.name or "", arguments=c.function.arguments or ""))
                    for i, c in enumerate(getattr(message, "tool_calls", None) or [])]
            answer = _usage(settings.name, request, response, text, tool_calls)
            answer = answer.model_copy(update={"text": text, "tool_calls": tool_calls, "vectors": vectors,
                                               "cost_usd": self.pricing.cost(settings, response, answer)})
            if cache is not None and cache_key is not None and error is None:
                self._store(cache, cache_key, answer)
        result = self._result(request, started_at, answer, answer.cost_usd, latency_s, harness_s, queued_s,
                              retries, error, cached=False)
        return result.model_copy(update={"fatal": error is not None and error.startswith(FATAL_ERRORS)})

    def _store(self, cache: ResponseCache, key: str, answer: CachedAnswer) -> None:
        """Keep the answer for next time; a cache that cannot be written costs reuse, never the record."""
        try:
            cache.put(key, answer)
        except OSError as error:
            if cache.directory not in self._unwritable:
                self._unwritable.add(cache.directory)
                log.warning("response cache %s cannot be written (%s); answers are not cached",
                            cache.directory, one_line(error))

    @staticmethod
    def _result(request: CallRequest, started_at: dt.datetime, answer: CachedAnswer, cost: float | None,
                latency_s: float, harness_s: float, queued_s: float, retries: int, error: str | None,
                cached: bool) -> CallResult:
        record = LLMCall(
            call_id=uuid.uuid4().hex, run_id=request.run_id, episode_id=request.episode_id,
            task_id=request.task_id, attempt=request.attempt, purpose=request.purpose, model=request.model,
            prompt_tokens=answer.prompt_tokens, completion_tokens=answer.completion_tokens,
            total_tokens=answer.prompt_tokens + answer.completion_tokens,
            cache_read_tokens=answer.cache_read_tokens, cache_write_tokens=answer.cache_write_tokens,
            reasoning_tokens=answer.reasoning_tokens, usage_source=answer.usage_source, cost_usd=cost,
            latency_s=latency_s, harness_s=harness_s, queued_s=queued_s,
            retries=retries, cached=cached, error=error, run_in_flight=request.run_in_flight,
            started_at=started_at)
        return CallResult(text=answer.text, tool_calls=answer.tool_calls, vectors=answer.vectors,
                          record=record)

    def _send(self, key: str, settings: EndpointSettings, request: CallRequest) -> Awaitable[Any]:
        self.provider_calls += 1
        local = self.local_servers.get(settings.name) if settings.api_base is None else None
        endpoint: dict[str, Any] = {
            "model": self._routes[key],
            "api_base": settings.api_base or local,
            # The harness's own server, or the user's, needs no key; the OpenAI client insists on one.
            "api_key": LOCAL_API_KEY if local or key in self._keyless else None,
            "timeout": settings.timeout_s, "num_retries": 0}
        if request.kind == "embed":
            return load_litellm().aembedding(input=request.texts, **endpoint, **request.params)
        if request.adapter is not None and not in_process(settings.name):
            return self._send_adapted(endpoint, settings, request)
        api_key = endpoint["api_key"] or os.environ.get("OPENAI_API_KEY")
        if (self.direct is not None and endpoint["api_base"] and api_key
                and self.takes_direct(endpoint["model"], request)):
            return self.direct.complete(endpoint["model"], endpoint["api_base"], api_key, settings.timeout_s,
                                        request.messages, request.params)
        if in_process(settings.name):  # it may answer by purpose; a remote provider never sees it
            endpoint["metadata"] = {"purpose": request.purpose,
                                    "adapter": request.adapter.path if request.adapter is not None else None}
        return load_litellm().acompletion(messages=request.messages, **endpoint, **request.params)

    async def _send_adapted(self, endpoint: dict[str, Any], settings: EndpointSettings,
                            request: CallRequest) -> Any:
        """A call served with a learner's LoRA adapter: the server (the local llama.cpp server, or a
        vLLM server started with --enable-lora) is asked to load it once, by vLLM's
        `POST /v1/load_lora_adapter`, and the call names it as its model."""
        adapter = request.adapter
        assert adapter is not None
        if not endpoint["api_base"]:
            raise ValueError(f"{settings.name} is served by no server the harness can load a LoRA adapter "
                             "onto (learners need model=smollm2 or a vLLM server's model.api_base)")
        await self.adapters.load(endpoint["api_base"], endpoint["api_key"] or LOCAL_API_KEY, adapter.name,
                                 adapter.path)
        provider = endpoint["model"].split("/", 1)[0]
        served = {**endpoint, "model": f"{provider}/{adapter.name}"}
        api_key = served["api_key"] or os.environ.get("OPENAI_API_KEY")
        if self.direct is not None and api_key and self.takes_direct(served["model"], request):
            return await self.direct.complete(served["model"], served["api_base"], api_key,
                                              settings.timeout_s, request.messages, request.params)
        return await load_litellm().acompletion(messages=request.messages, **served, **request.params)

    def takes_direct(self, route: str, request: CallRequest) -> bool:
        """Whether the call goes on the lean path (harness/models/direct.py), given a server."""
        return (self.direct is not None and request.kind == "chat" and not in_process(route)
                and self.direct.takes(route, request.messages, request.params))

    async def _send_with_retries(self, key: str, settings: EndpointSettings, request: CallRequest
                                 ) -> tuple[Any, int, str | None, float]:
        """The response (or None), retries, the error, and the seconds spent waiting on the pacing
        (requests per minute, shared 429 back-off) rather than working."""
        retries, paced_s = 0, 0.0
        while True:
            paced_s += await self.limits.pace(key, settings.requests_per_minute)
            try:
                return await self._send(key, settings, request), retries, None, paced_s
            except Exception as error:
                if not is_litellm_error(error, RETRYABLE):  # a bad request or a provider bug
                    return None, retries, one_line(error), paced_s
                if retries >= settings.max_retries:
                    return None, retries, one_line(error), paced_s
                retries += 1
                backoff = min(MAX_BACKOFF_S, settings.retry_backoff_s * 2 ** (retries - 1))
                backoff *= 0.5 + random.random() / 2
                if is_litellm_error(error, ("RateLimitError",)):
                    self.limits.back_off(key, backoff)  # every caller of this model waits, not only this one
                else:
                    await asyncio.sleep(backoff)

def _with_compute(result: CallResult, request: CallRequest, parameters: int | None) -> CallResult:
    """The record with the adapter the call was served with and its FLOPs (2 x parameters x tokens:
    a forward pass per token, prompt and reply), where the model's parameter count is known."""
    record = result.record
    flops = 2.0 * parameters * record.total_tokens if parameters else None
    adapter = request.adapter.hash if request.adapter is not None else None
    record = record.model_copy(update={"flops": flops, "adapter": adapter})
    return result.model_copy(update={"record": record})


def _safe_call(call: ToolCall) -> ToolCall:
    return ToolCall(id=safe_text(call.id), name=safe_text(call.name), arguments=safe_text(call.arguments))


def _safe_answer(answer: CachedAnswer) -> CachedAnswer:
    return answer.model_copy(update={"text": None if answer.text is None else safe_text(answer.text),
                                     "tool_calls": [_safe_call(c) for c in answer.tool_calls or []]})


def _message(response: Any) -> Any:
    """The reply's first choice's message, or None where the provider sent none (an empty `choices`)."""
    choices = getattr(response, "choices", None) or []
    return getattr(choices[0], "message", None) if choices else None


def _what_was_sent(response: Any) -> str:
    """The start of a reply the gateway cannot read, as one line: what the provider sent, not a traceback."""
    try:
        sent = response.model_dump_json() if hasattr(response, "model_dump_json") else _as_json(response)
    except Exception:  # a reply too broken to serialise still gets its type named
        sent = type(response).__name__
    return one_line(str(sent), 200)


def _usage(model: str, request: CallRequest, response: Any, text: str | None,
           tool_calls: list[ToolCall] | None = None) -> CachedAnswer:
    """The call's token counts, from the provider's usage as litellm normalises it (cache reads,
    cache writes and reasoning tokens included), else counted with litellm's tokenizer (then the
    kinds are unknown)."""
    usage = getattr(response, "usage", None)
    prompt = getattr(usage, "prompt_tokens", None) or 0
    completion = getattr(usage, "completion_tokens", None) or 0
    if prompt > 0:
        details = getattr(usage, "prompt_tokens_details", None)
        thinking = getattr(usage, "completion_tokens_details", None)
        written = (getattr(details, "cache_write_tokens", None)
                   or getattr(details, "cache_creation_tokens", None)
                   or getattr(usage, "cache_creation_input_tokens", None) or 0)
        return CachedAnswer(prompt_tokens=prompt, completion_tokens=completion, usage_source="provider",
                            cost_usd=None, cache_read_tokens=getattr(details, "cached_tokens", None) or 0,
                            cache_write_tokens=written,
                            reasoning_tokens=getattr(thinking, "reasoning_tokens", None) or 0)
    litellm = load_litellm()
    if request.kind == "embed":
        counted = litellm.token_counter(model=model, text=request.texts)
        return CachedAnswer(prompt_tokens=counted, completion_tokens=0, usage_source="counted", cost_usd=None,
                            reasoning_tokens=0)
    counted_prompt = litellm.token_counter(model=model, messages=request.messages,
                                           tools=request.params.get("tools"))
    said = (text or "") + "".join(c.name + c.arguments for c in tool_calls or [])
    counted_completion = litellm.token_counter(model=model, text=said, count_response_tokens=True)
    return CachedAnswer(prompt_tokens=counted_prompt, completion_tokens=counted_completion,
                        usage_source="counted", cost_usd=None)
