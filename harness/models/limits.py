"""Per-model limits shared by every agent that uses the model, however many gateway replicas serve
it: the concurrency cap (requests in flight), requests per minute, and one back-off for all callers
when the provider answers 429 (so 64 agents do not retry into it at once).

Every agent worker hosts its own gateway (no single process sees every call); the limits stay
global through one small `ModelLimits` actor per run or sweep:
- concurrency permits are leased in batches: a replica asks for as many as it has callers waiting
  and, for LEASE_S, passes them from caller to caller without asking anyone; then they go back to
  the actor as they come free (first come, first served there). When another replica waits, the
  actor asks every holder to hand back at once what it does not use;
- a send slot under `requests_per_minute` is asked of the actor for each send (a paced model is
  slow by definition, so the hop is cheap beside it);
- a 429 seen by one replica is broadcast by the actor to every other replica of the model.
`LocalLimits` is the same contract inside one process (tests, the bench, a lone gateway).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any, Protocol

LEASE_S = 0.5
"""How long a replica may pass leased permits from caller to caller before they go back."""


class Limits(Protocol):
    def permit(self, key: str, capacity: int) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold one of the model's `capacity` in-flight slots."""

    async def pace(self, key: str, requests_per_minute: int | None) -> float:
        """Wait for a send slot (the rate, and any shared back-off); returns the seconds waited."""

    def back_off(self, key: str, seconds: float) -> None:
        """After a 429: nobody sends to this model for `seconds`."""


class RateGate:
    """Send slots at a fixed rate, and a cool-down after a 429, in one process."""

    def __init__(self, requests_per_minute: int | None) -> None:
        self.interval = 60.0 / requests_per_minute if requests_per_minute else 0.0
        self._next_slot = 0.0
        self._cooldown_until = 0.0

    def reserve(self) -> float:
        """Take the next slot; seconds until it (0: send now)."""
        now = time.monotonic()
        ready = max(now, self._cooldown_until, self._next_slot if self.interval else 0.0)
        if self.interval:
            self._next_slot = ready + self.interval
        return ready - now

    def cooldown(self) -> float:
        return max(0.0, self._cooldown_until - time.monotonic())

    async def wait(self) -> float:
        """Wait for a send slot; returns the seconds waited."""
        started = time.monotonic()
        delay = self.reserve()
        while delay > 0:
            await asyncio.sleep(delay)
            delay = self.cooldown()  # a back-off that arrived while this caller slept
        return time.monotonic() - started

    def back_off(self, seconds: float) -> None:
        self._cooldown_until = max(self._cooldown_until, time.monotonic() + seconds)


def gate_of(gates: dict[str, RateGate], key: str, requests_per_minute: int | None) -> RateGate:
    """The model's gate, made on first use; a rate given later (the first use may be a back-off,
    which knows none) still sets its pace."""
    gate = gates.setdefault(key, RateGate(requests_per_minute))
    if requests_per_minute:
        gate.interval = 60.0 / requests_per_minute
    return gate


class LocalLimits:
    """The limits of one process: a semaphore and a rate gate per model."""

    def __init__(self) -> None:
        self._semaphores: dict[str, asyncio.Semaphore] = {}
        self._gates: dict[str, RateGate] = {}

    @contextlib.asynccontextmanager
    async def permit(self, key: str, capacity: int) -> AsyncIterator[None]:
        async with self._semaphores.setdefault(key, asyncio.Semaphore(capacity)):
            yield

    def gate(self, key: str, requests_per_minute: int | None) -> RateGate:
        return gate_of(self._gates, key, requests_per_minute)

    async def pace(self, key: str, requests_per_minute: int | None) -> float:
        return await self.gate(key, requests_per_minute).wait()

    def back_off(self, key: str, seconds: float) -> None:
        self.gate(key, None).back_off(seconds)


class _Pool:
    def __init__(self, capacity: int) -> None:
        self.free = capacity
        self.waiters: deque[tuple[asyncio.Future[int], str, int]] = deque()
        self.held: dict[str, int] = {}


