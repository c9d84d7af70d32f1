"""The driver of one job, in four stages:

1. preflight (harness/driver/preflight.py): validate, plan, check model access, the agent's options and the
   cache, all before anything starts; under the run directory's lock, plan a resume
   (harness/driver/resume.py);
2. session (harness/driver/session.py): start or attach Ray, start the agent pool (or join its sweep's);
3. execute (harness/driver/execute.py): the agent runs on the pool's workers, with a progress bar;
4. finish (harness/driver/manifest.py and below): the manifest however the job ended, the summary, the
   exit verdict.

Whatever the session started is stopped again on the way out, whether the run finished, failed or
was interrupted.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from harness.agent_run.plan import build_plan
from harness.agent_run.runner import RunOutcome
from harness.agent_run.spec import AgentRunSpec
from harness.config import HarnessConfig
from harness.driver import startup
from harness.driver.execute import JobIdentity, execute
from harness.driver.lock import exclusive
from harness.driver.manifest import record_outcomes, recorded, start_manifest
from harness.driver.pool import AgentPool
from harness.driver.preflight import (
    check_agents_build,
    check_cache_writable,
    check_servers_answer,
    start_model_checks,
)
from harness.driver.resume import plan_resume, resume_hint
from harness.driver.session import start_job_session
from harness.models.model_client import BUDGET_EXHAUSTED
from harness.tables.reading import read_table
from harness.tables.records import Episode, LLMCall, Manifest
from harness.tables.summary import episode_counts, format_summary, summarize_dirs


@dataclass
class RunResult:
    run_dir: Path
    manifest: Manifest
    outcomes: list[RunOutcome]


def run(settings: HarnessConfig, run_dir: Path, resolved_config: dict[str, Any] | None = None,
        pool: AgentPool | None = None, identity: JobIdentity | None = None,
        hint: str | None = None) -> RunResult:
    """Run a job on `pool` (its sweep's), or as a sweep of one on a pool of its own; its model
    checks run on a pool worker."""
    return run_specs(settings, build_plan(settings, run_dir), run_dir, resolved_config, pool=pool,
                     identity=identity, hint=hint)


def run_specs(settings: HarnessConfig, specs: list[AgentRunSpec], run_dir: Path,
              resolved_config: dict[str, Any] | None = None, resume_command: list[str] | None = None,
              pool: AgentPool | None = None, identity: JobIdentity | None = None,
              hint: str | None = None) -> RunResult:
    """Run these agent runs (a job's plan, or a snapshot evaluation's) into `run_dir`, on `pool`
    (its sweep's) or on a pool of its own. `resume_command` is what an interrupted run tells the
    user to type (default: the Hydra job's); a sweep's job, run outside its Hydra job, comes with
    its `identity` and `hint` read when it was prepared. The preflight model checks run in a thread of
    the driver while Ray and the pool start (importing litellm, seconds, where they need it), so that
    no agent worker need import it for the lean path; on the warm pool, on its worker, which has."""
    check_agents_build(specs)
    check_cache_writable(settings.cache)
    check_servers_answer(settings)
    identity = identity or JobIdentity.of_hydra_job()
    with exclusive(run_dir), contextlib.ExitStack() as stack:
        hint = hint or resume_hint(run_dir, resume_command)
        resume = plan_resume(specs, run_dir)
        on_warm_pool = settings.ray.address == "warm"
        checks = None if on_warm_pool else start_model_checks(settings)
        try:
            session = start_job_session(settings, specs, run_dir, stack, hint, pool)
        except Exception:
            if checks is not None:
                checks.result()  # a model the checks refuse is what to fix first: its one line wins
            raise
        checked = checks.result() if checks is not None else session.pool.check_models(settings)
        startup.mark("checked")
        _say_once(checked.notes)
        manifest = start_manifest(settings, specs, resume.resumes, resolved_config)
        manifest.ray_address, manifest.dashboard_url = session.pool.ray_address, session.pool.dashboard_url
        manifest.startup_s = startup.seconds()
        manifest.model_params = checked.params if specs else None
        with recorded(manifest, run_dir, hint):
            executed = execute(settings, specs, checked, resume, run_dir, session, identity)
            record_outcomes(manifest, executed.outcomes, executed.env_setup_s)
    return RunResult(run_dir, manifest, executed.outcomes)


_said: set[str] = set()


def _say_once(notes: tuple[str, ...]) -> None:
    """Print what the model check changed, once per process (a sweep's jobs share their models)."""
    for note in notes:
        if note not in _said:
            _said.add(note)
            print(note, flush=True)


def print_summary(result: RunResult, started: float) -> None:
    episodes = read_table(result.run_dir, Episode.table)
    print()
    print(format_summary(summarize_dirs([result.run_dir])))
    stopped = [o for o in result.outcomes if o.stopped_by]
    for outcome in stopped:
        print(f"{outcome.run_id} stopped after {outcome.episodes} episodes: {outcome.stopped_by}")
    tables = ", ".join(f"{name}/ ({rows} rows)" for name, rows in result.manifest.tables.items())
    print(f"\n{episode_counts(episodes)} in {time.perf_counter() - started:.1f} s; "
          f"model {result.manifest.model}{' (scripted)' if result.manifest.model_is_scripted else ''}")
    print(f"tables in {result.run_dir}: {tables}; manifest.json")


def most_calls_failed(run_dir: Path) -> str | None:
    """One line when more than half of the run's model calls failed: its numbers would mislead."""
    failed, total, common = failed_calls(run_dir)
    if failed * 2 <= total:
        return None
    return (f"{failed} of {total} model calls failed (most often: {common}); the rows are kept in "
            f"{run_dir}, but the results measure the failures, not the model")


def failed_calls(run_dir: Path) -> tuple[int, int, str | None]:
    """Calls that failed (budget refusals aside), all calls, and the most frequent error."""
    calls = read_table(run_dir, LLMCall.table)
    if calls.is_empty():
        return 0, 0, None
    errors = calls.filter(pl.col("error").is_not_null() & ~pl.col("error").str.starts_with(BUDGET_EXHAUSTED))
    common = errors.group_by("error").len().sort("len", descending=True)
    return errors.height, calls.height, common["error"][0] if errors.height else None
