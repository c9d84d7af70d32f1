"""`hydra/launcher=ray` (the harness's default for -m): every job of a sweep at once, on one pool.

The launcher starts (or attaches to, with `ray.address`) one Ray cluster and one agent pool for the
whole sweep (harness/driver/pool.py): agent workers sized to the cluster's CPUs and spread over its nodes,
one writer hub, one model-limits actor (every model's concurrency, rate and back-off hold across
all jobs) and one local model server for each model the harness serves itself. Each job is then
prepared in turn under its own Hydra job (`run_job`: its directory, its `.hydra/`; the task function
returns the prepared job, as it does when `ray.limits` is set), and all jobs run side by side, each
driven by a thread of this process, their agent runs on the pool's workers. So a job costs its
plan, its writer and its tables, not processes. Hydra's sweep layout is kept (`multirun.yaml`,
one directory per job). A failing job is reported when the others are done and does not stop them.
"""


import contextlib
import copy
import logging
import sys
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

if TYPE_CHECKING:  # the harness itself loads only when a sweep starts, not when Hydra scans plugins
    from harness.config import HarnessConfig

log = logging.getLogger(__name__)


STOP_WAIT_S = 120
"""How long a stopping sweep waits for its jobs to flush what their writers hold."""


@dataclass
class RayLauncherConf:
    _target_: str = "hydra_plugins.harness_ray_launcher.ray_launcher.RayLauncher"


ConfigStore.instance().store(group="hydra/launcher", name="ray", node=RayLauncherConf)