class ModelLimits:
    """The Ray actor that keeps every model's limits global across gateway replicas (and, in a
    sweep, across jobs); it also tells jobs which local model servers the sweep started. Replicas
    are named actors: it calls `reclaim` and `cool_down` on them."""

    def __init__(self, local_servers: dict[str, str] | None = None) -> None:
        self._local_servers = dict(local_servers or {})
        self._pools: dict[str, _Pool] = {}
        self._gates: dict[str, RateGate] = {}
        self._users: dict[str, set[str]] = {}
        """The replicas that use each model (to tell of a back-off)."""
        self._handles: dict[str, Any] = {}
        self.acquisitions = 0
        """Leases asked for (a replica that keeps its lease sends without asking)."""

    def local_servers(self) -> dict[str, str]:
        return self._local_servers

    def add_local_servers(self, servers: dict[str, str]) -> None:
        """Model name -> api_base of local model servers started after this actor."""
        self._local_servers.update(servers)

    def register(self, replica: str) -> None:
        """A replica starts (or restarts after its process died): what it held is free again."""
        for pool in self._pools.values():
            pool.free += pool.held.pop(replica, 0)
            self._grant(pool)

    async def acquire(self, key: str, capacity: int, replica: str, want: int) -> int:
        """Lease up to `want` permits (at least one; first come, first served). While a caller
        waits, every other holder is asked to hand back what it does not use."""
        self.acquisitions += 1
        pool = self._pools.setdefault(key, _Pool(capacity))
        self._users.setdefault(key, set()).add(replica)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        pool.waiters.append((future, replica, max(1, want)))
        self._grant(pool)
        if not future.done():
            for holder, count in pool.held.items():
                if count > 0 and holder != replica:
                    self._tell(holder, "reclaim", key)
        return await future

    def release(self, key: str, replica: str, count: int) -> None:
        pool = self._pools[key]
        count = min(count, pool.held.get(replica, 0))
        pool.held[replica] = pool.held.get(replica, 0) - count
        pool.free += count
        self._grant(pool)

    def in_use(self, key: str) -> int:
        """Permits leased out now: how the tests see a cap hold (tests/models/test_limits.py)."""
        pool = self._pools.get(key)
        return sum(pool.held.values()) if pool else 0

    @staticmethod
    def _grant(pool: _Pool) -> None:
        while pool.waiters and pool.free > 0:
            future, replica, want = pool.waiters.popleft()
            if future.done():  # the caller went away
                continue
            granted = min(want, pool.free)
            pool.free -= granted
            pool.held[replica] = pool.held.get(replica, 0) + granted
            future.set_result(granted)

    def slot(self, key: str, requests_per_minute: int | None) -> float:
        """Reserve the model's next send slot; seconds until it (a back-off included)."""
        return gate_of(self._gates, key, requests_per_minute).reserve()

    def back_off(self, key: str, seconds: float, replica: str) -> None:
        gate_of(self._gates, key, None).back_off(seconds)
        for other in self._users.get(key, ()):
            if other != replica:
                self._tell(other, "cool_down", key, seconds)

    def _tell(self, replica: str, method: str, *args: Any) -> None:
        import ray

        try:
            if replica not in self._handles:
                self._handles[replica] = ray.get_actor(replica)
            getattr(self._handles[replica], method).remote(*args)
        except ValueError:  # a replica that is gone needs no telling
            self._handles.pop(replica, None)


