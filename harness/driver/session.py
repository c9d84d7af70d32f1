"""The session stage of a job (or a sweep): Ray started or attached, the agent pool (harness/driver/pool.py:
agent workers, writer hub, model limits, local model servers) started or joined, and how to tell the
user to resume when a part of it dies.

`start_pool` is the one way a pool starts: a single run's job session calls it for a pool of its own,
and a sweep (harness/driver/multirun.py) for the pool all its jobs share. Everything started is
registered on the caller's `contextlib.ExitStack`, so it stops again however the job ends.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from harness import USER_SET, harness_env
from harness.agent_run.components import models_in_use
from harness.agent_run.spec import AgentRunSpec
from harness.config import ConfigError, EndpointSettings, HarnessConfig, RaySettings
from harness.driver import ray_insides, signals, startup
from harness.driver.pool import AgentPool, serve_models, start_workers
from harness.driver.preflight import workers_need_litellm
from harness.driver.warm_pool import WARM_NAMESPACE, lease_warm_pool, usable_state
from harness.errors import RunAborted, one_line
from harness.models.model_server import LocalModelServer


@dataclass(frozen=True)
class JobSession:
    """What a job runs on: the pool (its sweep's, or its own), and what it needs to know."""

    pool: AgentPool
    servers: tuple[LocalModelServer, ...]
    """Local model servers this job started, and watches (a sweep's are watched by its launcher)."""
    answer_key: dict[str, str] | None
    """Question -> reference, for the scripted model only (it answers right by a seeded draw)."""
    resume_hint: str
    """What to tell the user to type when the job stops on its way."""
    run_dir: Path
    """The job's directory, where its tables, memories and snapshots are written."""


def start_job_session(settings: HarnessConfig, specs: list[AgentRunSpec], run_dir: Path,
                      stack: contextlib.ExitStack, resume_hint: str, pool: AgentPool | None = None
                      ) -> JobSession:
    """The job's session: on `pool` (its sweep's, on the Ray its sweep started), or on a pool of its
    own, Ray and all, ready when this returns and stopped when `stack` closes."""
    answer_key = ({t.question: t.answer for s in specs for t in [*s.tasks, *s.tuning_tasks]}
                  if settings.model.is_scripted else None)
    if pool is None:
        name = f"harness {settings.variant.name}-{settings.env.name}-{uuid.uuid4().hex[:6]}"
        pool = start_pool(settings.ray, stack, name, run_dir, lambda: models_in_use(settings), len(specs))
        if pool.dashboard_url:
            print(f"Ray dashboard: {pool.dashboard_url}", flush=True)
        ray.get([actor.__ray_ready__.remote() for actor in (pool.hub, *pool.workers)] + pool.loading)
        startup.mark("pool")
        return JobSession(pool, pool.servers, answer_key, resume_hint, run_dir)
    limits = ray.get_actor(pool.limits_name)
    if settings.model.serves_locally and settings.model.name not in ray.get(limits.local_servers.remote()):
        raise ConfigError(f"invalid config: model: the sweep's pool does not serve {settings.model.name} "
                          "locally")
    return JobSession(pool, (), answer_key, resume_hint, run_dir)


def start_pool(settings: RaySettings, stack: contextlib.ExitStack, name: str, log_dir: Path,
               models: Callable[[], Sequence[EndpointSettings]], agent_runs: int | None = None) -> AgentPool:
    """The one way a pool starts, for a single run and a sweep alike: Ray started or attached
    (`ray_session`); the pool's actors (harness/driver/pool.py): with `ray.address=warm` the warm
    pool's generation unless another command holds it, else started now, named after `name`, never
    more workers than `agent_runs`; then the local model servers and embedders of `models()`, their
    logs in `log_dir`. All stopped (or given back) when `stack` closes.

    `models` is asked once the workers are starting (their processes and imports: seconds), so a
    sweep composes the rest of its jobs' configs in it. Where those models need litellm in the workers,
    each imports it next, ahead of its first job. The workers may still be importing when this
    returns (`__ray_ready__` and `pool.loading` say when they are done)."""
    pool_ray, dashboard = stack.enter_context(ray_session(settings))
    pool = lease_warm_pool(stack, settings.num_workers, agent_runs) if settings.address == "warm" else None
    if pool is None:  # not on a warm pool, or another command holds it
        pool = start_workers(settings, stack, name, agent_runs)
    pool.ray_address, pool.dashboard_url = pool_ray, dashboard
    served = models()
    if workers_need_litellm(served):  # loaded ahead of the first job: every worker's runs start together
        pool.loading = [worker.load_litellm.remote() for worker in pool.workers]
    serve_models(pool, served, log_dir, stack)
    return pool


def check_alive(servers: Sequence[LocalModelServer], resume_hint: str) -> None:
    """Stop the run (or sweep) in one line if a local model server it depends on has died."""
    for server in servers:
        code = server.exit_code()
        if code is not None:
            raise RunAborted(f"the local model server died (exit code {code}; see {server.log_path}); "
                             f"{resume_hint}")


def start_local_ray(**options: Any) -> Any:
    """`ray.init(address="local", **options)`, two of its start's waits taken off its path, and a
    second start where the first timed out (`_start_local_ray_once`). Ray gives its node 30 s to
    register, a limit no option changes, and its raylet 15 s to find its dashboard agent's port files,
    after which it aborts (raylet.out: "Timed out waiting for file .../metrics_agent_port_<node>"; Ray
    2.60 reads no setting for it, `agent_register_timeout_ms` included). A machine loaded by other runs
    (the suite's parallel tests here: the agent 22 s into its imports) has let both pass, and a fresh
    start has then gone through in seconds."""
    try:
        return _start_local_ray_once(**options)
    except Exception as error:
        if NODE_TIMED_OUT not in str(error):
            raise
        print(f"harness: Ray's node did not register in time ({one_line(error, 120)}); starting it once more",
              file=sys.stderr, flush=True)
    return _start_local_ray_once(**options)


NODE_TIMED_OUT = "node timed out during startup"
"""What ray.init raises when its raylet has not registered with the GCS within 30 s."""


def _start_local_ray_once(**options: Any) -> Any:
    """`ray.init(address="local", **options)`, its start's waits taken off its path:

    - its node's dashboard agent on a port the OS picks. Ray gives every node's agent the fixed port
      52365: a second Ray on the machine (another run, a test's) finds it taken, and its raylet waits
      while the agent retries the port for seconds (4 of 10 s of ray.init measured here) before it
      gives up serving HTTP at all;
    - the dashboard started beside the raylet instead of before it: Ray waits for it to answer first
      (1.7 s measured here), though the raylet needs nothing of it. It is started from a thread that
      lives until `_end_ray`, as Ray starts it to die with the thread that started it
      (PR_SET_PDEATHSIG); its failure fails the start, as in ray.init;
    - with include_dashboard=false, none of what serves the dashboard: Ray starts its API server all
      the same (its State and Jobs APIs) and its autoscaler's monitor (which reports to the dashboard;
      a local Ray of one node never scales). Each is a Python process importing as the raylet waits on
      its dashboard agent's imports: on 2 cores, without them the node registered about a second
      sooner in most starts, and the start-up took 1.3 s less CPU (docs/bench.md).

    ray.init offers none of the three: they are Ray's insides swapped for this one ray.init
    (harness/driver/ray_insides.py `LocalStart`). Where ray.init fails once it has started processes,
    they are ended here: Ray leaves them to its reaper, which ends them only when this process exits."""
    global _dashboard_kept
    start = ray_insides.LocalStart()
    _dashboard_kept = start.kept
    try:
        context = start.init(**options)
    except BaseException:
        for each in start.nodes:  # its GCS, dashboard, raylet and agents: all started before it failed
            signals.end_leftovers(signals.ray_processes(each))
        start.kept.set()
        raise
    start.started.wait()
    if start.failures:
        _end_ray(ours=True)
        raise start.failures[0]
    context.dashboard_url = context.address_info["webui_url"] = ray_insides.dashboard_address()
    return context


_dashboard_kept = threading.Event()
"""Set by `_end_ray`: the thread that started this process's Ray's dashboard may end."""
_started: tuple[str | None, str | None] | None = None
"""The address and dashboard of the Ray that `ray_session` started in this process, while it runs
(a session nested in it reports the same)."""


def authenticate_to(address: str) -> None:
    """Before attaching to a cluster: ask its GCS whether it wants Ray's token, and where it does and
    the user set no RAY_AUTH_MODE, send the token at hand (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH,
    ~/.ray/auth_token). `ray start` turns token auth on with RAY_AUTH_MODE=token or a token at hand,
    and the harness's own local Ray runs without it (HARNESS_ENV). RunAborted, in one line, where it
    cannot attach."""
    if "RAY_AUTH_MODE" in USER_SET or address.startswith("ray://"):
        return  # the user's choice; a Ray Client address has its own handshake
    from ray.exceptions import AuthenticationError

    try:
        ray_insides.reach_gcs(address)
    except AuthenticationError:
        if not ray_insides.token_at_hand():
            raise RunAborted(f"could not attach to {address}: the cluster uses token authentication and no "
                             "token is here; copy its token to ~/.ray/auth_token (or set RAY_AUTH_TOKEN), "
                             "see `ray get-auth-token`; nothing was run") from None
        ray_insides.enable_token_auth()  # RAY_AUTH_MODE=token in this process, Ray's config reloaded
    except Exception as error:  # no GCS there: ray.init would wait as long again to say so
        raise RunAborted(f"could not reach {address} ({one_line(error, 300)}); nothing was run") from None


@contextlib.contextmanager
def ray_session(settings: RaySettings, namespace: str | None = None
                ) -> Iterator[tuple[str | None, str | None]]:
    """Start a Ray of this run's own, or attach to `ray.address`; reuse one already initialised
    in-process. Null never joins a cluster that happens to be running (`ray start`, RAY_ADDRESS):
    that could be someone else's. What it started or joined is printed. Named actors are created and
    found in `namespace` (default: one of this process's own)."""
    global _started
    if ray.is_initialized():
        yield _started or (ray.get_runtime_context().gcs_address, None)
        return
    options: dict[str, Any] = {"logging_level": logging.WARNING, "namespace": namespace}
    try:
        if settings.address is None or settings.address == "local":
            # The local Ray's processes inherit this one's environment (harness/__init__.py sets
            # HARNESS_ENV in it). A runtime_env would keep the actors off the worker processes Ray
            # starts ahead with ray.init (they have none): each would start a process of its own.
            context = start_local_ray(include_dashboard=settings.include_dashboard,
                                      dashboard_host="127.0.0.1",
                                      _system_config=startup.LOCAL_RAY_SYSTEM_CONFIG, **options)
            joined = "started a local Ray for this run"
        elif settings.address == "warm":
            # Its Ray's processes have the harness's environment from the process that started it;
            # the pool's actors, and those this command names, resolve in the warm namespace.
            warm = usable_state(Path(settings.warm_pool))
            context = ray.init(address=warm.address, **{**options, "namespace": WARM_NAMESPACE})
            joined = f"attached to the warm pool's Ray ({settings.warm_pool})"
        else:
            authenticate_to(settings.address)
            # The cluster's auth mode is its own: its workers keep what their node has.
            workers_env = {k: v for k, v in harness_env().items() if k != "RAY_AUTH_MODE"}
            context = ray.init(address=settings.address, runtime_env={"env_vars": workers_env}, **options)
            joined = f"attached to the Ray cluster at {settings.address}"
    except RunAborted:
        raise
    except Exception as error:  # e.g. a node that timed out starting on an overloaded machine
        where = "start a local Ray" if settings.address in (None, "local") else f"reach {settings.address}"
        raise RunAborted(f"could not {where} ({one_line(error, 300)}); nothing was run") from None
    ours = settings.address is None or settings.address == "local"
    signals.install()  # ray.init put Ray's own SIGTERM handler in the place of ours
    startup.mark("ray")
    forget = signals.started_ray(signals.ray_processes() if ours else [])
    try:
        gcs = context.address_info.get("gcs_address")
        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        print(f"{joined} ({gcs}, {nodes} node{'s' if nodes != 1 else ''})", flush=True)
        dashboard = context.dashboard_url or None
        _started = (gcs, f"http://{dashboard}" if dashboard else None)
        yield _started
    finally:
        _started = None
        with signals.held("the teardown of Ray"):
            _end_ray(ours)
            forget()


def _end_ray(ours: bool) -> None:
    """Disconnect; and of a Ray this command started, end every process. Nothing of it is needed once
    the driver has disconnected (the writer actor closed the tables before), so they are killed all
    at once: ray.shutdown would end them one after another, a SIGTERM and up to a second's wait each
    (1.4 s here), and its agents (dashboard, runtime env) outlive it by a minute otherwise. A
    cluster's processes are not ours to end."""
    processes = signals.ray_processes() if ours else []
    if ours:
        ray_insides.forget_node()  # its spilled objects removed; ray.shutdown disconnects the driver only
    ray.shutdown()
    signals.install()  # ray.shutdown left SIGTERM at the kernel's default (Python still names ours)
    signals.end_leftovers(processes)
    _dashboard_kept.set()
