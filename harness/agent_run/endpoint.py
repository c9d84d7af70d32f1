"""The OpenAI-compatible endpoint of one agent run: how outside agents reach the gateway.

An outside agent (agents/external.py) is someone else's code: a DSPy program, a LangGraph graph, a
script on the `openai` SDK. It cannot call `ModelClient.complete`, but any of them takes a
`base_url`. While its agent run is live, the run serves, on 127.0.0.1 and a port of its own:

- `POST {base}/v1/chat/completions`: messages, tools and tool calls, `n`, `temperature`,
  `max_tokens` (`max_completion_tokens`), `seed`, `stop`, `response_format`, ...; `stream: true`
  answers as server-sent events. The plain URL bills purpose `act`; `{base}/<purpose>/v1` bills
  another purpose (`reflect`, `distill`, `optimize`, `judge`, ...), so that a framework that takes a
  base URL bills its self-improvement as overhead; a header `X-Harness-Purpose` does the same.
- `POST {base}/v1/embeddings` (purpose `embed`; floats or `encoding_format: base64`).
- `GET {base}/v1/models`: the run's model, for clients that list models first.

Every request is a call of the run's `AgentModelClient`, exactly as a native agent's: its
`llm_calls` and `transcripts` rows, the response cache, rate limits, retries and the budget. `n`
choices are `n` calls, the i-th with seed `seed + i` (seed 0 when none is given), so that they are
distinct samples and each replays. The key (`Authorization: Bearer <key>`) belongs to this run
alone and is replaced by `rotate_key` (an abandoned call of a timed-out task must not bill the
next). A wrong key is a 401, a malformed request or an unknown purpose or parameter a 400 with a
one-line message; a spent budget a 429 `insufficient_quota` with the budget's message (the OpenAI
SDK raises it without retrying: `x-should-retry: false`), and the failure is kept for the agent
run to act on as it would on a native call's (`take_stop`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import struct
import time
from collections.abc import Iterable
from typing import Any

from harness.errors import one_line
from harness.models.model_client import (
    BUDGET_EXHAUSTED,
    AgentModelClient,
    GatewayUnavailable,
    ModelCallError,
    ModelUnavailable,
)
from harness.redact import SECRET_NAME
from harness.tables.records import AGENT_PURPOSES, Usage

CHAT_PARAMS = frozenset({
    "temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "stop", "response_format",
    "tools", "tool_choice", "parallel_tool_calls", "presence_penalty", "frequency_penalty", "logit_bias",
    "reasoning_effort",
})
"""Request fields passed to the model as they came."""
IGNORED = frozenset({"model", "messages", "stream", "stream_options", "n", "user", "store", "metadata",
                     "service_tier", "logprobs", "top_logprobs", "modalities", "prediction"})
"""Request fields taken here (the model is the run's) or with no bearing on the answer."""
MAX_CHOICES = 16
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


class BadRequest(ValueError):
    """A request the endpoint refuses (400), with the one-line reason."""


class HttpEndpoint:
    """Serves one agent run's calls over HTTP on 127.0.0.1 while the run is live (the
    harness.agent_api.ModelEndpoint that outside agents reach)."""

    def __init__(self, llm: AgentModelClient, secret_env: Iterable[str] = ()) -> None:
        self.llm = llm
        self.secret_env = set(secret_env)
        self.api_key = _new_key()
        self.port = 0
        self._runner: Any = None
        self._stop: BaseException | None = None

    @property
    def model(self) -> str:
        return self.llm.model

    @property
    def base_url(self) -> str:
        """The `act` URL, as OpenAI clients take it (`.../v1`)."""
        return self.url("act")

    def url(self, purpose: str) -> str:
        """The base URL whose calls bill `purpose`."""
        check_purpose(purpose)
        root = f"http://127.0.0.1:{self.port}"
        return f"{root}/v1" if purpose == "act" else f"{root}/{purpose}/v1"

    def urls(self) -> dict[str, str]:
        return {purpose: self.url(purpose) for purpose in AGENT_PURPOSES if purpose != "embed"}

    def rotate_key(self) -> None:
        """A new key; the old one is refused from now on."""
        self.api_key = _new_key()

    def environment(self) -> dict[str, str]:
        """An outside agent process's environment: this one's without a secret (harness/redact.py's
        rule and `output.secret_env`), with the run's URL, key and model, also as OpenAI's variables
        (a plain `openai` script runs unchanged)."""
        kept = {name: value for name, value in os.environ.items()
                if name not in self.secret_env and not SECRET_NAME.search(name)}
        return {**kept, "HARNESS_BASE_URL": self.base_url, "HARNESS_API_KEY": self.api_key,
                "HARNESS_MODEL": self.model, "HARNESS_URLS": json.dumps(self.urls()),
                "OPENAI_BASE_URL": self.base_url, "OPENAI_API_KEY": self.api_key}

    def take_stop(self) -> BaseException | None:
        """The failure of a call since the last take that must end the episode whatever the outside
        code made of it (a spent budget, a model that cannot be used, the gateway gone)."""
        stop, self._stop = self._stop, None
        return stop

    async def start(self) -> HttpEndpoint:
        from aiohttp import web

        app = web.Application(client_max_size=64 * 1024 * 1024)
        for prefix in ("", "/{purpose}"):
            app.router.add_post(f"{prefix}/v1/chat/completions", self._chat)
            app.router.add_post(f"{prefix}/v1/embeddings", self._embeddings)
            app.router.add_get(f"{prefix}/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _chat(self, request: Any) -> Any:
        try:
            purpose, body = await self._admit(request)
            messages, params, n, stream = chat_request(body)
        except (_Refusal, BadRequest) as refusal:
            return _refused(refusal)
        calls = [self.llm.complete(messages, purpose, **({**params, "seed": params.get("seed", 0) + i}
                                                        if n > 1 else params)) for i in range(n)]
        try:
            completions = await asyncio.gather(*calls)
        except (ModelCallError, GatewayUnavailable) as failure:
            return self._failed(failure)
        answer = chat_response(self.model, completions)
        return await _stream(request, answer, body) if stream else _json(answer)

    async def _embeddings(self, request: Any) -> Any:
        try:
            _, body = await self._admit(request, embedding=True)
            texts = embedding_inputs(body)
        except (_Refusal, BadRequest) as refusal:
            return _refused(refusal)
        try:
            result = await self.llm.embedding(texts)
        except (ModelCallError, GatewayUnavailable) as failure:
            return self._failed(failure)
        vectors = result.vectors or []
        encode = body.get("encoding_format") == "base64"
        data = [{"object": "embedding", "index": i, "embedding": _base64_floats(vector) if encode else vector}
                for i, vector in enumerate(vectors)]
        usage = result.record.usage
        return _json({"object": "list", "data": data, "model": self.llm.embedder,
                      "usage": {"prompt_tokens": usage.prompt_tokens, "total_tokens": usage.total_tokens}})

    async def _models(self, request: Any) -> Any:
        try:
            await self._admit(request, body=False)
        except (_Refusal, BadRequest) as refusal:
            return _refused(refusal)
        return _json({"object": "list", "data": [{"id": self.model, "object": "model", "created": 0,
                                                  "owned_by": "harness"}]})

    async def _admit(self, request: Any, embedding: bool = False,
                     body: bool = True) -> tuple[str, dict[str, Any]]:
        """The purpose and the JSON body of an authorised request."""
        given = request.headers.get("Authorization", "")
        if not secrets.compare_digest(given.encode(), f"Bearer {self.api_key}".encode()):
            raise _Refusal(401, "invalid_api_key", "this key does not belong to this agent run")
        purpose = request.headers.get("X-Harness-Purpose") or request.match_info.get("purpose", "act")
        if not embedding:
            check_purpose(purpose)
        if not body:
            return purpose, {}
        try:
            parsed = json.loads(await request.read())
        except (ValueError, UnicodeDecodeError):
            raise BadRequest("the request body is not JSON") from None
        if not isinstance(parsed, dict):
            raise BadRequest("the request body is not a JSON object")
        return purpose, parsed

    def _failed(self, failure: BaseException) -> Any:
        """A failed call as the OpenAI SDK understands it, never retried (the gateway retried)."""
        message = one_line(failure)
        if isinstance(failure, ModelCallError) and (failure.record.error or "").startswith(BUDGET_EXHAUSTED):
            self._stop = self._stop or failure
            return _error(429, "insufficient_quota", failure.record.error or message)
        if isinstance(failure, ModelUnavailable | GatewayUnavailable):
            self._stop = self._stop or failure
            return _error(503, "model_unavailable", message)
        return _error(502, "model_call_failed", message)


def check_purpose(purpose: str) -> None:
    if purpose not in AGENT_PURPOSES or purpose == "embed":  # grade is the benchmark's, never an agent's
        known = ", ".join(p for p in AGENT_PURPOSES if p != "embed")
        raise BadRequest(f"unknown purpose {purpose!r}: the URL or X-Harness-Purpose names one of {known}")


def chat_request(body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any], int, bool]:
    """The messages, model parameters, number of choices and streaming of a chat request; a
    BadRequest names what is wrong."""
    unknown = sorted(set(body) - CHAT_PARAMS - IGNORED)
    if unknown:
        raise BadRequest(f"unsupported parameter {unknown[0]!r}")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            roles = ", ".join(sorted(ROLES))
            raise BadRequest(f"messages[{i}] must be an object whose 'role' is one of {roles}")
    n = 1 if body.get("n") is None else body["n"]
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_CHOICES:
        raise BadRequest(f"'n' must be an integer from 1 to {MAX_CHOICES}, got {n!r}")
    params = {key: value for key, value in body.items() if key in CHAT_PARAMS and value is not None}
    if "max_completion_tokens" in params:  # one name for the gateway, which maps it per provider
        params["max_tokens"] = params.pop("max_completion_tokens")
    if "seed" in params and (not isinstance(params["seed"], int) or isinstance(params["seed"], bool)):
        raise BadRequest(f"'seed' must be an integer, got {params['seed']!r}")
    return messages, params, n, bool(body.get("stream"))


def embedding_inputs(body: dict[str, Any]) -> list[str]:
    given = body.get("input")
    texts = [given] if isinstance(given, str) else given
    if not isinstance(texts, list) or not texts or not all(isinstance(text, str) for text in texts):
        raise BadRequest("'input' must be a string or a non-empty list of strings (token ids are not taken)")
    return texts


def chat_response(model: str, completions: list[Any]) -> dict[str, Any]:
    usage = sum((c.usage for c in completions), Usage())
    choices = [{"index": i, "message": {"role": "assistant", "content": c.text if c.text or not c.tool_calls
                                        else None,
                                        **({"tool_calls": [call.message() for call in c.tool_calls]}
                                           if c.tool_calls else {})},
                "finish_reason": "tool_calls" if c.tool_calls else "stop", "logprobs": None}
               for i, c in enumerate(completions)]
    return {"id": f"chatcmpl-{completions[0].call_id}", "object": "chat.completion",
            "created": int(time.time()), "model": model, "choices": choices, "usage": openai_usage(usage)}


def openai_usage(usage: Usage) -> dict[str, Any]:
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens}}


