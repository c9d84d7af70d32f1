"""Thin Ray actors: hosting and scheduling only (harness/driver/pool.py starts them, once per sweep).

- agent workers host many agent runs, of any job, as asyncio tasks in one process each, so a
  machine's cores serve many agents without one process per agent or per job; each worker has its
  own `Gateway` replica, so no single process sees every model call (the models' limits stay
  global: harness.models.limits);
- the writer hub (harness/driver/hub.py) holds one `TableWriter` per job, each writing into its own
  job's directory: a module of its own, so that an agent worker, which imports this one, never
  imports the tables' pyarrow (this module's import took 618 ms with it, 245 ms without it);
- a `ModelLimits` actor (one per run or sweep) holds the limits the replicas share.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import time
import warnings
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import ray
from pydantic import BaseModel

from envs.base import Environment
from harness.agent_run.components import build_environment
from harness.agent_run.runner import RunOutcome, run_agent
from harness.agent_run.spec import AgentRunSpec, CheckedParams, episode_ids
from harness.config import EndpointSettings, HarnessConfig
from harness.driver.preflight import check_models
from harness.models.limits import SharedLimits
from harness.models.minilm import MiniLMService


class ActorSink:
    """Sends rows of every job this worker serves to the writer hub in batches (one Ray call for many
    episodes' rows, at most FLUSH_S late), without waiting; `drain` sends the rest and waits until
    all have arrived. A worker that dies loses at most its unsent batch, whose episodes have no row
    at the writer yet and so are run again (AgentWorker.run)."""

    FLUSH_S = 0.1
    MAX_ROWS = 2000

    def __init__(self, hub: ray.actor.ActorHandle) -> None:
        self.hub = hub
        self._batch: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self._rows = 0
        self._timer: asyncio.TimerHandle | None = None
        self._pending: list[ray.ObjectRef] = []

    def append(self, job: str, table: str, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        self._batch.setdefault(job, {}).setdefault(table, []).extend(rows)
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
            self._pending.append(self.hub.append_many.remote(self._batch))
            self._batch, self._rows = {}, 0
        if len(self._pending) > 256:  # forget the sends that have already arrived
            _, self._pending = ray.wait(self._pending, num_returns=len(self._pending), timeout=0)

    async def drain(self) -> None:
        """Send what is batched and wait until every send so far has arrived. The sends are awaited,
        not taken: the worker's jobs share this sink, and a drain that took them left a job ending at
        the same moment nothing to wait for, so its driver closed its writer before its rows arrived
        (the hub drops rows of a closed job: a job "finished" with no episode rows, seen in the
        two-node and warm-pool tests)."""
        self._send()
        await asyncio.gather(*list(self._pending))


@dataclass(frozen=True)
class JobSink:
    """One job's rows, through its worker's sink (harness.agent_run.runner.RecordSink)."""

    sink: ActorSink
    job: str

    def append(self, table: str, rows: list[dict[str, Any]]) -> None:
        self.sink.append(self.job, table, rows)


class WorkerReport(BaseModel):
    outcomes: list[RunOutcome]
    env_setup_s: dict[str, float]
    """Seconds this worker spent building each environment and its tasks' resources."""


class AgentWorker:
    def __init__(self, hub: str, limits: str, load_litellm: bool = False) -> None:
        """Peers by actor name, not handle: a restarted worker looks them up again (handles passed
        as constructor arguments would live in the object store, which a restart must not rely on).
        The gateway is imported here, so the worker is ready only once that is paid (litellm is not:
        a job's models import it where they need it, harness/models/lazy_litellm.py); it is built in
        `_connect`, which must not block the event loop. `load_litellm`: import it now too (a warm
        pool's worker, ready for any model and for the checks of the commands it serves)."""
        import harness.models.gateway  # noqa: F401

        if load_litellm:
            self.load_litellm()

        self._limits_name = limits
        self.limits: SharedLimits | None = None
        self.gateway: Any = None
        self.hub = ray.get_actor(hub)
        self.sink = ActorSink(self.hub)
        self._environments: dict[str, Environment] = {}
        self._connecting = asyncio.Lock()
        self._setting_up = asyncio.Lock()

    async def _connect(self) -> None:
        """Join the model limits (a restarted worker gets back what its dead process held) and
        build this worker's gateway replica, pointed at the local model servers of the pool. Once:
        the jobs' first calls arrive together, and a second gateway would take litellm's in-process
        providers (and the answer keys registered with them) from the first."""
        async with self._connecting:
            if self.gateway is None:
                await self._build_gateway()

    async def _build_gateway(self) -> None:
        name = ray.get_runtime_context().get_actor_name()
        limiter = ray.get_actor(self._limits_name)
        await limiter.register.remote(name)
        from harness.models.gateway import Gateway

        self.limits = SharedLimits(limiter, name)
        servers = await limiter.local_servers.remote()
        gateway = Gateway([], servers, limits=self.limits)
        node = ray.get_runtime_context().get_node_id()
        with contextlib.suppress(ValueError):  # no service on this node (it joined later): load here
            gateway.use_embedding_service(ray.get_actor(MiniLMService.actor_name(self._limits_name, node)))
        self.gateway = gateway

    def load_litellm(self) -> None:
        """Import litellm now, before this worker's first job (its models need it: harness/driver/session.py
        `start_pool`), so that every worker's runs start together, not each after its own import."""
        from harness.models.lazy_litellm import load_litellm

        load_litellm()

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

    async def check_models(self, settings: HarnessConfig) -> CheckedParams:
        """A job's preflight model checks (harness/driver/preflight.py), on a warm pool's worker, where
        litellm is imported already and the calls will be sent from; the parameters to send."""
        return await asyncio.to_thread(check_models, settings)

    async def run(self, job: str, specs: list[AgentRunSpec], params: CheckedParams,
                  finished: dict[str, list[str]], models: list[EndpointSettings],
                  answer_key: dict[str, str] | None) -> WorkerReport:
        """Run these agent runs of `job` (its directory: where the hub writes its rows) to the end,
        their model calls sent with the job's checked `params`, the episodes a resume found
        `finished` replayed without being written. If one stops the job (its model is unavailable,
        its disk is full), the others are cancelled: the job stops, and a resume runs their
        unfinished episodes again."""
        await self._connect()
        maps = {params.param_map.model: params.param_map} if params.param_map else {}
        self.gateway.register(models, answer_key=answer_key, param_maps=maps)
        if _restarted():
            # Ray restarted this worker after its process died and retries this call: carry on
            # from what the writer has, as a resume would (replay finished episodes, run the rest).
            written = set(await self.hub.restart_runs.remote(job, [s.run_id for s in specs]))
            finished = {s.run_id: sorted(written & set(episode_ids(s))) for s in specs}
        async with self._setting_up:  # another job's set-up may be building the same environment
            setup_s = await asyncio.to_thread(self.setup, specs)
            _settle_the_heap()
        sink = JobSink(self.sink, job)
        cancelled = False
        try:
            outcomes = await _all_or_none([run_agent(spec, params, self._environment(spec.env_cfg),
                                                     self.gateway, sink, finished.get(spec.run_id, ()))
                                           for spec in specs])
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            # What the runs sent goes to the hub however they ended. Runs their job cancelled (its
            # sweep is stopping) may find the hub already gone: the job has said why, once.
            # (Ray cancels the calls a cancelled run made, its rows' sends among them.)
            with contextlib.suppress(*((ray.exceptions.RayError,) if cancelled else ())):
                await self.sink.drain()
        return WorkerReport(outcomes=outcomes, env_setup_s=setup_s)


async def _all_or_none(runs: list[Coroutine[Any, Any, RunOutcome]]) -> list[RunOutcome]:
    """Every run's outcome; on the first failure the other runs are cancelled and awaited, then the
    failure is raised as it is. Cancelled itself (its job stopped), it cancels them all and stays
    cancelled: a run's failure raised in its place would end a call nobody awaits any more, which
    asyncio reports on the worker's log as a traceback ("exception was never retrieved")."""
    tasks = [asyncio.ensure_future(run) for run in runs]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        unfinished = [task for task in tasks if not task.done()]
        for task in unfinished:
            task.cancel()
        await asyncio.gather(*unfinished, return_exceptions=True)
    # Every failure is retrieved (the first is raised), so asyncio logs none of the others.
    failures = [task.exception() for task in tasks if not task.cancelled() and task.exception() is not None]
    if failures:
        raise failures[0]
    return [task.result() for task in tasks]


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
