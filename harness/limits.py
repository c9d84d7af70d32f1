"""Per-model pacing shared by every agent that uses the model: requests per minute, and one
back-off for all of them when the provider answers 429 (so 64 agents do not retry into it at once).
The concurrency cap (in-flight requests) is a semaphore in the gateway."""

from __future__ import annotations

import asyncio
import time


class RateGate:
    def __init__(self, requests_per_minute: int | None) -> None:
        self.interval = 60.0 / requests_per_minute if requests_per_minute else 0.0
        self._next_slot = 0.0
        self._cooldown_until = 0.0

    async def wait(self) -> float:
        """Wait for a send slot; returns the seconds waited."""
        started = time.monotonic()
        while True:
            now = time.monotonic()
            ready = max(self._cooldown_until, self._next_slot if self.interval else 0.0)
            if now >= ready:
                break
            await asyncio.sleep(ready - now)
        if self.interval:
            self._next_slot = max(time.monotonic(), self._next_slot) + self.interval
        return time.monotonic() - started

    def back_off(self, seconds: float) -> None:
        """After a 429: nobody sends to this model for `seconds`."""
        self._cooldown_until = max(self._cooldown_until, time.monotonic() + seconds)
