"""The execute stage of a job: its agent runs on the pool's workers, with a progress bar.

The job opens its writer in the pool's writer hub and hands its agent runs to the least loaded
agent workers (harness/driver/pool.py); the driver only waits, watches what the job depends on, and shows
the progress (and sends it to the sweep's live view when the job is part of one). In a sweep, each
job's driver is a thread of the launcher's process.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from tqdm import tqdm

from harness.agent_run.components import models_in_use
from harness.agent_run.runner import RunOutcome
from harness.agent_run.spec import AgentRunSpec, CheckedParams
from harness.clock import utc_now
from harness.config import HarnessConfig
from harness.driver.actors import WorkerReport
from harness.driver.metrics import JobLabels
from harness.driver.progress import JobFigures, progress_actor_name
from harness.driver.resume import ResumePlan
from harness.driver.session import JobSession, check_alive
from harness.errors import RunAborted, disk_full, is_disk_full, one_line, root_cause
from harness.models.model_client import GatewayUnavailable, ModelUnavailable
from harness.tables.records import Episode, RunRow

POLL_S = 0.5


@dataclass(frozen=True)
class Executed:
    """What the agent runs came back with."""

    outcomes: list[RunOutcome] = field(default_factory=list)
    env_setup_s: dict[str, list[float]] = field(default_factory=dict)
    """Seconds each worker spent building each environment."""


@dataclass(frozen=True)
class JobWriter:
    """The job's writer in the pool's hub: its rows go into `key`, the job's directory."""

    hub: ray.actor.ActorHandle
    key: str

    def poll(self) -> ray.ObjectRef:
        return self.hub.poll.remote(self.key)

    def figures(self) -> ray.ObjectRef:
        return self.hub.figures.remote(self.key)


def execute(settings: HarnessConfig, specs: list[AgentRunSpec], params: CheckedParams, resume: ResumePlan,
            run_dir: Path, session: JobSession, identity: JobIdentity) -> Executed:
    """Run the agent runs not already finished into `run_dir`, their calls sent with the model check's
    `params`; a `resume`'s finished episodes are replayed, not written, and the runs its `runs` table
    describes get no second row (harness/driver/resume.py)."""
    specs = [s for s in specs if resume.left[s.run_id]]
    pool = session.pool
    writer = JobWriter(pool.hub, str(run_dir))
    # The hub tags the job's rows in the pool's Ray metrics with these (harness/driver/metrics.py).
    labels = job_labels(pool.limits_name, identity.number, specs, resume.left)
    ray.get(pool.hub.open.remote(writer.key, settings.output.flush_interval_s, labels if specs else None))
    if not specs:  # a resume with nothing left to run: its tables are left as a finished job's are
        _vital("the writer actor", writer.hub.close.remote(writer.key), session, timeout=CLOSE_WAIT_S)
        return Executed()
    rows = _run_rows(specs, params, resume.described_runs, identity)
    pool.hub.append.remote(writer.key, RunRow.table, rows)
    models = models_in_use(settings)
    assignments = pool.assign(specs)
    finished = resume.finished
    refs = [pool.workers[index].run.remote(writer.key, batch, params, finished, models, session.answer_key)
            for index, batch in assignments]
    try:
        reports = _run_workers(settings, specs, run_dir, session, writer, refs, identity.number,
                               sum(labels.planned.values()))
    finally:
        pool.release(assignments)
    env_setup_s: dict[str, list[float]] = {}
    for report in reports:
        for env, seconds in report.env_setup_s.items():
            env_setup_s.setdefault(env, []).append(seconds)
    return Executed([o for report in reports for o in report.outcomes], env_setup_s)


def _run_workers(settings: HarnessConfig, specs: list[AgentRunSpec], run_dir: Path, session: JobSession,
                 writer: JobWriter, refs: list[ray.ObjectRef], job: int | None,
                 total: int) -> list[WorkerReport]:
    """The job's agent runs on their workers, watched until all `total` episodes left are done; however
    that ends, the runs still going are cancelled and the writer closed (what reached it flushed)."""
    progress = _ProgressReport(settings, specs, run_dir, job, total)
    try:
        _watch(settings, refs, session, writer, progress, total)
        reports = [_vital("an agent worker", ref, session) for ref in refs]
        progress.send(writer, _vital("the writer actor", writer.poll(), session), status="finished")
        # The job's last rows are written as its writer closes: a row it cannot write fails the job.
        _vital("the writer actor", writer.hub.close.remote(writer.key), session, timeout=CLOSE_WAIT_S)
    except BaseException:
        progress.send(writer, None, status="failed")
        for ref in refs:  # the job has stopped: its runs on the shared workers stop too; not the
            with contextlib.suppress(Exception):  # rows they sent to the writer (recursive=False)
                ray.cancel(ref, recursive=False)
        if session.pool.stopping.is_set():  # the sweep kills its actors once its jobs return:
            with contextlib.suppress(Exception):  # let the cancelled runs end first, quietly
                ray.wait(refs, num_returns=len(refs), timeout=CANCEL_WAIT_S)
        # Also on Ctrl-C or a failure: what reached the writer is flushed before the job ends
        # (compacting a long run's parts takes a while); the failure already being raised says why.
        with contextlib.suppress(ray.exceptions.RayError):
            ray.get(writer.hub.close.remote(writer.key), timeout=CLOSE_WAIT_S)
        raise
    return reports


