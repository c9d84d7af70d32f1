"""`LocalHttpServer`: an aiohttp app served on 127.0.0.1 from a daemon thread of this process, the
common part of the local HTTP models that the bench and the tests point litellm at
(`harness.bench.fake_chat.FakeChatServer`, `harness.models.wire_server.WireServer`)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Self


class LocalHttpServer:
    """Subclasses give `app()`; `start()` returns once it listens (`port` 0: a free one, filled in)."""

    backlog = 128
    """Connections the socket queues before accepting them (aiohttp's default)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host, self.port = host, port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: Any = None

    def app(self) -> Any:
        raise NotImplementedError

    async def _start(self) -> None:
        from aiohttp import web

        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=self.backlog)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def start(self) -> Self:
        """Serve from a daemon thread; returns once it listens."""
        ready = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._start())
            ready.set()
            self._loop.run_forever()

        threading.Thread(target=serve, daemon=True, name=type(self).__name__).start()
        if not ready.wait(30):
            raise RuntimeError(f"{type(self).__name__} did not start in 30 s")
        return self

    def close(self) -> None:
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