def _prepare_job(hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> JobReturn:
    """Hydra's job set-up (directory, `.hydra/`, HydraConfig) and the task function, which returns
    the prepared job (harness/driver/job.py) instead of running it; a bad config fails here."""
    try:
        return run_job(hydra_context=hydra_context, task_function=task_function, config=config,
                       job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    except BaseException as error:  # sys.exit in a job must not end the sweep
        return _failed(config, error)


def _compose_once(hydra_context: HydraContext) -> None:
    """Hydra's sweeper composes every job's config to check the batch before it launches it, and
    the launcher needs them again (a few tenths of a second each on 2 cores, so seconds of a
    sweep's start-up): the config loader keeps each composition, and hands out copies of it."""
    loader = hydra_context.config_loader
    if getattr(loader, "_harness_composed", None) is not None:
        return
    compose = loader.load_sweep_config
    composed: dict[tuple[str, ...], DictConfig] = {}

    def load_sweep_config(master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        key = tuple(sweep_overrides)
        if key not in composed:
            composed[key] = compose(master_config, list(sweep_overrides))
        return copy.deepcopy(composed[key])

    loader._harness_composed = composed  # type: ignore[attr-defined]
    loader.load_sweep_config = load_sweep_config  # type: ignore[method-assign]


def _failed(config: DictConfig, error: BaseException) -> JobReturn:
    reason = str(error) if isinstance(error, SystemExit) else f"{type(error).__name__}: {error}"
    return JobReturn(overrides=list(config.hydra.overrides.task), cfg=config, working_dir=str(Path.cwd()),
                     status=JobStatus.FAILED, _return_value=RuntimeError(f"job exited: {reason}"))


def _run_prepared(prepared: JobReturn, config: DictConfig, pool: Any) -> JobReturn:
    """Run a prepared job to its end on the sweep's pool (in a thread of its own)."""
    if prepared.status != JobStatus.COMPLETED:
        return prepared
    job = prepared.return_value
    try:
        result = job.run(pool)
        job.verdict(result)
    except BaseException as error:
        return _failed(config, error)
    prepared.return_value = result.run_dir
    prepared.hydra_cfg = None  # not needed by the sweeper
    return prepared


def _print_summary(sweep_dir: Path, job_dirs: list[Path]) -> None:
    """One table for the whole sweep, read back from the jobs' tables (their own prints go through
    Ray's log forwarding, which may drop the last lines at shutdown)."""
    from harness.tables.summary import format_summary, summarize_dirs

    summary = summarize_dirs(d for d in job_dirs if (d / "episodes").is_dir())
    if not summary.is_empty():
        print(format_summary(summary), flush=True)
        print(f"sweep tables in {sweep_dir}/<job>/", flush=True)


class LiveView:
    """The sweep's one live view: on a terminal a table redrawn in place (rich), elsewhere a line per
    job when it finishes or fails."""

    def __init__(self, progress: Any, total_jobs: int) -> None:
        self.progress = progress
        self.total_jobs = total_jobs
        self._live: Any = None
        self._told: dict[int, str] = {}

    def __enter__(self) -> "LiveView":
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.live import Live

            from harness.driver.progress import render

            self._live = Live(render([], self.total_jobs), console=Console(stderr=True), refresh_per_second=2)
            self._live.__enter__()
        return self

    def refresh(self) -> None:
        import ray

        from harness.driver.progress import job_status_line, render

        jobs = ray.get(self.progress.snapshot.remote())
        if self._live is not None:
            self._live.update(render(jobs, self.total_jobs))
            return
        for job in jobs:
            if job.status != "running" and self._told.get(job.job) != job.status:
                self._told[job.job] = job.status
                print(job_status_line(job), flush=True)

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.refresh()
        if self._live is not None:
            self._live.__exit__(*exc)


def _job_dir(config: DictConfig) -> Path:
    return Path(str(config.hydra.sweep.dir)) / str(config.hydra.sweep.subdir)


class RayLauncher(Launcher):
    def __init__(self) -> None:
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def _resume_hint(self, sweep_dir: Path) -> str:
        from harness.driver.session import resume_hint

        assert self.config is not None
        return resume_hint(sweep_dir, sweep=True, overrides=list(self.config.hydra.overrides.task))

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function
        _compose_once(hydra_context)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from harness.driver.lock import exclusive
        from harness.errors import exit_with
        from harness.exit_codes import EXPECTED_ERRORS, exit_for

        assert self.config is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        try:
            with exclusive(sweep_dir, "sweep"):  # one live sweep per directory
                results = self._launch(sweep_dir, job_overrides, initial_job_idx)
        except EXPECTED_ERRORS as error:
            raise exit_for(error) from None
        except KeyboardInterrupt as interrupt:  # Ctrl-C, SIGTERM or SIGHUP, as a single run says it;
            from harness.driver.signals import stop_reason

            reason, code = stop_reason(interrupt)
            raise exit_with(code, f"\n{reason}: the episodes finished so far are in {sweep_dir}; "
                                  f"{self._resume_hint(sweep_dir).split('; ', 1)[1]}") from None
        failed = [r for r in results if r.status == JobStatus.FAILED]
        if failed:  # said per job above; Hydra's sweeper would add a traceback of the first failure
            others = (f"; the others' tables are in {sweep_dir}" if len(failed) < len(results) else "")
            # A job that stopped on its way (it wrote a manifest) carries on where it stopped when
            # the sweep runs again; the jobs that finished are not run twice.
            resume = (f"; {self._resume_hint(sweep_dir).split('; ', 1)[1]}"
                      if any((_job_dir(r.cfg) / "manifest.json").exists() for r in failed) else "")
            raise exit_with(1, f"error: {len(failed)} of {len(results)} jobs failed (see each job's line "
                               f"above){others}{resume}")
        return results

    def _launch(self, sweep_dir: Path, job_overrides: Sequence[Sequence[str]],
                initial_job_idx: int) -> Sequence[JobReturn]:
        """Ray and the pool's workers start with the first valid job's settings, and import
        litellm while the other jobs' configs are composed; then the models of all jobs are
        served, and the jobs run."""
        from harness.agent_run.plan import models_in_use
        from harness.config import EndpointSettings, HarnessConfig
        from harness.driver import startup
        from harness.driver.metrics import metrics_endpoint
        from harness.driver.pool import serve_models
        from harness.driver.session import ray_session
        from harness.driver.warm_pool import open_pool

        assert self.config is not None
        limits_name = f"harness-sweep-{uuid.uuid4().hex[:8]}"
        numbered = list(enumerate(job_overrides, start=initial_job_idx))
        composed: list[tuple[DictConfig, HarnessConfig | None]] = []
        while numbered and not any(settings for _, settings in composed):
            composed.append(self._compose(*numbered.pop(0), limits_name))
        first = next((settings for _, settings in composed if settings is not None), None)
        if first is None:  # no job can run: say why, as a single run would
            HarnessConfig.from_dictconfig(composed[0][0])
        assert first is not None
        startup.mark("composed")  # the first job's config: Ray starts with its settings
        with contextlib.ExitStack() as stack:
            address, dashboard = stack.enter_context(ray_session(first.ray))
            pool = open_pool(first.ray, stack, limits_name, agent_runs=len(job_overrides))
            composed += [self._compose(index, overrides, limits_name) for index, overrides in numbered]
            metrics = metrics_endpoint()  # for Prometheus: the sweep's metrics (harness/driver/metrics.py)
            log.info(f"Launching {len(composed)} jobs at once on Ray {address}"
                     + (f"; dashboard {dashboard}" if dashboard else "")
                     + (f"; metrics {metrics}" if metrics else ""))
            models: dict[str, EndpointSettings] = {}
            for settings in (settings for _, settings in composed if settings is not None):
                for model in models_in_use(settings):  # no embedder for a sweep that never embeds
                    models.setdefault(model.name, model)
            serve_models(pool, list(models.values()), sweep_dir, stack)
            configs = [config for config, _ in composed]
            results = self._run_jobs(configs, pool, sweep_dir, limits_name, stack)
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        _print_summary(sweep_dir, [_job_dir(c) for c in configs])
        failed = [r for r in results if r.status == JobStatus.FAILED]
        for result in failed:
            log.error(f"job failed: {' '.join(result.overrides or [])}: {result._return_value}")
        completed = len(results) - len(failed)
        advice = (f"compare them with: python -m harness.report {sweep_dir}" if completed
                  else "nothing to compare (each job's reason is above)")
        log.info(f"{len(results)} jobs, {completed} completed, {len(failed)} failed; {advice}")
        return results

    def _compose(self, index: int, overrides: Sequence[str], limits_name: str
                 ) -> tuple[DictConfig, "HarnessConfig | None"]:
        """The job's composed config (told it is part of this sweep: `ray.limits`), and its settings
        if they are valid (else the job itself reports its bad value)."""
        from harness.config import ConfigError, HarnessConfig

        assert self.config is not None and self.hydra_context is not None
        config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(config):
            config.hydra.job.id = config.hydra.job.num = index
            config.ray.limits, config.progress = limits_name, False
        log.info(f"\t#{index} : {' '.join(filter_overrides(overrides))}")
        try:
            return config, HarnessConfig.from_dictconfig(config)
        except ConfigError:
            return config, None

    def _run_jobs(self, configs: list[DictConfig], pool: Any, sweep_dir: Path, limits_name: str,
                  stack: contextlib.ExitStack) -> list[JobReturn]:
        """The progress view, then every job prepared in turn and started as soon as it is (its
        first model call need not wait for the last job's preparation), all watched until done."""
        import ray

        from harness.driver.progress import SweepProgress, progress_actor_name
        from harness.driver.session import check_alive

        assert self.hydra_context is not None and self.task_function is not None and self.config is not None
        progress = (ray.remote(num_cpus=0)(SweepProgress).options(name=progress_actor_name(limits_name))
                    .remote())
        stack.callback(ray.kill, progress)
        hint = self._resume_hint(sweep_dir)
        threads = ThreadPoolExecutor(max_workers=len(configs), thread_name_prefix="harness-job")
        futures = []
        try:
            with LiveView(progress, len(configs)) as view:
                for config in configs:
                    prepared = _prepare_job(self.hydra_context, self.task_function, config)
                    futures.append(threads.submit(_run_prepared, prepared, config, pool))
                configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)  # not a job's
                pending = set(futures)
                while pending:  # the jobs depend on the shared model server: stop them all if it dies
                    _, pending = wait(pending, timeout=1.0)
                    check_alive(pool.servers, hint)
                    view.refresh()
        except KeyboardInterrupt as interrupt:  # each job's manifest says what stopped the sweep
            from harness.driver.signals import stop_reason

            pool.stop_reason = stop_reason(interrupt)[0]
            raise
        finally:
            # On the way out early (Ctrl-C, a signal, a dead model server): every job stops its runs
            # and flushes its writer, then the pool's actors go; the jobs say nothing of it.
            pool.stopping.set()
            wait(futures, timeout=STOP_WAIT_S)
            threads.shutdown(wait=False, cancel_futures=True)
        return [future.result() for future in futures]