def _watch(settings: HarnessConfig, refs: list[ray.ObjectRef], session: JobSession,
           writer: JobWriter, progress: _ProgressReport, total: int) -> None:
    """Wait for `refs`, stopping the job in one line if what it depends on dies; the progress bar
    counts the episodes the writer has received."""
    limits = ray.get_actor(session.pool.limits_name)
    pending = list(refs)
    # Workers first build their environments (TextWorld compiles its games once, then caches
    # them): the bar says so until the first episode arrives.
    with tqdm(total=total, unit="episode", disable=not settings.progress, file=sys.stderr,
              desc=f"setting up {settings.env.name}") as bar:
        while pending:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
            if session.pool.stopping.is_set():
                raise SweepStopping(session.pool.stop_reason)
            check_alive(session.servers, session.resume_hint)
            _vital("the model limits actor", limits.__ray_ready__.remote(), session)
            counts = _vital("the writer actor", writer.poll(), session)
            if counts[Episode.table] and bar.n == 0:
                bar.set_description_str("")
            bar.update(counts[Episode.table] - bar.n)
            progress.send(writer, counts)


class _ProgressReport:
    """Sends this job's live figures to its sweep's progress actor (harness/driver/progress.py), if any."""

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

    def send(self, writer: JobWriter, counts: dict[str, int] | None, status: str = "running") -> None:
        if self.actor is None:
            return
        update: dict[str, Any] = {"status": status}
        if counts is not None:
            update.update(ray.get(writer.figures()), episodes_done=counts[Episode.table])
        self.figures = self.figures.model_copy(update=update)
        self.actor.update.remote(self.figures)


@dataclass(frozen=True)
class JobIdentity:
    """Who the job is in its sweep, read from its Hydra job when it is prepared (a sweep's jobs run
    later, side by side, in threads that cannot ask Hydra)."""

    number: int | None = None
    """The job's number in its sweep; None for a single run."""
    overrides: list[str] = field(default_factory=list)
    """Its command-line overrides (the sweep's own settings for it left out)."""

    @classmethod
    def of_hydra_job(cls) -> JobIdentity:
        if not HydraConfig.initialized():
            return cls()
        hydra_cfg = HydraConfig.get()
        overrides = [o for o in hydra_cfg.overrides.task if not o.startswith(("ray.limits=", "progress="))]
        return cls(int(hydra_cfg.job.num) if hydra_cfg.mode == RunMode.MULTIRUN else None, overrides)


def job_labels(sweep: str, job_number: int | None, specs: Sequence[AgentRunSpec],
               left: Mapping[str, int]) -> JobLabels:
    """The labels of a job (number None: a single run) about to run these agent runs, with the episodes
    each has `left` to write, for the hub's metrics (harness/driver/metrics.py, which the hub imports
    without the specs' modules)."""
    return JobLabels(sweep=sweep, sweep_job=str(job_number or 0),
                     runs={s.run_id: (s.variant, str(s.seed), s.model) for s in specs},
                     planned={s.run_id: left[s.run_id] for s in specs})


def _run_rows(specs: list[AgentRunSpec], params: CheckedParams, described_runs: Collection[str],
              identity: JobIdentity) -> list[dict[str, Any]]:
    """A `runs` row for each agent run not already described there (a resume adds none)."""
    return [RunRow(run_id=s.run_id, variant=s.variant, env=s.env, seed=s.seed, order_seed=s.order_seed,
                   repeat=s.repeat, scenario=s.scenario, feedback=s.feedback, model=s.model,
                   job=identity.number,
                   overrides=" ".join(identity.overrides),
                   model_params=json.dumps(params.params, sort_keys=True, default=str),
                   settings=json.dumps(s.settings, sort_keys=True),
                   started_at=utc_now()).model_dump()
            for s in specs if s.run_id not in described_runs]


CANCEL_WAIT_S = 30
"""How long a job of a stopping sweep waits for its cancelled runs to end on the shared workers."""
CLOSE_WAIT_S = 300
"""How long a job waits for its writer to flush and compact its tables."""


class SweepStopping(KeyboardInterrupt):
    """The sweep this job belongs to is stopping (Ctrl-C, a signal, its model server died): its
    launcher says why, once; the job stops its runs, flushes its writer and ends interrupted,
    quietly (harness.driver.manifest records it as interrupted, with the launcher's reason)."""

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason or "the sweep is stopping")
        self.reason = reason


def _vital(what: str, ref: ray.ObjectRef, session: JobSession, timeout: float | None = None) -> Any:
    """`ray.get` of something the run cannot do without; if its actor died, stop the run with one
    line saying what died (or that the disk is full, and where) and how to resume."""
    resume_hint = session.resume_hint
    try:
        return ray.get(ref, timeout=timeout)
    except ray.exceptions.RayError as error:
        if session.pool.stopping.is_set():
            raise SweepStopping(session.pool.stop_reason) from None
        cause = root_cause(error)
        if is_disk_full(error):
            raise disk_full(session.run_dir, cause).with_hint(resume_hint) from None
        if isinstance(cause, (GatewayUnavailable, ModelUnavailable)):
            raise RunAborted(f"{cause}; {resume_hint}") from None
        if isinstance(error, ray.exceptions.RayActorError):
            raise RunAborted(f"{what} died ({one_line(error, 200)}); {resume_hint}") from None
        raise RunAborted(f"{what} failed ({one_line(error, 300)}); {resume_hint}") from None
