"""The gateway's lean path: chat completions sent straight to an OpenAI-compatible server.

litellm's own handling of a call (its wrappers, a worker thread per request, logging objects, the
OpenAI SDK's client, a cost lookup on every reply) cost about a third of an agent worker's CPU per
call, measured with py-spy at 64 concurrent agent runs. For a server that speaks OpenAI's format at
an `api_base` (the harness's local model, vLLM, SGLang, llama.cpp, a proxy), the gateway sends the
request itself over one pooled aiohttp session instead, and keeps litellm for what it is for:

- the request body is litellm's: the parameters go through `get_optional_params` (so a reasoning
  model's `max_tokens` becomes `max_completion_tokens`, and a parameter the model refuses raises the
  same error before anything is sent), remembered per model and parameters;
- a reply that is not a success (any HTTP error, a body that is not a chat completion) is handed to
  litellm as it came off the wire, through a transport that replays it, so the error, its class
  (retried or fatal) and its text are litellm's own; nothing is sent twice;
- usage and cost are read from the reply as the gateway reads litellm's (harness/models/gateway.py,
  pricing.py).

Requests litellm would change in ways this path does not (content blocks, non-standard
parameters) go through litellm as before.

litellm itself (seconds to import) is imported only where a call needs it: an agent worker sends
its calls here without it when the job comes with each model's `ParamMap`, worked out by the driver's
model check (harness/driver/preflight.py) with litellm's own `get_optional_params`; an error reply, a
parameter the map does not cover, or a reply that may have a price in litellm's map import it then.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import json
import os
from collections.abc import Collection
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp

from harness.models.param_map import PROVIDER, ParamMap, as_sent, passed_as_they_are


def may_have_a_price(model: str, registered: Collection[str] = ()) -> bool:
    """Whether litellm's price map (the copy it ships, which the harness has it read: HARNESS_ENV's
    LITELLM_LOCAL_MODEL_COST_MAP, and the `registered` names the config priced) may price a reply of
    `model`: one of its names is part of this one, or this one part of it. Read without importing
    litellm, so that a reply no map knows (a local model's) is left unpriced (None) as litellm would
    leave it, without litellm."""
    if os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP", "").lower() != "true":
        return True  # litellm fetches its map: only it knows what is there
    name = model.lower().rsplit("/", 1)[-1]
    known = _priced_names() | {key.lower().rsplit("/", 1)[-1] for key in registered}
    return not name or any(price in name or name in price for price in known)


@functools.cache
def _priced_names() -> frozenset[str]:
    spec = importlib.util.find_spec("litellm")  # found, not imported
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = os.path.join(folder, "model_prices_and_context_window_backup.json")
        if os.path.exists(path):
            with open(path) as prices:
                return frozenset(filter(None, (key.lower().rsplit("/", 1)[-1] for key in json.load(prices))))
    return frozenset({""})  # no map found: anything may have a price (litellm is asked)


@dataclass(frozen=True)
class HttpReply:
    """What the server answered (the body as read, decoded)."""

    status: int
    headers: dict[str, str]
    body: bytes


class DirectChat:
    """One pooled HTTP session for every OpenAI-compatible endpoint of a gateway (its event loop's)."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._bodies: dict[tuple[str, str], dict[str, Any]] = {}
        """litellm's mapping of each model's parameters, by (model, the parameters as JSON)."""
        self.param_maps: dict[str, ParamMap] = {}
        """By model: what litellm sends as given, known without it (`ParamMap`)."""

    def takes(self, route: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> bool:
        """Whether this path sends the call exactly as litellm would."""
        if not route.startswith(f"{PROVIDER}/") or not all(
                isinstance(m.get("content"), str | None) and m.keys() <= _MESSAGE_KEYS for m in messages):
            return False
        known = self.param_maps.get(route.split("/", 1)[1])
        if known is not None and params.keys() <= known.unchanged:
            return True
        return params.keys() <= passed_as_they_are()

    async def complete(self, route: str, api_base: str, api_key: str | None, timeout_s: float,
                       messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
        """The reply, read as attributes as litellm's is; a reply that is not a success raises what
        litellm raises for it."""
        model = route.split("/", 1)[1]
        body = {"model": model, "messages": messages, **self._mapped(model, params)}
        url = f"{api_base.rstrip('/')}/chat/completions"
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {api_key or ''}"}
        session = self._pooled()
        try:
            async with session.post(url, data=json.dumps(body), headers=headers,
                                    timeout=aiohttp.ClientTimeout(total=timeout_s)) as reply:
                headers = {k: v for k, v in reply.headers.items() if k.lower() not in _ENCODING_HEADERS}
                answered = HttpReply(reply.status, headers, await reply.read())
        except (aiohttp.ClientError, TimeoutError) as failure:  # no reply: what litellm makes of that
            return await _replay(route, api_base, api_key, messages, {**params, "timeout": timeout_s},
                                 _no_reply(failure))
        data = _completion(answered)
        if data is None:  # an error, or not a chat completion: what litellm makes of it
            return await _replay(route, api_base, api_key, messages, params, answered)
        return _attributes(data)

    def _mapped(self, model: str, params: dict[str, Any]) -> dict[str, Any]:
        known = self.param_maps.get(model)
        if known is not None and (body := known.body(params)) is not None:
            return body
        key = (model, json.dumps(params, sort_keys=True, default=str))
        if key not in self._bodies:
            from litellm.utils import get_optional_params

            self._bodies[key] = as_sent(get_optional_params(model=model, custom_llm_provider=PROVIDER,
                                                             **params))
            if len(self._bodies) > 4096:  # per-call seeds make new keys: keep the newest
                del self._bodies[next(iter(self._bodies))]
        return self._bodies[key]

    def _pooled(self) -> aiohttp.ClientSession:
        """The session of the running event loop (a test may run several loops, one after another)."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            self._drop()
            # No cap of its own: the models' limits (harness.models.limits) hold the concurrency.
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
            self._loop = loop
        return self._session

    def _drop(self) -> None:
        """Let go of the session and its connections without its event loop (which may be gone)."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            connector = session.connector
            session.detach()
            if connector is not None:
                with contextlib.suppress(Exception):
                    connector._close()  # sync: closes the pooled sockets

    def __del__(self) -> None:
        self._drop()


_ENCODING_HEADERS = frozenset({"content-encoding", "transfer-encoding", "content-length"})
"""How the body came over the wire: it is replayed decoded."""
_MESSAGE_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})


def _attributes(value: Any) -> Any:
    """JSON as nested attributes (`reply.choices[0].message.content`), as litellm's reply reads."""
    if isinstance(value, dict):
        return SimpleNamespace(**{key: _attributes(item) for key, item in value.items()})
    if isinstance(value, list):
        return [_attributes(item) for item in value]
    return value


def _completion(answered: HttpReply) -> dict[str, Any] | None:
    """The reply's JSON, if it is a successful chat completion with a message."""
    if answered.status != 200:
        return None
    try:
        data = json.loads(answered.body)
        message = data["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    usage = data.get("usage")
    if not isinstance(message, dict) or not (usage is None or isinstance(usage, dict)):
        return None
    return data


def as_json(value: Any) -> Any:
    """A direct reply back as its JSON (for litellm's cost function)."""
    if isinstance(value, SimpleNamespace):
        return {key: as_json(item) for key, item in vars(value).items()}
    if isinstance(value, list):
        return [as_json(item) for item in value]
    return value


async def _replay(route: str, api_base: str, api_key: str | None, messages: list[dict[str, Any]],
                  params: dict[str, Any], answered: HttpReply | Exception) -> Any:
    """Hand `answered` (a reply, or the failure to get one) to litellm as though its own request had
    met it: it raises its error for it, or (a success this path did not read) returns its reply."""

    import httpx
    import litellm
    import openai

    def reply(request: httpx.Request) -> httpx.Response:
        if isinstance(answered, Exception):  # httpx's TransportError (`_no_reply`)
            raise answered
        return httpx.Response(answered.status, headers=answered.headers, content=answered.body,
                              request=request)

    client = openai.AsyncOpenAI(api_key=api_key or "unused", base_url=api_base, max_retries=0,
                                http_client=httpx.AsyncClient(transport=httpx.MockTransport(reply)))
    try:
        return await litellm.acompletion(model=route, messages=messages, api_base=api_base, api_key=api_key,
                                         client=client, num_retries=0, **params)
    finally:
        await client.close()


def _no_reply(failure: BaseException) -> Exception:
    """The request's failure as httpx (which litellm's OpenAI client uses) would have met it."""
    import httpx

    message = f"{type(failure).__name__}: {failure}"
    if isinstance(failure, TimeoutError | aiohttp.ServerTimeoutError):
        return httpx.ReadTimeout(message)
    return httpx.ConnectError(message)
