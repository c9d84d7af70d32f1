"""Live figures of a sweep: each job pushes its own, the launcher shows them all in one view.

A small named actor (`SweepProgress`) holds the latest figures of every job; the launcher renders
them in the terminal with rich. The Ray metrics of a run or sweep (for the dashboard and Prometheus)
are the writer hub's, counted from the rows it receives (harness/driver/metrics.py), not these.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class JobFigures(BaseModel):
    job: int
    run_dir: str
    status: str = "running"
    """running, finished or failed."""
    episodes_planned: int = 0
    episodes_done: int = 0
    successes: int = 0
    scored: int = 0
    """Stream episodes attempted so far (probes aside): the denominator of the success rate."""
    total_tokens: int = 0
    cost_usd: float | None = 0.0
    errors: int = 0
    budget_tokens: int | None = None
    """The job's token cap over all its agent runs (null: none)."""
    budget_usd: float | None = None

    @property
    def success_rate(self) -> float | None:
        return self.successes / self.scored if self.scored else None


def progress_actor_name(limits: str) -> str:
    """The progress actor of the sweep whose shared limits actor has this name."""
    return f"{limits} progress"


class SweepProgress:
    def __init__(self) -> None:
        self.jobs: dict[int, JobFigures] = {}

    def update(self, figures: JobFigures) -> None:
        self.jobs[figures.job] = figures

    def snapshot(self) -> list[JobFigures]:
        return [self.jobs[job] for job in sorted(self.jobs)]


def render(jobs: list[JobFigures], total_jobs: int) -> Any:
    """One table: a line per job and a total line with a bar over all jobs' episodes."""
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    table = Table(title=f"sweep: {len(jobs)} of {total_jobs} jobs reporting", title_justify="left")
    for column in ("job", "status", "episodes", "success", "tokens", "budget", "$", "errors", "output"):
        table.add_column(column, justify="right" if column not in ("status", "output") else "left")
    for job in jobs:
        budget = (f"{job.total_tokens / job.budget_tokens:.0%} of {job.budget_tokens:,}" if job.budget_tokens
                  else f"${job.budget_usd:g}" if job.budget_usd else "-")
        table.add_row(str(job.job), job.status, f"{job.episodes_done}/{job.episodes_planned}",
                      "-" if job.success_rate is None else f"{job.success_rate:.2f}", f"{job.total_tokens:,}",
                      budget, "?" if job.cost_usd is None else f"{job.cost_usd:.4f}", str(job.errors),
                      job.run_dir)
    done = sum(j.episodes_done for j in jobs)
    planned = sum(j.episodes_planned for j in jobs) or 1
    table.caption = f"{done}/{planned} episodes"
    grid = Table.grid()
    grid.add_row(ProgressBar(total=planned, completed=done, width=60))
    grid.add_row(table)
    return grid


def job_status_line(job: JobFigures) -> str:
    """A job's figures in one line, for logs that are not a terminal."""
    rate = "-" if job.success_rate is None else f"{job.success_rate:.2f}"
    cost = "?" if job.cost_usd is None else f"${job.cost_usd:.4f}"
    return (f"job {job.job} {job.status}: {job.episodes_done}/{job.episodes_planned} episodes, "
            f"success {rate}, "
            f"{job.total_tokens:,} tokens, {cost}, {job.errors} errors -> {job.run_dir}")
