"""`WireServer`: a local HTTP model that speaks OpenAI's, Anthropic's and Gemini's wire formats.

It exists so that tests can check token accounting (cache reads, cache writes, reasoning tokens) and
dollar costs against the providers' own usage reports, as litellm receives and normalises them,
rather than against mocks of litellm. One aiohttp event loop, served from a daemon thread of the test
process (`start()` / `close()`, or `with WireServer() as server:`), on 127.0.0.1 and a free port.

Endpoints and the litellm arguments that reach them (`api_key` may be anything non-empty):

- OpenAI `POST /v1/chat/completions`: `model="openai/<name>", api_base=server.openai_base`
  (`http://127.0.0.1:<port>/v1`).
- Anthropic `POST /v1/messages`: `model="anthropic/<name>", api_base=server.anthropic_base`
  (`http://127.0.0.1:<port>`; litellm 1.110.2 appends `/v1/messages` and sends `x-api-key` and
  `anthropic-version: 2023-06-01`).
- Gemini `POST /v1beta/models/<name>:generateContent`: `model="gemini/<name>",
  api_base=server.gemini_base` (`http://127.0.0.1:<port>/v1beta`; litellm 1.110.2 posts to
  `{api_base}/models/<name>:generateContent` with `x-goog-api-key`). Gemini's explicit cache API
  (`cachedContents`, which litellm tries first when `cache_control`-marked content is long enough) is
  not spoken: it answers 404 (logged, like every path not served), and litellm then sends the whole
  prompt to `generateContent`.
  Streaming is not spoken by any endpoint (a `stream` request gets a 400).

Tokens. The server counts its own tokens and its usage report is the truth the client must trust:
a token is a run of word characters or one other non-space character (`re.findall(r"\\w+|[^\\w\\s]")`),
so "What is 2+2?" is 6 tokens. A prompt is rendered, in the order the providers cache it (tools, then
system, then messages), as: each tool's JSON (keys sorted, `cache_control` removed); each message's
role followed by its content's text (non-text blocks as JSON with keys sorted, `cache_control`
removed). The answer is `answer` (default "Paris": 1 token).

Caching, deterministic and never expiring (`clear_cache()` forgets), kept per provider and model:

- OpenAI and Gemini (automatic prefix caching): a prompt's cached tokens are its longest common
  prefix with any earlier prompt, rounded down to a multiple of `cache_block`, and 0 below
  `cache_min_tokens` (OpenAI: 128 and 1024). Reported as `prompt_tokens_details.cached_tokens` /
  `cachedContentTokenCount`, both included in `prompt_tokens` / `promptTokenCount`, as the real
  APIs do.
- Anthropic (explicit caching): only the prompt up to and including the last block that carries
  `cache_control` (in `tools`, `system` or message content; at most 4 such blocks) can be cached.
  Each marked block ends a cacheable prefix; the longest one seen before is read
  (`cache_read_input_tokens`), and the rest up to the last marked block is written
  (`cache_creation_input_tokens`) and remembered. Prefixes under `cache_min_tokens` are neither read
  nor written (Anthropic: 1024 for Sonnet). `input_tokens` counts only the tokens after the
  read and written part, as Anthropic does.

Reasoning. A model whose name starts with one of `reasoning_models` (default: "gpt-5", "o1", "o3",
"o4", "gemini-2.5", "gemini-3") reasons: OpenAI adds `reasoning_tokens` (default 64) to
`completion_tokens` and reports them in `completion_tokens_details.reasoning_tokens`; Gemini reports
them in `thoughtsTokenCount` (not in `candidatesTokenCount`; `totalTokenCount` adds both) unless
`thinkingConfig.thinkingBudget` is 0, capped by a positive budget, with a thought part when
`includeThoughts`. Anthropic thinks only when asked (`thinking: {type: enabled, budget_tokens: N}`):
a `thinking` block of `min(reasoning_tokens, N)` tokens, counted in `output_tokens`.

Injected, for OpenAI: `failures` (statuses the next requests get, in turn, as OpenAI error bodies),
`tool_call` (a request offering `tools` is answered with this call instead of text) and `reply_body`
(every request is answered 200 with this JSON as it is: a malformed reply, such as empty `choices`).

Refusals, as the real APIs answer (status and error body in the provider's format): a missing key
(401; Gemini 403); an OpenAI reasoning model given `temperature` other than 1 or `max_tokens` (400;
it wants `max_completion_tokens`), a non-reasoning one given `reasoning_effort` (400); an Anthropic
request without `anthropic-version` or `max_tokens`, with more than 4 `cache_control` blocks, or
with thinking and a `temperature` other than 1, or `budget_tokens` under 1024 or not under
`max_tokens` (400).

What litellm 1.110.2 makes of these reports (pinned by tests/models/test_wire_server.py):

- cache reads: `usage.prompt_tokens_details.cached_tokens` for all three providers, also
  `usage.cache_read_input_tokens` for Anthropic and Gemini; cache writes (Anthropic only):
  `usage.cache_creation_input_tokens` and `usage.prompt_tokens_details.cache_creation_tokens`
  (also `.cache_write_tokens`); reasoning: `usage.completion_tokens_details.reasoning_tokens`.
- `usage.prompt_tokens` includes the cached tokens for all three. For Anthropic it is input_tokens +
  cache_read_input_tokens + cache_creation_input_tokens (the read and the written tokens both), and
  `prompt_tokens_details.text_tokens` is input_tokens alone.
- `usage.completion_tokens` includes the reasoning tokens for all three (Gemini: litellm adds
  thoughtsTokenCount to candidatesTokenCount). Anthropic reports no thinking count, so litellm
  estimates reasoning_tokens by tokenising the thinking text itself (its default tokenizer counts
  this server's "think think ..." as one token a word, so the numbers agree here).
- `litellm.completion_cost(completion_response=...)` bills cache reads at
  `cache_read_input_token_cost`, Anthropic writes at `cache_creation_input_token_cost`, and Gemini
  thoughts at `output_cost_per_reasoning_token`, when reached through `api_base` too.
- client side, before any request: gpt-5-mini and o4-mini with `temperature` other than 1 raise
  `litellm.UnsupportedParamsError` (`drop_params=True` drops it silently; `extra_body` sends it, and
  this server answers 400); their `max_tokens` is sent as `max_completion_tokens`.

`requests` logs every request in arrival order: method, path, query, headers (keys replaced by
"<redacted>") and JSON body.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import time
from typing import Any

from harness.models.local_http import LocalHttpServer

_TOKEN = re.compile(r"\w+|[^\w\s]")
_SECRET_HEADERS = {"authorization", "x-api-key", "x-goog-api-key", "api-key"}
REASONING_MODELS = ("gpt-5", "o1", "o3", "o4", "gemini-2.5", "gemini-3")


def tokens(text: str) -> list[str]:
    """The server's tokens of `text`: runs of word characters, and every other non-space character."""
    return _TOKEN.findall(text)


