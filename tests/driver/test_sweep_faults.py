"""A sweep's jobs share one pool of agent workers (harness/driver/pool.py). A pool worker killed in the
middle of a sweep is restarted by Ray, its agent runs of every job carry on from what the writer
holds, the other jobs go on, and every job ends with the rows of an uninterrupted sweep."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from harness.tables.orphans import finished_episodes
from tests.processes import QUIET, kill_9, session_processes, start_cli, stop_session, wait_for

pytestmark = pytest.mark.slow

SEEDS = [0, 1, 2]
SWEEP = ["-m", "variant=memory", "model=scripted", "embedder=hashing", "stream.num_tasks=16",
         "model.scripted.latency_s=0.1", "cache.enabled=false", "output.flush_interval_s=0.2",
         f"seed={','.join(map(str, SEEDS))}",
         *[option for option in QUIET if not option.startswith("ray.num_workers=")], "ray.num_workers=2"]
VOLATILE = {"call_id", "started_at", "finished_at", "created_at", "latency_s", "harness_s", "queued_s",
            "run_in_flight", "memory_id"}
"""Columns that differ between any two runs (ids drawn at random, clocks, in-flight counts)."""


def rows(job: Path) -> dict[str, list[dict]]:
    """Every table of the job but interrupted_calls (the calls the kill cut short, which an
    uninterrupted sweep does not have), without the volatile columns, in a stable order."""
    found = {}
    for table in json.loads((job / "manifest.json").read_text())["tables"]:
        if table == "interrupted_calls" or not (job / table).is_dir():
            continue
        records = [{k: v for k, v in r.items() if k not in VOLATILE}
                   for r in ds.dataset(job / table).to_table().to_pylist()]
        found[table] = sorted(records, key=lambda r: json.dumps(r, sort_keys=True, default=str))
    return found


def finish(process: subprocess.Popen[str]) -> str:
    try:
        output, _ = process.communicate(timeout=400)
    finally:
        stop_session(process)
    assert process.returncode == 0, output[-3000:]
    return output


def test_a_killed_pool_worker_costs_no_job_a_row(tmp_path):
    reference = start_cli(*SWEEP, f"hydra.sweep.dir={tmp_path / 'reference'}")
    sweep = tmp_path / "sweep"
    process = start_cli(*SWEEP, f"hydra.sweep.dir={sweep}")
    try:
        jobs = [sweep / str(job) for job in range(len(SEEDS))]

        def episodes_written() -> int:
            return sum(len(finished_episodes(job)) for job in jobs if (job / "episodes").is_dir())

        wait_for(lambda: episodes_written() >= 6, 240, "the sweep's first episodes")
        workers = session_processes(process.pid, "ray::AgentWorker")
        assert len(workers) == 2, "one pool of two workers for the three jobs"
        kill_9(workers[:1])
        output = finish(process)
    finally:
        stop_session(process)
    finish(reference)
    assert episodes_written() == len(SEEDS) * 16
    for job in range(len(SEEDS)):
        manifest = json.loads((sweep / str(job) / "manifest.json").read_text())
        assert manifest["status"] == "finished", manifest["error"]
        mine, theirs = rows(sweep / str(job)), rows(tmp_path / "reference" / str(job))
        assert set(mine) == set(theirs)
        differing = [table for table in theirs if mine[table] != theirs[table]]
        assert not differing, f"job {job}: {differing} differ after the worker's death"
    assert "3 jobs, 3 completed, 0 failed" in output