class _Lease:
    """The permits one replica holds for one model."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held = 0
        self.busy = 0
        self.waiters: deque[asyncio.Future[None]] = deque()
        self.asking = False
        self.until = 0.0
        """Until when permits may pass from caller to caller here (LEASE_S after the last grant)."""
        self.reclaimed = False
        """Another replica waits: hand permits back as they come free."""
        self.timer: asyncio.TimerHandle | None = None

    def may_keep(self) -> bool:
        return not self.reclaimed and time.monotonic() < self.until

    def hand_over(self) -> bool:
        """Give a permit to the next caller still waiting here; False if none is."""
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return True
        return False


class SharedLimits:
    """One replica's side of `ModelLimits` (see the module docstring). Within a lease a replica
    passes its permits from caller to caller without asking anyone; when the lease ends, or another
    replica waits, permits go back to the actor as they come free, so no replica waits for longer
    than a lease and a call, even if a `reclaim` crossed a grant on the way."""

    def __init__(self, actor: Any, replica: str) -> None:
        self.actor = actor
        self.replica = replica
        self.local = LocalLimits()
        """Back-offs already known here; the actor is asked only for what is not."""
        self._leases: dict[str, _Lease] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    @contextlib.asynccontextmanager
    async def permit(self, key: str, capacity: int) -> AsyncIterator[None]:
        lease = self._leases.setdefault(key, _Lease(capacity))
        if lease.busy < lease.held and not lease.waiters and lease.may_keep():
            lease.busy += 1
        else:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            lease.waiters.append(waiter)
            self._ask(key, lease)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._release(key, lease)  # handed a permit just as the caller went away
                raise
        try:
            yield
        finally:
            self._release(key, lease)

    def _release(self, key: str, lease: _Lease) -> None:
        if lease.may_keep() and lease.hand_over():
            return  # straight to the next caller here
        lease.busy -= 1
        if not lease.may_keep():
            self._return_idle(key, lease)
        if lease.waiters:
            self._ask(key, lease)

    def reclaim(self, key: str) -> None:
        """Another replica waits for this model: hand back what is idle now, the rest when done."""
        lease = self._leases.get(key)
        if lease is not None:
            lease.reclaimed = True
            self._return_idle(key, lease)

    def _return_idle(self, key: str, lease: _Lease) -> None:
        idle = lease.held - lease.busy
        if idle > 0:
            lease.held -= idle
            self._spawn(self._tell(self.actor.release.remote(key, self.replica, idle)))

    def _ask(self, key: str, lease: _Lease) -> None:
        if not lease.asking:
            lease.asking = True
            self._spawn(self._fetch(key, lease))

    async def _fetch(self, key: str, lease: _Lease) -> None:
        try:
            while any(not w.done() for w in lease.waiters):
                want = sum(not w.done() for w in lease.waiters)
                granted = await self._remote(
                    self.actor.acquire.remote(key, lease.capacity, self.replica, want))
                lease.held += granted
                lease.reclaimed = False
                lease.until = time.monotonic() + LEASE_S
                if lease.timer is not None:
                    lease.timer.cancel()
                lease.timer = asyncio.get_running_loop().call_later(LEASE_S, self._return_idle, key, lease)
                while lease.busy < lease.held and lease.hand_over():
                    lease.busy += 1
                if lease.busy < lease.held:  # the callers it was for went away
                    self._return_idle(key, lease)
        except BaseException as error:
            for waiter in lease.waiters:
                if not waiter.done():
                    waiter.set_exception(error)
            lease.waiters.clear()
        finally:
            lease.asking = False

    async def pace(self, key: str, requests_per_minute: int | None) -> float:
        waited = await self.local.pace(key, None)  # a back-off this replica knows of
        if requests_per_minute:
            delay = await self._remote(self.actor.slot.remote(key, requests_per_minute))
            await asyncio.sleep(delay)
            waited += delay
        return waited

    def back_off(self, key: str, seconds: float) -> None:
        self.local.back_off(key, seconds)
        self._spawn(self._tell(self.actor.back_off.remote(key, seconds, self.replica)))

    def cool_down(self, key: str, seconds: float) -> None:
        """Another replica met a 429 on this model: wait it out here too."""
        self.local.back_off(key, seconds)

    async def _remote(self, ref: Any) -> Any:
        import ray

        from harness.models.model_client import GatewayUnavailable

        try:
            return await ref
        except ray.exceptions.RayActorError as error:
            raise GatewayUnavailable(f"the model limits actor died: {error}") from None

    @staticmethod
    async def _tell(ref: Any) -> None:
        """A message nobody waits on: if the actor is gone, the next call that needs it says so."""
        with contextlib.suppress(Exception):
            await ref

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
