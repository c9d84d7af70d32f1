"""Thin Ray actors: hosting and scheduling only.

- agent workers host many agent runs as asyncio tasks in one process each, so a machine's cores
  serve many agents without one process per agent; each worker has its own `Gateway` replica, so
  no single process sees every model call (the models' limits stay global: harness.limits);
- the writer actor wraps `TableWriter` (one per job);
- a `ModelLimits` actor (one per run or sweep) holds the limits the replicas share.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
import warnings
from typing import Any

import ray
from pydantic import BaseModel

from envs.base import Environment
from harness.config import CacheSettings, EndpointSettings
from harness.limits import SharedLimits
from harness.plan import AgentRunSpec, build_environment, episode_ids
from harness.runner import RunOutcome, run_agent


class ActorSink:
    """Sends rows to the writer actor in batches (one Ray call for many episodes' rows, at most
    FLUSH_S late), without waiting; `drain` sends the rest and waits until all have arrived. A
    worker that dies loses at most its unsent batch, whose episodes have no row at the writer yet
    and so are run again (AgentWorker.run)."""

    FLUSH_S = 0.1
    MAX_ROWS = 2000

    def __init__(self, actor: ray.actor.ActorHandle) -> None:
        self.actor = actor
        self._batch: dict[str, list[dict[str, Any]]] = {}
        self._rows = 0
        self._timer: asyncio.TimerHandle | None = None
        self._pending: list[ray.ObjectRef] = []

    def append(self, table: str, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        self._batch.setdefault(table, []).extend(rows)
        self._rows += len(rows)
        if self._rows >= self.MAX_ROWS:
            self._send()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.FLUSH_S, self._send)

    def _send(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._batch:
            self._pending.append(self.actor.append_many.remote(self._batch))
            self._batch, self._rows = {}, 0
        if len(self._pending) > 256:  # forget the sends that have already arrived
            _, self._pending = ray.wait(self._pending, num_returns=len(self._pending), timeout=0)

    async def drain(self) -> None:
        self._send()
        pending, self._pending = self._pending, []
        await asyncio.gather(*pending)


class WorkerReport(BaseModel):
    outcomes: list[RunOutcome]
    env_setup_s: dict[str, float]
    """Seconds this worker spent building each environment and its tasks' resources."""


class AgentWorker:
    def __init__(self, writer: str, limits: str, models: list[EndpointSettings],
                 answer_key: dict[str, str] | None, cache: CacheSettings) -> None:
        """Peers by actor name, not handle: a restarted worker looks them up again (handles passed
        as constructor arguments would live in the object store, which a restart must not rely on).
        The gateway (and so litellm: seconds) is imported here, so the worker is ready only once
        that is paid; it is built in `_connect`, which must not block the event loop."""
        import harness.gateway  # noqa: F401

        self._models, self._answer_key, self._cache = models, answer_key, cache
        self._limits_name = limits
        self.limits: SharedLimits | None = None
        self.gateway: Any = None
        self.writer = ray.get_actor(writer)
        self.sink = ActorSink(self.writer)
        self._environments: dict[str, Environment] = {}

    async def _connect(self) -> None:
        """Join the model limits (a restarted worker gets back what its dead process held) and
        build this worker's gateway replica, pointed at the local model servers of the run."""
        if self.gateway is not None:
            return
        name = ray.get_runtime_context().get_actor_name()
        limiter = ray.get_actor(self._limits_name)
        await limiter.register.remote(name)
        from harness.gateway import Gateway

        self.limits = SharedLimits(limiter, name)
        servers = await limiter.local_servers.remote()
        self.gateway = Gateway(self._models, servers, self._answer_key, self._cache, limits=self.limits)

    def reclaim(self, key: str) -> None:
        """Called by the limits actor: another replica waits for this model."""
        if self.limits is not None:
            self.limits.reclaim(key)

    def cool_down(self, key: str, seconds: float) -> None:
        """Called by the limits actor: another replica met a 429 on this model."""
        if self.limits is not None:
            self.limits.cool_down(key, seconds)

    def _environment(self, env_cfg: dict[str, Any]) -> Environment:
        key = json.dumps(env_cfg, sort_keys=True)
        if key not in self._environments:
            self._environments[key] = build_environment(env_cfg)
        return self._environments[key]

    def setup(self, specs: list[AgentRunSpec]) -> dict[str, float]:
        """Build each environment once and everything its tasks need; seconds per env."""
        seconds: dict[str, float] = {}
        for spec in specs:
            clock = time.perf_counter()
            env = self._environment(spec.env_cfg)
            env.setup([*spec.tasks, *spec.tuning_tasks])
            seconds[spec.env] = seconds.get(spec.env, 0.0) + time.perf_counter() - clock
        return seconds

    async def run(self, specs: list[AgentRunSpec]) -> WorkerReport:
        await self._connect()
        if _restarted():
            # Ray restarted this worker after its process died and retries this call: carry on
            # from what the writer has, as a resume would (replay finished episodes, run the rest).
            finished = set(await self.writer.restart_runs.remote([s.run_id for s in specs]))
            specs = [s.model_copy(update={"finished": sorted(finished & set(episode_ids(s)))})
                     for s in specs]
        setup_s = await asyncio.to_thread(self.setup, specs)
        _settle_the_heap()
        try:
            outcomes = await asyncio.gather(*(
                run_agent(spec, self._environment(spec.env_cfg), self.gateway, self.sink) for spec in specs))
        finally:
            await self.sink.drain()
        return WorkerReport(outcomes=list(outcomes), env_setup_s=setup_s)


def _settle_the_heap() -> None:
    """Stop the garbage collector rescanning what is here to stay (litellm, the environments,
    the tasks) and let young objects pile up longer between collections: many agents' calls make
    garbage fast, and with Python's defaults the collector took about a quarter of a worker's CPU
    per episode (8.3 -> 6.1 ms per episode in-process, 64 agents on the scripted model)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def _restarted() -> bool:
    """Whether Ray restarted this actor after its process died."""
    with warnings.catch_warnings():  # Ray 2.60's own property trips its deprecated actor_id
        warnings.simplefilter("ignore", DeprecationWarning)
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)
