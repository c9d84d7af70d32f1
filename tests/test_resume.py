"""Resume: after a kill -9, re-running into the same directory ends with exactly the rows an
uninterrupted run writes: no duplicates, no gaps."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from harness.resume import drop_orphans, finished_episodes
from harness.writer import TableWriter

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = ["variant=memory", "model=scripted", "embedder=hashing", "seeds=[0,1]", "stream.num_tasks=30",
           "model.scripted.latency_s=0.05", "progress=false", "ray.include_dashboard=false",
           "output.flush_interval_s=0.2", "stream.probe_every=10", "stream.probe_size=2"]


def start(run_dir: Path, cache: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness", *OPTIONS, f"cache.dir={cache}",
                             f"hydra.run.dir={run_dir}"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def rows(run_dir: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    episodes = pl.read_parquet(run_dir / "episodes" / "*.parquet").sort("episode_id")
    calls = pl.read_parquet(run_dir / "llm_calls" / "*.parquet")
    return episodes, calls


def wait_until_gone(session: int) -> None:
    """Ray's processes of the killed run linger a few seconds; a crashed machine would have none."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if subprocess.run(["pgrep", "-s", str(session)], capture_output=True).returncode != 0:
            return
        time.sleep(0.5)


def wait_for_some_episodes(run_dir: Path, at_least: int) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        parts = list((run_dir / "episodes").glob("*.parquet"))
        if parts and len(finished_episodes(run_dir)) >= at_least:
            return
        time.sleep(0.2)
    raise AssertionError("the run wrote no episodes in time")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    process = start(run_dir, tmp_path_factory.mktemp("cache-ref"))
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output[-2000:]
    return rows(run_dir)


def same_rows(resumed: Path, reference) -> None:
    episodes, calls = rows(resumed)
    ref_episodes, ref_calls = reference
    assert episodes["episode_id"].is_unique().all()
    columns = ["episode_id", "task_id", "probe", "response", "success", "total_tokens", "memory_size"]
    assert episodes.select(columns).equals(ref_episodes.select(columns))
    per_episode = calls.group_by("episode_id").agg(pl.len(), pl.col("total_tokens").sum()).sort("episode_id")
    ref_per_episode = ref_calls.group_by("episode_id").agg(pl.len(), pl.col("total_tokens").sum()).sort(
        "episode_id")
    assert per_episode.equals(ref_per_episode)


def test_kill_9_of_the_whole_run_then_resume(tmp_path, reference):
    run_dir, cache = tmp_path / "run", tmp_path / "cache"
    process = start(run_dir, cache)
    wait_for_some_episodes(run_dir, 10)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    wait_until_gone(process.pid)
    assert len(finished_episodes(run_dir)) < len(reference[0])
    again = start(run_dir, cache)
    output, _ = again.communicate(timeout=300)
    assert again.returncode == 0, output[-2000:]
    assert "resuming in" in output
    same_rows(run_dir, reference)


def test_kill_9_of_a_worker_actor_then_resume(tmp_path, reference):
    run_dir, cache = tmp_path / "run", tmp_path / "cache"
    process = start(run_dir, cache)
    wait_for_some_episodes(run_dir, 10)
    subprocess.run(["pkill", "-9", "-f", "ray::AgentWorker"], check=False)
    output, _ = process.communicate(timeout=300)
    assert process.returncode != 0
    again = start(run_dir, cache)
    output, _ = again.communicate(timeout=300)
    assert again.returncode == 0, output[-2000:]
    same_rows(run_dir, reference)


def test_orphan_rows_of_unfinished_episodes_are_removed(tmp_path):
    writer = TableWriter(tmp_path, flush_interval_s=3600)
    from tests.conftest import run_variant

    run = run_variant("stream.num_tasks=3")
    for table in ("llm_calls", "attempts"):
        writer.append(table, run.rows[table])
    writer.append("episodes", run.rows["episodes"][:2])  # the third episode never made it
    writer.close()
    finished = finished_episodes(tmp_path)
    assert len(finished) == 2 and drop_orphans(tmp_path, finished) == 2
    assert set(pl.read_parquet(tmp_path / "llm_calls" / "*.parquet")["episode_id"]) == finished