def _json(value: Any) -> str:
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k != "cache_control"}
    return json.dumps(value, sort_keys=True)


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if isinstance(block, dict) and block.get("type") == "text":
        return str(block.get("text", ""))
    return _json(block)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):
        return " ".join(_block_text(block) for block in content)
    return _block_text(content)


def _openai_prompt(body: dict[str, Any]) -> list[str]:
    parts = [_json(tool) for tool in body.get("tools") or []]
    for message in body.get("messages") or []:
        parts += [str(message.get("role", "")), _content_text(message.get("content"))]
        if message.get("tool_calls"):
            parts.append(_json(message["tool_calls"]))
    return tokens(" ".join(parts))


def _anthropic_segments(body: dict[str, Any]) -> list[tuple[list[str], bool]]:
    """The prompt as (tokens, carries cache_control) pieces, in cache order: tools, system, messages."""
    segments = [(tokens(_json(tool)), "cache_control" in tool) for tool in body.get("tools") or []]
    system = body.get("system")
    blocks = [{"type": "text", "text": system}] if isinstance(system, str) else system or []
    segments += [(tokens(_block_text(block)), "cache_control" in block) for block in blocks]
    for message in body.get("messages") or []:
        segments.append((tokens(str(message.get("role", ""))), False))
        content = message.get("content")
        for block in [content] if isinstance(content, str) else content or []:
            marked = isinstance(block, dict) and "cache_control" in block
            segments.append((tokens(_block_text(block)), marked))
    return segments


