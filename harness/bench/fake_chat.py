"""The bench's HTTP model: a small OpenAI-compatible server that answers every chat request after a
fixed latency (`FakeChatServer`, aiohttp, one event loop), and the same in a process of its own
(`ServerProcess`), whose CPU is neither the bench's nor the measured command's. The sweep and versus
measurements point whole commands at it (`model=litellm model.name=openai/fake model.api_base=...`);
tests point litellm and the gateway at it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from typing import Any

from aiohttp import web

from harness.models.local_http import LocalHttpServer

MODEL = "openai/fake"
"""The model's name for litellm: an OpenAI-compatible server at `api_base`."""


class FakeChatServer(LocalHttpServer):
    """An OpenAI-compatible chat-completions endpoint that answers `answer` after `latency_s`.

    One asyncio event loop (aiohttp), so hundreds of requests wait their latency at once.
    `POST /v1/chat/completions` answers with a `usage` block (prompt tokens: the messages' characters
    / 4; completion tokens: the answer's), or with `status` and an OpenAI-style error when that is
    not 200; `GET /v1/models` lists the one model. For the bench: `GET /bench/log` returns the
    arrival time (Unix seconds) of every chat request and the most that were in flight at once;
    `POST /bench/reset` clears both. `requests` keeps each request's path, Authorization header
    and body, in arrival order.

    `start()` serves from a daemon thread of this process (tests); `serve_forever` serves in the
    process that calls it, which `ServerProcess` starts for the bench.
    """

    backlog = 2048  # hundreds of agents connect at once

    def __init__(self, latency_s: float = 0.2, answer: str = "Paris", status: int = 200,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        self.latency_s, self.answer, self.status = latency_s, answer, status
        super().__init__(host, port)
        self.requests: list[dict[str, Any]] = []
        self.arrivals: list[float] = []
        self.in_flight = 0
        self.peak_in_flight = 0

    @property
    def api_base(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def app(self) -> Any:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/bench/log", self._log)
        app.router.add_post("/bench/reset", self._reset)
        return app

    async def _chat(self, request: Any) -> Any:
        self.arrivals.append(time.time())
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            body = await request.json()
            self.requests.append({"path": request.path, "auth": request.headers.get("Authorization"),
                                  "body": body})
            await asyncio.sleep(self.latency_s)
        finally:
            self.in_flight -= 1
        if self.status != 200:
            return web.json_response({"error": {"message": f"fake server answers {self.status}",
                                                "type": "invalid_request_error", "code": str(self.status)}},
                                     status=self.status)
        chars = sum(len(m.get("content") or "") if isinstance(m.get("content"), str)
                    else len(json.dumps(m.get("content"))) for m in body.get("messages", []))
        prompt_tokens, completion_tokens = max(1, chars // 4), max(1, len(self.answer) // 4)
        return web.json_response({
            "id": f"chatcmpl-{len(self.arrivals)}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": self.answer}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}})

    async def _models(self, request: Any) -> Any:
        return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model",
                                                               "created": 0, "owned_by": "bench"}]})

    async def _log(self, request: Any) -> Any:
        return web.json_response({"arrivals": self.arrivals, "peak_in_flight": self.peak_in_flight})

    async def _reset(self, request: Any) -> Any:
        self.arrivals, self.requests, self.peak_in_flight = [], [], self.in_flight
        return web.json_response({"ok": True})


def serve_forever(latency_s: float, port: int = 0) -> None:
    """The server in this process, until killed; prints `port <n>` once it listens."""
    server = FakeChatServer(latency_s, port=port)

    async def main() -> None:
        await server._start()
        print(f"port {server.port}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


class ServerProcess:
    """`FakeChatServer` in a subprocess (its CPU is neither the bench's nor the measured run's)."""

    def __init__(self, latency_s: float = 0.2) -> None:
        self.latency_s = latency_s
        serve = f"from harness.bench.fake_chat import serve_forever; serve_forever({latency_s!r})"
        self.process = subprocess.Popen([sys.executable, "-c", serve], stdout=subprocess.PIPE, text=True,
                                        start_new_session=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("port "):
            self.close()
            raise RuntimeError(f"the fake chat server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.api_base = f"http://127.0.0.1:{self.port}/v1"

    def _call(self, method: str, path: str) -> dict[str, Any]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method,
                                         data=b"" if method == "POST" else None)
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read())

    def reset(self) -> None:
        self._call("POST", "/bench/reset")

    def log(self) -> dict[str, Any]:
        return self._call("GET", "/bench/log")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
