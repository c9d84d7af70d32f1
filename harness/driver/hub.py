"""The writer hub: the pool's one writer actor (harness/driver/pool.py starts it), holding a
`TableWriter` (harness/tables/writer.py) for each job, keyed by the job's directory, and exporting the
pool's Ray metrics from the rows it takes (harness/driver/metrics.py). Agent workers send it their rows
in batches (harness/driver/actors.py `ActorSink`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from harness.driver.metrics import JobLabels, MetricsExporter
from harness.tables.writer import TableWriter, UnwritableRows


class WriterHub:
    """The writer actor of a pool: a `TableWriter` for each job it opened, keyed by the job's
    directory. A job's failure (a full disk under its directory, another writer taking it over)
    stays that job's: kept, and raised to it when it next asks (poll), never to the other jobs
    whose rows came in the same batch. As it sees every row of every job, it also exports the
    pool's Ray metrics (harness/driver/metrics.py), from the rows each writer has taken."""

    def __init__(self) -> None:
        self._writers: dict[str, TableWriter] = {}
        self._failures: dict[str, Exception] = {}
        self._unwritable: dict[str, UnwritableRows] = {}
        """Jobs with rows their tables could not hold: their writers go on writing every other row
        (the calls' above all) until the job, told at its next poll or close, stops."""
        self._metrics = MetricsExporter()

    def open(self, job: str, flush_interval_s: float, labels: JobLabels | None = None) -> None:
        """A writer for `job`; its rows are counted in the metrics under `labels` (none: not counted)."""
        self._failures.pop(job, None)
        self._unwritable.pop(job, None)
        self._writers[job] = TableWriter(job, flush_interval_s)
        if labels is not None:
            self._metrics.open_job(job, labels)

    def append(self, job: str, table: str, rows: list[dict[str, Any]]) -> None:
        self._call(job, lambda writer: writer.append(table, rows))
        self._metrics.count(job, {table: rows})

    def append_many(self, batches: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
        for job, batch in batches.items():
            if job not in self._writers or job in self._failures:
                continue  # a job that has stopped: a resume runs these episodes again
            with contextlib.suppress(Exception):  # kept in _failures for the job
                self._call(job, lambda writer, batch=batch: writer.append_many(batch))
                self._metrics.count(job, batch)  # only once its writer has taken the rows
        self._metrics.export_if_due()

    def flush_all(self) -> None:
        """Write every job's rows now (the command was told to stop; harness/driver/signals.py)."""
        for job in list(self._writers):
            with contextlib.suppress(Exception):  # kept in _failures / _unwritable for the job
                self._call(job, TableWriter.flush)

    def poll(self, job: str) -> dict[str, int]:
        self._metrics.export_if_due()  # the last rows of a quiet spell go out too
        counts = self._call(job, TableWriter.poll)
        if job in self._unwritable:
            raise self._unwritable[job]
        return counts

    def figures(self, job: str) -> dict[str, Any]:
        return self._call(job, TableWriter.figures)

    def restart_runs(self, job: str, run_ids: list[str]) -> list[str]:
        return self._call(job, lambda writer: writer.restart_runs(run_ids))

    def close(self, job: str, compact: bool = True) -> dict[str, int]:
        """Flush what reached the job's writer and close it (also after its failure: what can be
        written is)."""
        self._failures.pop(job, None)
        unwritable = self._unwritable.pop(job, None)
        self._metrics.close_job(job)
        writer = self._writers.pop(job, None)
        written = writer.close(compact) if writer is not None else {}
        if unwritable is not None:
            raise unwritable
        return written

    def _call(self, job: str, action: Callable[[TableWriter], Any]) -> Any:
        if job in self._failures:
            raise self._failures[job]
        if job not in self._writers:
            raise RuntimeError(f"no writer is open for {job}")
        try:
            return action(self._writers[job])
        except UnwritableRows as failure:
            self._unwritable.setdefault(job, failure)
            raise
        except Exception as failure:
            self._failures[job] = failure
            raise
