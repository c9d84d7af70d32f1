"""The agent pool: the actors that serve every job of a sweep; a single run is a sweep of one.

- agent workers (harness/driver/actors.py), one per CPU of the cluster unless `ray.num_workers` says how
  many, spread over its nodes; each holds one gateway replica (importing litellm only where its jobs'
  models need it: harness/models/lazy_litellm.py), and hosts the
  agent runs of any job as asyncio tasks (an agent run's memory, budget and records stay its own);
- one writer hub (harness/driver/hub.py) on the driver's node, with a `TableWriter` for each job,
  writing into the job's own directory;
- the model limits actor (harness/models/limits.py) and the local model servers it knows;
- where a job embeds with the local MiniLM, one `MiniLMService` per node (harness/models/minilm.py): the
  model loaded once per node, the requests of all its workers batched into shared forward passes.

So a job costs its plan, its writer, its tables and its resume, not processes: a 64-job sweep
starts the same few actors as one run, and pays their start-up (their processes and imports, a local model's
load) once. Agent runs go to the least loaded workers as jobs submit them. A pool is started in one
place, for a single run and a sweep alike: harness/driver/session.py `start_pool`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from harness.agent_run.spec import AgentRunSpec, CheckedParams
from harness.config import EndpointSettings, HarnessConfig, ModelSettings, RaySettings
from harness.driver import signals
from harness.driver.actors import AgentWorker
from harness.driver.hub import WriterHub
from harness.errors import root_cause
from harness.models.limits import ModelLimits
from harness.models.minilm import MINILM_PREFIX, MiniLMService
from harness.models.model_server import LocalModelServer

WORKER_RESTARTS = 3
"""How often Ray restarts a dead agent worker (OOM, segfault, kill -9) before its jobs give up."""


@dataclass
class AgentPool:
    limits_name: str
    """The named actor that holds every model's limits (harness.models.limits)."""
    hub: ray.actor.ActorHandle
    workers: list[ray.actor.ActorHandle]
    servers: tuple[LocalModelServer, ...]
    """Local model servers the pool started, watched by whoever waits on the pool's jobs."""
    stopping: threading.Event = field(default_factory=threading.Event)
    """Set when whoever started the pool is stopping it: its jobs' threads then end without
    reporting the actors it kills as failures."""
    stop_reason: str | None = None
    """Why it is stopping, when a signal or the user stopped it (its jobs' manifests say so)."""
    ray_address: str | None = None
    """The Ray it runs on (its GCS address), as harness/driver/session.py `start_pool` started or
    joined it; each job's manifest records it."""
    dashboard_url: str | None = None
    """That Ray's dashboard, where the command started one."""
    loading: list[ray.ObjectRef] = field(default_factory=list)
    """The workers' litellm imports, where its jobs' models need it (`start_pool`): part of being ready."""
    _load: list[int] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._load = [0] * len(self.workers)

    def assign(self, specs: Sequence[AgentRunSpec]) -> list[tuple[int, list[AgentRunSpec]]]:
        """Each agent run to the worker with the fewest agent runs at the moment (a sweep's jobs
        submit from threads of their own); (worker index, its agent runs) per worker used."""
        batches: dict[int, list[AgentRunSpec]] = {}
        with self._lock:
            for spec in specs:
                index = min(range(len(self.workers)), key=self._load.__getitem__)
                self._load[index] += 1
                batches.setdefault(index, []).append(spec)
        return sorted(batches.items())

    def check_models(self, settings: HarnessConfig) -> CheckedParams:
        """The job's preflight model checks on a warm pool's worker, which has litellm imported already
        (the command's driver need not import it: seconds); a failed check raises here as it would in
        the driver."""
        try:
            return ray.get(self.workers[0].check_models.remote(settings))
        except ray.exceptions.RayTaskError as error:
            raise root_cause(error) from None

    def release(self, assignments: list[tuple[int, list[AgentRunSpec]]]) -> None:
        with self._lock:
            for index, batch in assignments:
                self._load[index] -= len(batch)


def start_workers(settings: RaySettings, stack: contextlib.ExitStack, name: str,
                  agent_runs: int | None = None) -> AgentPool:
    """The model limits actor, the writer hub and the agent workers, not waited for: each worker
    starts (a process, its imports) while the caller goes on (a sweep composes its jobs' configs
    meanwhile). Before the first job runs, `serve_models` starts what its models need. Never more
    workers than `agent_runs` (at least that many are coming), as each costs a process."""
    size = settings.num_workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    limits, hub, workers = spawn_pool_actors(name, min(size, agent_runs) if agent_runs else size)
    stack.callback(ray.kill, limits)
    stack.callback(ray.kill, hub)
    flush_on_signal(hub, stack)
    for actor in workers:
        stack.callback(ray.kill, actor)
    return AgentPool(name, hub, workers, ())


