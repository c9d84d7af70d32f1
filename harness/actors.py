"""Thin Ray actors: hosting and scheduling only.

- the gateway actor wraps `Gateway` (one per job; the only process that imports litellm);
- the writer actor wraps `TableWriter` (one per job);
- agent workers host many agent runs as asyncio tasks in one light process each, so a machine's
  cores serve many agents without one heavy process per agent.
"""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from typing import Any

import ray
from pydantic import BaseModel

from envs.base import Environment
from harness.errors import one_line
from harness.model_client import CallRequest, CallResult, GatewayUnavailable
from harness.plan import AgentRunSpec, build_environment, episode_ids
from harness.runner import RunOutcome, run_agent


class GatewayActor:
    """Hosts the `Gateway`; imports it (and so litellm) only inside the actor's own process."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from harness.gateway import Gateway

        self.gateway = Gateway(*args, **kwargs)

    async def call(self, request: CallRequest) -> CallResult:
        return await self.gateway.call(request)

    def register(self, *args: Any, **kwargs: Any) -> None:
        self.gateway.register(*args, **kwargs)

    def serves_locally(self, name: str) -> bool:
        return self.gateway.serves_locally(name)


class ActorGatewayLink:
    def __init__(self, actor: ray.actor.ActorHandle) -> None:
        self.actor = actor

    async def call(self, request: CallRequest) -> CallResult:
        try:
            return await self.actor.call.remote(request)
        except ray.exceptions.RayActorError as error:
            raise GatewayUnavailable(f"the gateway actor died: {one_line(error)}") from None


class ActorSink:
    """Sends rows to the writer actor without waiting; `drain` waits until all have arrived."""

    def __init__(self, actor: ray.actor.ActorHandle) -> None:
        self.actor = actor
        self._pending: list[ray.ObjectRef] = []

    def append(self, table: str, rows: list[dict[str, Any]]) -> None:
        if rows:
            self._pending.append(self.actor.append.remote(table, rows))
        if len(self._pending) > 256:  # forget the sends that have already arrived
            _, self._pending = ray.wait(self._pending, num_returns=len(self._pending), timeout=0)

    async def drain(self) -> None:
        pending, self._pending = self._pending, []
        await asyncio.gather(*pending)


class WorkerReport(BaseModel):
    outcomes: list[RunOutcome]
    env_setup_s: dict[str, float]
    """Seconds this worker spent building each environment and its tasks' resources."""


class AgentWorker:
    def __init__(self, gateway: str, writer: str) -> None:
        """By actor name, not handle: a restarted worker looks its peers up again (handles passed as
        constructor arguments would live in the object store, which a restart must not rely on)."""
        self.gateway = ActorGatewayLink(ray.get_actor(gateway))
        self.writer = ray.get_actor(writer)
        self.sink = ActorSink(self.writer)
        self._environments: dict[str, Environment] = {}

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
        if _restarted():
            # Ray restarted this worker after its process died and retries this call: carry on
            # from what the writer has, as a resume would (replay finished episodes, run the rest).
            finished = set(await self.writer.restart_runs.remote([s.run_id for s in specs]))
            specs = [s.model_copy(update={"finished": sorted(finished & set(episode_ids(s)))})
                     for s in specs]
        setup_s = await asyncio.to_thread(self.setup, specs)
        try:
            outcomes = await asyncio.gather(*(
                run_agent(spec, self._environment(spec.env_cfg), self.gateway, self.sink) for spec in specs))
        finally:
            await self.sink.drain()
        return WorkerReport(outcomes=list(outcomes), env_setup_s=setup_s)


def _restarted() -> bool:
    """Whether Ray restarted this actor after its process died."""
    with warnings.catch_warnings():  # Ray 2.60's own property trips its deprecated actor_id
        warnings.simplefilter("ignore", DeprecationWarning)
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)
