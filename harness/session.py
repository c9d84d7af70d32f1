"""The session stage of a job (or a sweep): Ray started or attached, the model limits actor and the
local model servers started, and how to tell the user to resume when a part of it dies.

Everything started is registered on the caller's `contextlib.ExitStack`, so it stops again however
the job ends.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from hydra.core.hydra_config import HydraConfig

from harness import HARNESS_ENV
from harness.config import ConfigError, EndpointSettings, HarnessConfig, ModelSettings, RaySettings
from harness.errors import RunAborted, one_line
from harness.limits import ModelLimits
from harness.model_server import LocalModelServer
from harness.plan import AgentRunSpec


@dataclass(frozen=True)
class JobSession:
    """What the session stage started for the agent runs of one job."""

    limits_name: str
    """The named actor that holds every model's limits (harness.limits): the job's own, or its sweep's."""
    servers: tuple[LocalModelServer, ...]
    """Local model servers this job started, and watches (a sweep's are watched by its launcher)."""
    answer_key: dict[str, str] | None
    """Question -> reference, for the scripted model only (it answers right by a seeded draw)."""
    resume_hint: str
    """What to tell the user to type when the job stops on its way."""
    stack: contextlib.ExitStack
    """Where the execute stage registers what it starts, to be stopped with the session."""
    run_dir: Path
    """The job's directory, where its tables, memories and snapshots are written."""


def start_job_session(settings: HarnessConfig, specs: list[AgentRunSpec], run_dir: Path,
                      stack: contextlib.ExitStack, resume_hint: str) -> JobSession:
    """The model limits and local model servers of a job, on the Ray already started."""
    answer_key = ({t.question: t.answer for s in specs for t in [*s.tasks, *s.tuning_tasks]}
                  if settings.model.is_scripted else None)
    limits_name, servers = _job_model_limits(settings, run_dir, stack)
    return JobSession(limits_name, tuple(servers), answer_key, resume_hint, stack, run_dir)


def start_model_limits(models: list[EndpointSettings], log_dir: Path, stack: contextlib.ExitStack,
                       name: str) -> list[LocalModelServer]:
    """The actor that keeps these models' limits global across gateway replicas (harness.limits),
    with a local model server for each model the harness serves itself; everything started is
    stopped when `stack` closes."""
    local_servers: dict[str, str] = {}
    servers: list[LocalModelServer] = []
    for model in models:
        if isinstance(model, ModelSettings) and model.serves_locally and model.name not in local_servers:
            assert model.local_server is not None
            print(f"starting local model server ({model.local_server.file}) ...", flush=True)
            server = stack.enter_context(LocalModelServer(model.local_server, log_dir / "model_server.log"))
            local_servers[model.name] = server.api_base
            servers.append(server)
    limits = ray.remote(ModelLimits).options(num_cpus=0, name=name).remote(local_servers)
    stack.callback(ray.kill, limits)
    return servers


def _job_model_limits(settings: HarnessConfig, run_dir: Path, stack: contextlib.ExitStack
                      ) -> tuple[str, list[LocalModelServer]]:
    """The name of the sweep's shared limits actor when a launcher started one (ray.limits), else
    of this job's own (with the local model servers this job started, which it watches)."""
    if settings.ray.limits is None:
        name = f"model limits {settings.variant.name}-{settings.env.name}-{uuid.uuid4().hex[:6]}"
        servers = start_model_limits([settings.model, settings.embedder], run_dir, stack, name)
        return name, servers
    limits = ray.get_actor(settings.ray.limits)
    if settings.model.serves_locally and settings.model.name not in ray.get(limits.local_servers.remote()):
        raise ConfigError(f"invalid config: ray.limits: {settings.ray.limits} does not serve "
                          f"{settings.model.name} locally")
    return settings.ray.limits, []


def check_alive(servers: Sequence[LocalModelServer], resume_hint: str) -> None:
    """Stop the run (or sweep) in one line if a local model server it depends on has died."""
    for server in servers:
        code = server.exit_code()
        if code is not None:
            raise RunAborted(f"the local model server died (exit code {code}; see {server.log_path}); "
                             f"{resume_hint}")


def resume_hint(directory: Path, command: list[str] | None = None, sweep: bool = False) -> str:
    """What to type to carry on: `command` when the entry point gave one (a snapshot evaluation),
    else the same Hydra overrides, into the same run (or sweep) directory."""
    if command is not None and not sweep:
        return f"the episodes written so far are kept; resume with: {shlex.join(command)}"
    key = "hydra.sweep.dir" if sweep else "hydra.run.dir"
    overrides: list[str] = []
    if HydraConfig.initialized():
        overrides = [o for o in HydraConfig.get().overrides.task
                     if not o.startswith((f"{key}=", "ray.limits=", "progress="))]
    sweeping = ["-m"] if sweep else []
    again = shlex.join(["python", "-m", "harness", *sweeping, *overrides, f"{key}={directory}"])
    return f"the episodes written so far are kept; resume with: {again}"


@contextlib.contextmanager
def ray_session(settings: RaySettings) -> Iterator[tuple[str | None, str | None]]:
    """Start a Ray of this run's own, or attach to `ray.address`; reuse one already initialised
    in-process. Null never joins a cluster that happens to be running (`ray start`, RAY_ADDRESS):
    that could be someone else's. What it started or joined is printed."""
    if ray.is_initialized():
        yield ray.get_runtime_context().gcs_address, None
        return
    options: dict[str, Any] = {"logging_level": logging.WARNING,
                               "runtime_env": {"env_vars": dict(HARNESS_ENV)}}
    try:
        if settings.address is None or settings.address == "local":
            context = ray.init(address="local", include_dashboard=settings.include_dashboard,
                               dashboard_host="127.0.0.1", **options)
            joined = "started a local Ray for this run"
        else:
            context = ray.init(address=settings.address, **options)
            joined = f"attached to the Ray cluster at {settings.address}"
    except Exception as error:  # e.g. a node that timed out starting on an overloaded machine
        where = "start a local Ray" if settings.address in (None, "local") else f"reach {settings.address}"
        raise RunAborted(f"could not {where} ({one_line(error, 300)}); nothing was run") from None
    try:
        gcs = context.address_info.get("gcs_address")
        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        print(f"{joined} ({gcs}, {nodes} node{'s' if nodes != 1 else ''})", flush=True)
        dashboard = context.dashboard_url or None
        yield gcs, (f"http://{dashboard}" if dashboard else None)
    finally:
        ray.shutdown()