def stream_chunks(answer: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """The answer as `chat.completion.chunk` events: per choice its role and text, each tool call,
    then its finish reason; the usage last when asked for (`stream_options.include_usage`)."""
    head = {key: answer[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    chunks = []
    for choice in answer["choices"]:
        message, index = choice["message"], choice["index"]
        deltas = [{"role": "assistant", "content": message["content"] or ""}]
        calls = message.get("tool_calls", [])
        deltas += [{"tool_calls": [{"index": i, **call}]} for i, call in enumerate(calls)]
        ends = [*deltas, {}]
        chunks += [{**head, "choices": [{"index": index, "delta": delta,
                                         "finish_reason": None if delta else choice["finish_reason"]}]}
                   for delta in ends]
    if include_usage:
        chunks.append({**head, "choices": [], "usage": answer["usage"]})
    return chunks


async def _stream(request: Any, answer: dict[str, Any], body: dict[str, Any]) -> Any:
    from aiohttp import web

    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    # The whole answer is there already: every event in one write.
    events = "".join(f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
                     for chunk in stream_chunks(answer, include_usage))
    await response.write_eof(f"{events}data: [DONE]\n\n".encode())
    return response


class _Refusal(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


def _refused(refusal: Exception) -> Any:
    if isinstance(refusal, _Refusal):
        return _error(refusal.status, refusal.kind, str(refusal))
    return _error(400, "invalid_request_error", str(refusal))


def _error(status: int, kind: str, message: str) -> Any:
    from aiohttp import web

    body = {"error": {"message": message, "type": kind, "param": None, "code": kind}}
    return web.json_response(body, status=status, headers={"x-should-retry": "false"})


def _json(body: dict[str, Any]) -> Any:
    from aiohttp import web

    return web.json_response(body, dumps=lambda value: json.dumps(value, ensure_ascii=False))


def _base64_floats(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def _new_key() -> str:
    return f"harness-run-{secrets.token_urlsafe(24)}"


class RunEndpoint:
    """The run's endpoint, started by the first agent that asks for it (`open`), closed with the run."""

    def __init__(self, llm: AgentModelClient, secret_env: Iterable[str] = ()) -> None:
        self.llm, self.secret_env = llm, list(secret_env)
        self._endpoint: HttpEndpoint | None = None

    async def open(self) -> HttpEndpoint:
        if self._endpoint is None:
            self._endpoint = await HttpEndpoint(self.llm, self.secret_env).start()
        return self._endpoint

    async def close(self) -> None:
        if self._endpoint is not None:
            await self._endpoint.close()
            self._endpoint = None