def _gemini_prompt(body: dict[str, Any]) -> list[str]:
    parts = [_json(tool) for tool in body.get("tools") or []]
    system = body.get("system_instruction") or body.get("systemInstruction") or {}
    parts += [part["text"] if "text" in part else _json(part) for part in system.get("parts", [])]
    for content in body.get("contents") or []:
        parts.append(str(content.get("role", "")))
        parts += [part["text"] if "text" in part else _json(part) for part in content.get("parts", [])]
    return tokens(" ".join(parts))


def _common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _key(prefix: list[str]) -> str:
    return hashlib.sha256("\x00".join(prefix).encode()).hexdigest()


class WireServer(LocalHttpServer):
    """OpenAI, Anthropic and Gemini chat endpoints with deterministic caches and usage (module doc)."""

    def __init__(self, answer: str = "Paris", *, reasoning_tokens: int = 64,
                 reasoning_models: tuple[str, ...] = REASONING_MODELS, cache_block: int = 128,
                 cache_min_tokens: int = 1024, host: str = "127.0.0.1", port: int = 0) -> None:
        self.answer, self.reasoning_tokens, self.reasoning_models = answer, reasoning_tokens, reasoning_models
        self.cache_block, self.cache_min_tokens = cache_block, cache_min_tokens
        super().__init__(host, port)
        self.requests: list[dict[str, Any]] = []
        self._prompts: dict[tuple[str, str], list[list[str]]] = {}  # OpenAI and Gemini: prompts seen
        self._prefixes: dict[str, set[str]] = {}  # Anthropic: cached prefixes per model
        self._ids = itertools.count(1)
        self.failures: list[int] = []
        """Statuses the next OpenAI requests are answered with, in turn (an OpenAI error body)."""
        self.tool_call: tuple[str, str] | None = None
        """(name, arguments) an OpenAI request that offers `tools` is answered with, as a tool call."""
        self.reply_body: dict[str, Any] | None = None
        """A body every OpenAI request is answered with (200) as it is, however malformed."""

    @property
    def openai_base(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def anthropic_base(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def gemini_base(self) -> str:
        return f"http://{self.host}:{self.port}/v1beta"

    def reasons(self, model: str) -> bool:
        return model.startswith(self.reasoning_models)

    def clear_cache(self) -> None:
        self._prompts.clear()
        self._prefixes.clear()

    # --- the three providers ---------------------------------------------------------------------

    def _prefix_cached(self, provider: str, model: str, prompt: list[str]) -> int:
        """Automatic prefix caching (OpenAI, Gemini): the longest prefix seen, in whole blocks."""
        seen = self._prompts.setdefault((provider, model), [])
        longest = max((_common_prefix(prompt, earlier) for earlier in seen), default=0)
        seen.append(prompt)
        cached = longest // self.cache_block * self.cache_block
        return cached if cached >= self.cache_min_tokens else 0

    async def _openai(self, request: Any) -> Any:
        body = await self._log(request)
        if not request.headers.get("Authorization", "").removeprefix("Bearer ").strip():
            return _openai_error(401, "You didn't provide an API key.", None, None)
        model = str(body.get("model", ""))
        if body.get("stream"):
            return _openai_error(400, "This test server does not stream.", "stream", "unsupported_value")
        reasoning = self.reasons(model)
        if reasoning and body.get("temperature", 1) != 1:
            return _openai_error(400, "Unsupported value: 'temperature' does not support "
                                 f"{body['temperature']} with this model. Only the default (1) value is "
                                 "supported.", "temperature", "unsupported_value")
        if reasoning and "max_tokens" in body:
            return _openai_error(400, "Unsupported parameter: 'max_tokens' is not supported with this "
                                 "model. Use 'max_completion_tokens' instead.", "max_tokens",
                                 "unsupported_parameter")
        if not reasoning and "reasoning_effort" in body:
            return _openai_error(400, "Unsupported parameter: 'reasoning_effort' is not supported with this "
                                 "model.", "reasoning_effort", "unsupported_parameter")
        if self.failures:
            status = self.failures.pop(0)
            kind = {429: "rate_limit_exceeded", 401: "invalid_api_key"}.get(status, "server_error")
            return _openai_error(status, f"Injected failure ({status}).", None, kind)
        if self.reply_body is not None:
            return _json_response(self.reply_body)
        prompt = _openai_prompt(body)
        cached = self._prefix_cached("openai", model, prompt)
        reasoning_tokens = self.reasoning_tokens if reasoning else 0
        called = self.tool_call if body.get("tools") else None
        message: dict[str, Any] = {"role": "assistant", "content": self.answer, "refusal": None}
        if called is not None:
            message = {"role": "assistant", "content": None, "refusal": None, "tool_calls": [
                {"id": f"call_{next(self._ids)}", "type": "function",
                 "function": {"name": called[0], "arguments": called[1]}}]}
        said = self.answer if called is None else called[0] + called[1]
        completion = len(tokens(said)) + reasoning_tokens
        return _json_response({
            "id": f"chatcmpl-{next(self._ids)}", "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "finish_reason": "stop" if called is None else "tool_calls",
                         "logprobs": None, "message": message}],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": completion,
                      "total_tokens": len(prompt) + completion,
                      "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                      "completion_tokens_details": {"reasoning_tokens": reasoning_tokens, "audio_tokens": 0,
                                                    "accepted_prediction_tokens": 0,
                                                    "rejected_prediction_tokens": 0}}})

    async def _anthropic(self, request: Any) -> Any:
        body = await self._log(request)
        if not (request.headers.get("x-api-key") or request.headers.get("Authorization")):
            return _anthropic_error(401, "authentication_error", "x-api-key header is required")
        if not request.headers.get("anthropic-version"):
            return _anthropic_error(400, "invalid_request_error", "anthropic-version: header is required")
        if "max_tokens" not in body:
            return _anthropic_error(400, "invalid_request_error", "max_tokens: Field required")
        if body.get("stream"):
            return _anthropic_error(400, "invalid_request_error", "This test server does not stream.")
        thinking = body.get("thinking") or {}
        budget = 0
        if thinking.get("type") == "enabled":
            budget = int(thinking.get("budget_tokens", 0))
            if body.get("temperature", 1) != 1:
                return _anthropic_error(400, "invalid_request_error", "`temperature` may only be set to 1 "
                                        "when thinking is enabled.")
            if budget < 1024 or budget >= body["max_tokens"]:
                return _anthropic_error(400, "invalid_request_error", "thinking.budget_tokens: must be at "
                                        "least 1024 and less than max_tokens")
        segments = _anthropic_segments(body)
        marked = sum(flag for _, flag in segments)
        if marked > 4:
            return _anthropic_error(400, "invalid_request_error", "A maximum of 4 blocks with cache_control "
                                    f"may be provided. Found {marked}.")
        prompt: list[str] = []
        breakpoints = []
        for piece, flag in segments:
            prompt += piece
            if flag and len(prompt) >= self.cache_min_tokens:
                breakpoints.append(len(prompt))
        model = str(body.get("model", ""))
        store = self._prefixes.setdefault(model, set())
        read = max((end for end in breakpoints if _key(prompt[:end]) in store), default=0)
        written = max(breakpoints, default=0) - read if breakpoints and breakpoints[-1] > read else 0
        store.update(_key(prompt[:end]) for end in breakpoints)
        thought = min(self.reasoning_tokens, budget)
        content = [{"type": "thinking", "thinking": " ".join(["think"] * thought),
                    "signature": "wire-server-signature"}] if budget else []
        content.append({"type": "text", "text": self.answer})
        return _json_response({
            "id": f"msg_{next(self._ids)}", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": len(prompt) - read - written, "cache_creation_input_tokens": written,
                      "cache_read_input_tokens": read, "output_tokens": len(tokens(self.answer)) + thought}})

    async def _gemini(self, request: Any) -> Any:
        body = await self._log(request)
        if not (request.headers.get("x-goog-api-key") or request.query.get("key")):
            return _gemini_error(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers.")
        model = request.match_info["model"]
        prompt = _gemini_prompt(body)
        cached = self._prefix_cached("gemini", model, prompt)
        thinking = (body.get("generationConfig") or {}).get("thinkingConfig") or {}
        budget = thinking.get("thinkingBudget", -1)
        thought = 0
        if self.reasons(model) and budget != 0:
            thought = self.reasoning_tokens if budget < 0 else min(self.reasoning_tokens, budget)
        parts: list[dict[str, Any]] = []
        if thinking.get("includeThoughts") and thought:
            parts.append({"text": " ".join(["think"] * thought), "thought": True})
        parts.append({"text": self.answer})
        answer = len(tokens(self.answer))
        usage: dict[str, Any] = {"promptTokenCount": len(prompt), "candidatesTokenCount": answer,
                                 "totalTokenCount": len(prompt) + answer + thought,
                                 "promptTokensDetails": [{"modality": "TEXT", "tokenCount": len(prompt)}]}
        if cached:
            usage["cachedContentTokenCount"] = cached
            usage["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": cached}]
        if thought:
            usage["thoughtsTokenCount"] = thought
        return _json_response({
            "candidates": [{"content": {"parts": parts, "role": "model"}, "finishReason": "STOP",
                            "index": 0}],
            "usageMetadata": usage, "modelVersion": model, "responseId": f"wire-{next(self._ids)}"})

    # --- serving -------------------------------------------------------------------------------

    async def _log(self, request: Any) -> dict[str, Any]:
        """Reads the JSON body and logs the request (keys redacted) in arrival order."""
        try:
            body = await request.json() if request.can_read_body else {}
        except ValueError:
            body = {}
        headers = {k: "<redacted>" if k.lower() in _SECRET_HEADERS else v for k, v in request.headers.items()}
        query = {k: "<redacted>" if k == "key" else v for k, v in request.query.items()}
        self.requests.append({"method": request.method, "path": request.path, "query": query,
                              "headers": headers, "body": body})
        return body if isinstance(body, dict) else {}

    def app(self) -> Any:
        from aiohttp import web

        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_post("/v1/messages", self._anthropic)
        app.router.add_post("/v1beta/models/{model:[^/:]+}:generateContent", self._gemini)
        app.router.add_route("*", "/{path:.*}", self._not_served)
        return app

    async def _not_served(self, request: Any) -> Any:
        """Any other path (e.g. Gemini's `cachedContents`): logged, then 404 (Google's error format)."""
        await self._log(request)
        return _gemini_error(404, "NOT_FOUND", f"{request.method} {request.path} is not served here.")



def _json_response(body: dict[str, Any], status: int = 200) -> Any:
    from aiohttp import web

    return web.json_response(body, status=status)


def _openai_error(status: int, message: str, param: str | None, code: str | None) -> Any:
    return _json_response({"error": {"message": message, "type": "invalid_request_error", "param": param,
                                     "code": code}}, status)


def _anthropic_error(status: int, kind: str, message: str) -> Any:
    return _json_response({"type": "error", "error": {"type": kind, "message": message}}, status)


def _gemini_error(status: int, kind: str, message: str) -> Any:
    return _json_response({"error": {"code": status, "message": message, "status": kind}}, status)
