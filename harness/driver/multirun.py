"""A sweep (`python -m harness -m ...`, Hydra's multirun through `hydra/launcher=ray`): every job at once,
on one pool.

The sweep starts (or attaches to, with `ray.address`) one Ray cluster and one agent pool for all its
jobs, through the one function that starts every pool (harness/driver/session.py `start_pool`): agent
workers sized to the cluster's CPUs and spread over its nodes, one writer hub, one model-limits actor
(every model's concurrency, rate and back-off hold across all jobs) and one local model server for
each model the harness serves itself. Each job is then prepared in turn under its own Hydra job
(`run_job`: its directory, its `.hydra/`; the task function returns the prepared job,
harness/driver/job.py, as it does when `ray.limits` is set), and all jobs run side by side, each driven
by a thread of this process, their agent runs on the pool's workers. So a job costs its plan, its
writer and its tables, not processes. Hydra's sweep layout is kept (`multirun.yaml`, one directory
per job). A failing job is reported when the others are done and does not stop them.

Hydra finds the launcher itself in hydra_plugins/harness_ray_launcher, which hands each sweep to
`launch_sweep`.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import ray
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from harness import extras
from harness.agent_run.components import models_in_use
from harness.config import ConfigError, EndpointSettings, HarnessConfig
from harness.driver import hydra_insides, startup, until_decided
from harness.driver.lock import exclusive
from harness.driver.metrics import metrics_endpoint
from harness.driver.pool import AgentPool
from harness.driver.preflight import checks_need_litellm, load_litellm_meanwhile
from harness.driver.progress import SweepProgress, job_status_line, progress_actor_name, render
from harness.driver.resume import resume_hint
from harness.driver.session import check_alive, start_pool
from harness.driver.signals import stop_reason
from harness.driver.until_decided import Rounds
from harness.errors import exit_with
from harness.exit_codes import EXPECTED_ERRORS, exit_for
from harness.tables.summary import format_summary, summarize_dirs

log = logging.getLogger(__name__)


STOP_WAIT_S = 120
"""How long a stopping sweep waits for its jobs to flush what their writers hold."""


def launch_sweep(config: DictConfig, hydra_context: HydraContext, task_function: TaskFunction,
                 job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
    """Run the sweep's jobs (Hydra's `Launcher.launch`), all at once on one pool; exit as a single run
    would when it cannot start, or non-zero when a job failed (each named above)."""
    return Sweep(config, hydra_context, task_function).launch(job_overrides, initial_job_idx)


def _prepare_job(hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> JobReturn:
    """Hydra's job set-up (directory, `.hydra/`, HydraConfig) and the task function, which returns
    the prepared job (harness/driver/job.py) instead of running it; a bad config fails here."""
    try:
        return run_job(hydra_context=hydra_context, task_function=task_function, config=config,
                       job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    except BaseException as error:  # sys.exit in a job must not end the sweep
        return _failed(config, error)


def _failed(config: DictConfig, error: BaseException) -> JobReturn:
    reason = str(error) if isinstance(error, SystemExit) else f"{type(error).__name__}: {error}"
    failed = JobReturn(overrides=list(config.hydra.overrides.task), cfg=config, working_dir=str(Path.cwd()),
                       status=JobStatus.FAILED)
    failed.return_value = RuntimeError(f"job exited: {reason}")
    return failed


def _run_prepared(prepared: JobReturn, config: DictConfig, pool: AgentPool) -> JobReturn:
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

    def __enter__(self) -> LiveView:
        if sys.stderr.isatty():  # rich only where there is a terminal to draw on
            from rich.console import Console
            from rich.live import Live

            self._live = Live(render([], self.total_jobs), console=Console(stderr=True), refresh_per_second=2)
            self._live.__enter__()
        return self

    def refresh(self) -> None:
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


class Sweep:
    """One sweep as Hydra hands it over: its config, its context (the config loader) and the task
    function (harness/__main__.py's `main`, which returns each job prepared)."""

    def __init__(self, config: DictConfig, hydra_context: HydraContext, task_function: TaskFunction) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function
        self.sequential = False
        """Whether the jobs asked for seeds=until_decided (set as they are composed)."""

    def _resume_hint(self, sweep_dir: Path) -> str:
        return resume_hint(sweep_dir, sweep=True, overrides=list(self.config.hydra.overrides.task))

    def _logging_of_the_sweep(self) -> None:
        """Hydra's own logging, not that of the job prepared last."""
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        self._logging_of_the_sweep()
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        try:
            with exclusive(sweep_dir, "sweep"):  # one live sweep per directory
                results = self._launch(sweep_dir, job_overrides, initial_job_idx)
        except EXPECTED_ERRORS as error:
            raise exit_for(error) from None
        except KeyboardInterrupt as interrupt:  # Ctrl-C, SIGTERM or SIGHUP, as a single run says it;
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
        """Ray and the pool's workers start with the first valid job's settings while the other jobs'
        configs are composed (and litellm is imported in a thread, where the first job's model checks
        need it); then the models of all jobs are served, and the jobs run."""
        limits_name = f"harness-sweep-{uuid.uuid4().hex[:8]}"
        numbered = list(enumerate(job_overrides, start=initial_job_idx))
        composed: list[tuple[DictConfig, HarnessConfig | None]] = []
        while numbered and not any(settings for _, settings in composed):
            composed.append(self._compose(*numbered.pop(0), limits_name))
        # seeds=until_decided: a bad sweep.until_decided or a sweep of two parameters stops before Ray starts
        rounds = Rounds.of(composed[0][0], job_overrides, sweep_dir) if self.sequential else None
        first = next((settings for _, settings in composed if settings is not None), None)
        if first is None:  # no job can run: say why (a bad value, a missing extra), as a single run would
            extras.check(HarnessConfig.from_dictconfig(composed[0][0]))
        assert first is not None
        startup.mark("composed")  # the first job's config: Ray starts with its settings
        if first.ray.address != "warm" and checks_need_litellm(first):  # its jobs' checks run in this process
            load_litellm_meanwhile()

        def models_of_every_job() -> list[EndpointSettings]:  # while the pool's workers start
            composed.extend(self._compose(index, overrides, limits_name) for index, overrides in numbered)
            # No embedder for a sweep that never embeds; a model of many jobs is served once.
            valid = [settings for _, settings in composed if settings is not None]
            return [model for settings in valid for model in models_in_use(settings)]

        with contextlib.ExitStack() as stack:
            pool = start_pool(first.ray, stack, limits_name, sweep_dir, models_of_every_job,
                              agent_runs=len(job_overrides))
            metrics = metrics_endpoint()  # for Prometheus: the sweep's metrics (harness/driver/metrics.py)
            log.info(f"Launching {len(composed)} jobs at once on Ray {pool.ray_address}"
                     + (f"; dashboard {pool.dashboard_url}" if pool.dashboard_url else "")
                     + (f"; metrics {metrics}" if metrics else ""))
            configs = [config for config, _ in composed]
            if rounds is None:
                results = self._run_jobs(configs, pool, sweep_dir, limits_name)
            else:  # seeds=until_decided: round after round on this pool (harness/driver/until_decided.py)
                results = rounds.run(configs, lambda jobs: self._run_jobs(jobs, pool, sweep_dir, limits_name))
        self._logging_of_the_sweep()
        _print_summary(sweep_dir, [_job_dir(c) for c in configs])
        failed = [r for r in results if r.status == JobStatus.FAILED]
        for result in failed:
            log.error(f"job failed: {' '.join(result.overrides or [])}: {hydra_insides.failure(result)}")
        completed = len(results) - len(failed)
        advice = (f"compare them with: python -m harness.report {sweep_dir}" if completed
                  else "nothing to compare (each job's reason is above)")
        log.info(f"{len(results)} jobs, {completed} completed, {len(failed)} failed; {advice}")
        return results

    def _compose(self, index: int, overrides: Sequence[str], limits_name: str
                 ) -> tuple[DictConfig, HarnessConfig | None]:
        """The job's composed config (told it is part of this sweep: `ray.limits`), and its settings
        if they are valid and every extra they need is installed (else the job itself reports why, in
        one line, and the sweep's other jobs run)."""
        config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(config):
            config.hydra.job.id = config.hydra.job.num = index
            config.ray.limits, config.progress = limits_name, False
        self.sequential |= until_decided.first_round(config)
        log.info(f"\t#{index} : {' '.join(filter_overrides(overrides))}")
        try:
            settings = HarnessConfig.from_dictconfig(config)
            extras.check(settings)
            return config, settings
        except ConfigError:
            return config, None

    def _run_jobs(self, configs: list[DictConfig], pool: AgentPool, sweep_dir: Path,
                  limits_name: str) -> list[JobReturn]:
        """The progress view, then every job prepared in turn and started as soon as it is (its
        first model call need not wait for the last job's preparation), all watched until done; the
        view's actor goes with them (a sequential sweep's next round starts its own)."""
        progress = (ray.remote(num_cpus=0)(SweepProgress).options(name=progress_actor_name(limits_name))
                    .remote())
        pool.stopping.clear()  # set when the last round's jobs returned
        hint = self._resume_hint(sweep_dir)
        threads = ThreadPoolExecutor(max_workers=len(configs), thread_name_prefix="harness-job")
        futures = []
        try:
            with LiveView(progress, len(configs)) as view:
                for config in configs:
                    prepared = _prepare_job(self.hydra_context, self.task_function, config)
                    futures.append(threads.submit(_run_prepared, prepared, config, pool))
                self._logging_of_the_sweep()  # not the job's prepared last
                pending = set(futures)
                while pending:  # the jobs depend on the shared model server: stop them all if it dies
                    _, pending = wait(pending, timeout=1.0)
                    check_alive(pool.servers, hint)
                    view.refresh()
        except KeyboardInterrupt as interrupt:  # each job's manifest says what stopped the sweep
            pool.stop_reason = stop_reason(interrupt)[0]
            raise
        finally:
            # On the way out early (Ctrl-C, a signal, a dead model server): every job stops its runs
            # and flushes its writer, then the pool's actors go; the jobs say nothing of it.
            pool.stopping.set()
            wait(futures, timeout=STOP_WAIT_S)
            threads.shutdown(wait=False, cancel_futures=True)
            with contextlib.suppress(Exception):  # gone already where Ray went first
                ray.kill(progress)
        return [future.result() for future in futures]