def spawn_pool_actors(name: str, size: int, load_litellm: bool = False
                      ) -> tuple[ray.actor.ActorHandle, ray.actor.ActorHandle, list[ray.actor.ActorHandle]]:
    """The model limits actor (named `name`), the writer hub (on this node) and `size` agent workers,
    all named after `name`; owned by the caller (a command, or the warm pool's keeper, whose workers
    `load_litellm` before they are ready)."""
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
    hub = ray.remote(num_cpus=0)(WriterHub).options(name=hub_name(name), scheduling_strategy=here).remote()
    # SPREAD: on a cluster, workers go to different nodes (their cost is CPU, not num_cpus). Ray
    # sends an actor that asks for no resource at all to a random node, so each asks for one byte.
    # A worker whose process dies is restarted by Ray and its calls retried; each carries on from
    # what the writer holds (AgentWorker.run), so its jobs end with the rows of uninterrupted ones.
    worker = ray.remote(num_cpus=0, memory=1, max_restarts=WORKER_RESTARTS,
                        max_task_retries=WORKER_RESTARTS)(AgentWorker)
    workers = [worker.options(name=worker_name(name, i), scheduling_strategy="SPREAD")
               .remote(hub_name(name), name, load_litellm) for i in range(size)]
    # Last: the hub and the workers take the processes Ray started ahead (one per CPU); the workers
    # need the limits only at their first call.
    limits = ray.remote(ModelLimits).options(num_cpus=0, name=name).remote()
    return limits, hub, workers


def flush_on_signal(hub: ray.actor.ActorHandle, stack: contextlib.ExitStack) -> None:
    """A SIGTERM or SIGHUP flushes every job's rows at once, before a second signal may end it all;
    until `stack` closes."""
    stack.callback(signals.on_first_signal(lambda: ray.get(hub.flush_all.remote(), timeout=60)))


def hub_name(pool: str) -> str:
    return f"{pool} writer"


def worker_name(pool: str, index: int) -> str:
    return f"{pool} agents #{index}"


def serve_models(pool: AgentPool, models: Sequence[EndpointSettings], log_dir: Path,
                 stack: contextlib.ExitStack) -> None:
    """The local model servers and the embedder services of `models` (every model its jobs use)."""
    limits = ray.get_actor(pool.limits_name)
    pool.servers = tuple(start_local_servers(models, log_dir, stack, limits))
    start_embedders(models, stack, pool.limits_name)


def start_embedders(models: Sequence[EndpointSettings], stack: contextlib.ExitStack, name: str) -> None:
    """A MiniLM service on every live node, if any model is the local MiniLM (`local/...`); the
    workers find their node's by name (AgentWorker), and Ray restarts one whose process dies."""
    if not any(model.name.startswith(f"{MINILM_PREFIX}/") for model in models):
        return
    service = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)(MiniLMService)
    for node in ray.nodes():
        if node.get("Alive"):
            on_node = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            actor = service.options(name=MiniLMService.actor_name(name, node["NodeID"]),
                                    scheduling_strategy=on_node).remote()
            stack.callback(ray.kill, actor)


def start_local_servers(models: Sequence[EndpointSettings], log_dir: Path, stack: contextlib.ExitStack,
                        limits: ray.actor.ActorHandle) -> list[LocalModelServer]:
    """A local model server for each model the harness serves itself, made known to the limits
    actor (the workers ask it where their models are); every one started is stopped when `stack`
    closes."""
    local_servers: dict[str, str] = {}
    servers: list[LocalModelServer] = []
    for model in models:
        if isinstance(model, ModelSettings) and model.serves_locally and model.name not in local_servers:
            assert model.local_server is not None
            print(f"starting local model server ({model.local_server.file}) ...", flush=True)
            server = stack.enter_context(LocalModelServer(model.local_server, log_dir / "model_server.log"))
            local_servers[model.name] = server.api_base
            servers.append(server)
    if local_servers:  # else nothing to wait for (the limits actor may still be starting)
        ray.get(limits.add_local_servers.remote(local_servers))
    return servers
