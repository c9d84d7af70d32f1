"""A full disk ends the run with one line that names the directory and the resume command; once
space is freed, the resume ends with every table an uninterrupted run writes.

The run directory lives on a small tmpfs this test mounts (and unmounts); where mounting is not
allowed (not root, no CAP_SYS_ADMIN), the test says so and skips.
"""

import shlex
import subprocess
from pathlib import Path

import polars as pl
import pytest

from harness.errors import DiskFull, disk_full, is_disk_full
from harness.tables.records import TABLES
from tests.processes import QUIET, run_cli

OPTIONS = [*QUIET, "variant=memory", "model=scripted", "embedder=hashing", "seeds=[0,1]",
           "stream.num_tasks=40", "cache.enabled=false", "output.flush_interval_s=0.2",
           "stream.snapshot_every=10"]
VARYING = {"call_id", "started_at", "finished_at", "created_at", "latency_s", "harness_s", "queued_s",
           "memory_id"}
"""Columns that differ between any two runs (ids and clocks)."""
SKIPPED = {"interrupted_calls"}
"""The calls of the episodes the full disk cut short, which a resume records and an uninterrupted run
does not have."""


def mounted_tmpfs(directory: Path, size: str) -> bool:
    directory.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                            capture_output=True, text=True)
    return result.returncode == 0


@pytest.fixture
def tiny_disk(tmp_path):
    directory = tmp_path / "tiny"
    if not mounted_tmpfs(directory, "64k"):
        pytest.skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
    yield directory
    subprocess.run(["umount", "-l", str(directory)], capture_output=True)


def table(run_dir: Path, name: str) -> pl.DataFrame:
    frame = pl.read_parquet(run_dir / name / "*.parquet")
    frame = frame.drop([c for c in frame.columns if c in VARYING])
    return frame.sort(frame.columns) if frame.columns else frame


def disk_usage(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


@pytest.mark.slow
def test_a_full_disk_stops_the_run_in_one_line_and_the_resume_ends_as_uninterrupted(tmp_path, tiny_disk):
    reference = tmp_path / "reference"
    done = run_cli(*OPTIONS, f"hydra.run.dir={reference}")
    assert done.returncode == 0, done.stderr[-2000:]

    # Room for the start and part of the stream, not for all of it.
    size = max(disk_usage(reference) // 2, 256 * 1024)
    subprocess.run(["mount", "-o", f"remount,size={size}", str(tiny_disk)], check=True)
    run_dir = tiny_disk / "run"
    full = run_cli(*OPTIONS, f"hydra.run.dir={run_dir}")
    assert full.returncode == 1, full.stdout[-2000:] + full.stderr[-2000:]
    last = full.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: the disk is full: no space left to write under {run_dir}"), last
    assert "Traceback" not in full.stderr and "During handling" not in full.stderr
    assert not list(run_dir.rglob("*.tmp")), "a temporary file was left behind"

    subprocess.run(["mount", "-o", "remount,size=256m", str(tiny_disk)], check=True)  # space is freed
    command = shlex.split(last.split("resume with: ", 1)[1])
    assert command[:3] == ["python", "-m", "harness"]
    resumed = run_cli(*command[3:])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    for name in sorted(set(TABLES) - SKIPPED):
        mine, theirs = table(run_dir, name), table(reference, name)
        differing = [c for c in theirs.columns if c not in mine.columns or not mine[c].equals(theirs[c])]
        assert mine.shape == theirs.shape and not differing, f"{name} differs after the resume: {differing}"


def test_a_full_disk_is_recognised_behind_the_wrappers_that_report_it():
    assert is_disk_full(OSError(28, "No space left on device"))
    assert is_disk_full(RuntimeError("lance error: LanceError(IO): No space left on device (os error 28)"))
    try:
        try:
            raise OSError(28, "No space left on device")
        except OSError as error:
            raise ValueError("writing the part failed") from error
    except ValueError as wrapped:
        assert is_disk_full(wrapped)
    assert not is_disk_full(OSError(13, "Permission denied"))
    stopped = disk_full("/runs/x", OSError(28, "No space left on device")).with_hint("resume with: again")
    assert isinstance(stopped, DiskFull) and "\n" not in str(stopped)
    assert str(stopped).startswith("the disk is full: no space left to write under /runs/x")
