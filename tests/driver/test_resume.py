"""Resume and recovery: after a kill -9 of the whole run, re-running into the same directory ends
with exactly the rows an uninterrupted run writes; after a kill -9 of an agent worker, the run
recovers by itself and ends with those same rows. No duplicates, no gaps."""

import json
import os
import signal
from pathlib import Path

import polars as pl
import pyarrow.compute as pc
import pytest

from harness.tables.orphans import drop_orphans, finished_episodes
from harness.tables.records import TABLES
from harness.tables.writer import TableWriter
from tests import tiers
from tests.processes import (
    kill_9,
    session_processes,
    start_cli,
    stop_session,
    wait_for,
    wait_until_session_gone,
)

OPTIONS = ["variant=memory", "model=scripted", "embedder=hashing", "seeds=[0,1]", "stream.num_tasks=30",
           "model.scripted.latency_s=0.05", "progress=false", "ray.include_dashboard=false",
           "output.flush_interval_s=0.2", "stream.probe_every=10", "stream.probe_size=2"]


def start(run_dir: Path, cache: Path):
    return start_cli(*OPTIONS, f"cache.dir={cache}", f"hydra.run.dir={run_dir}")


def rows(run_dir: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    episodes = pl.read_parquet(run_dir / "episodes" / "*.parquet").sort("episode_id")
    calls = pl.read_parquet(run_dir / "llm_calls" / "*.parquet")
    return episodes, calls


def wait_for_some_episodes(run_dir: Path, at_least: int) -> None:
    wait_for(lambda: len(finished_episodes(run_dir)) >= at_least, 180, f"{at_least} episodes")


@pytest.fixture(scope="module")
@tiers.starts_processes
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


@pytest.mark.slow
def test_kill_9_of_the_whole_run_then_resume(tmp_path, reference):
    run_dir, cache = tmp_path / "run", tmp_path / "cache"
    process = start(run_dir, cache)
    try:
        wait_for_some_episodes(run_dir, 10)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        wait_until_session_gone(process.pid)
    finally:
        stop_session(process)
    assert len(finished_episodes(run_dir)) < len(reference[0])
    again = start(run_dir, cache)
    output, _ = again.communicate(timeout=300)
    assert again.returncode == 0, output[-2000:]
    assert "resuming in" in output
    same_rows(run_dir, reference)


@pytest.mark.slow
def test_a_finished_job_run_again_has_nothing_left_and_leaves_its_tables_as_they_were(tmp_path):
    run_dir, cache = tmp_path / "run", tmp_path / "cache"
    options = [*(o for o in OPTIONS if not o.startswith("stream.num_tasks=")), "stream.num_tasks=4",
               f"cache.dir={cache}", f"hydra.run.dir={run_dir}"]
    first = start_cli(*options)
    output, _ = first.communicate(timeout=300)
    assert first.returncode == 0, output[-2000:]
    files = {table: sorted(f.name for f in (run_dir / table).glob("*.parquet")) for table in TABLES}
    again = start_cli(*options)
    output, _ = again.communicate(timeout=300)
    assert again.returncode == 0, output[-2000:]
    assert f"resuming in {run_dir}: 8 episodes already written, 0 to go" in output
    assert {table: sorted(f.name for f in (run_dir / table).glob("*.parquet")) for table in TABLES} == files
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert (manifest["status"], manifest["resumes"], manifest["tables"]["episodes"]) == ("finished", 1, 8)


@pytest.mark.slow
def test_a_killed_agent_worker_is_restarted_and_the_run_finishes_by_itself(tmp_path, reference):
    """A worker killed, then its replacement killed too: the run still ends as if nothing happened."""
    run_dir, cache = tmp_path / "run", tmp_path / "cache"
    process = start(run_dir, cache)

    def workers() -> dict[int, object]:
        return {w.pid: w for w in session_processes(process.pid, "ray::AgentWorker")}

    try:
        wait_for_some_episodes(run_dir, 10)
        first = workers()
        victim = next(iter(first))
        kill_9([first[victim]])
        wait_for(lambda: set(workers()) - set(first), 60, "Ray to restart the worker")
        wait_for_some_episodes(run_dir, len(finished_episodes(run_dir)) + 5)
        replacement = next(w for pid, w in workers().items() if pid not in first)
        kill_9([replacement])
        output, _ = process.communicate(timeout=300)
    finally:
        stop_session(process)
    assert process.returncode == 0, output[-2000:]
    assert len(finished_episodes(run_dir)) == len(reference[0])
    same_rows(run_dir, reference)
    interrupted = run_dir / "interrupted_calls"
    if interrupted.is_dir() and list(interrupted.glob("*.parquet")):
        lost = pl.read_parquet(interrupted / "*.parquet")  # sent by the dead workers, never in an episode
        assert set(lost["call_id"]).isdisjoint(set(rows(run_dir)[1]["call_id"]))


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


def test_a_run_stopped_before_its_first_episode_was_written_leaves_no_calls_to_repeat(tmp_path):
    """Calls sent in the first episodes, none of which finished, are interrupted calls on resume:
    the resumed run sends them again, and llm_calls must hold only the ones of written episodes."""
    from harness.agent_run.plan import build_plan
    from harness.driver.resume import plan_resume
    from tests.conftest import run_variant, scripted_settings

    run = run_variant("stream.num_tasks=2")
    writer = TableWriter(tmp_path, flush_interval_s=3600)
    writer.append("llm_calls", run.rows["llm_calls"])  # no episode row: stopped before the first one
    writer.close()
    specs = build_plan(scripted_settings("stream.num_tasks=2"), tmp_path)
    resume = plan_resume(specs, tmp_path)
    assert resume.resumes == 1 and not resume.finished
    assert not list((tmp_path / "llm_calls").glob("*.parquet"))
    interrupted = pl.read_parquet(tmp_path / "interrupted_calls" / "*.parquet")
    assert sorted(interrupted["call_id"]) == sorted(row["call_id"] for row in run.rows["llm_calls"])


def test_a_fresh_directory_is_no_resume(tmp_path):
    from harness.agent_run.plan import build_plan
    from harness.agent_run.spec import expected_episodes
    from harness.driver.resume import plan_resume
    from tests.conftest import scripted_settings

    specs = build_plan(scripted_settings("stream.num_tasks=2"), tmp_path)
    resume = plan_resume(specs, tmp_path)
    assert (resume.finished, resume.resumes, resume.described_runs) == ({}, 0, frozenset())
    assert resume.left == {spec.run_id: expected_episodes(spec) for spec in specs}


def test_a_resume_gives_each_run_the_episodes_it_finished_and_what_it_has_left(tmp_path):
    """The plan stays as planned (a spec is never copied); what a resume found goes beside it."""
    from harness.agent_run.plan import build_plan
    from harness.driver.resume import plan_resume
    from tests.conftest import run_variant, scripted_settings

    run = run_variant("stream.num_tasks=4")
    written = sorted(row["episode_id"] for row in run.rows["episodes"][:2])
    writer = TableWriter(tmp_path, flush_interval_s=3600)
    for table in ("llm_calls", "episodes"):
        writer.append(table, [row for row in run.rows[table] if row["episode_id"] in written])
    writer.close()
    [spec] = build_plan(scripted_settings("stream.num_tasks=4"), tmp_path)
    resume = plan_resume([spec], tmp_path)
    assert (resume.finished, resume.left, resume.resumes) == ({spec.run_id: written}, {spec.run_id: 2}, 1)


def test_a_run_stopped_before_its_first_episode_keeps_the_one_runs_row_it_wrote(tmp_path):
    """A resume writes no second `runs` row for an agent run already described, also when nothing of it
    finished and nothing was set aside (a disk that filled before its first episode)."""
    import datetime as dt

    from harness.agent_run.plan import build_plan
    from harness.driver.resume import plan_resume
    from harness.tables.records import RunRow
    from tests.conftest import scripted_settings

    specs = build_plan(scripted_settings("stream.num_tasks=2"), tmp_path)
    writer = TableWriter(tmp_path, flush_interval_s=3600)
    writer.append("runs", [RunRow(run_id=specs[0].run_id, variant="baseline", env="countries", seed=0,
                                  order_seed=0, scenario="sequential", model="scripted", job=None,
                                  overrides="", model_params="{}", settings="{}",
                                  started_at=dt.datetime.now(dt.UTC)).model_dump()])
    writer.close()
    resume = plan_resume(specs, tmp_path)
    assert resume.resumes == 0 and resume.described_runs == {specs[0].run_id}

def test_a_run_written_before_a_column_was_added_resumes_into_one_table_of_todays_schema(ray_session,
                                                                                         tmp_path):
    """A directory of schema 6 (no `episodes.task_metadata`), stopped after two of its three episodes,
    resumed by this harness: the third episode runs, and its table ends as one file of today's
    schema, the older rows null in the new column."""
    import json

    import pyarrow.parquet as pq

    from harness.driver.run import run
    from harness.tables.reading import read_table
    from harness.tables.records import SCHEMA_VERSION
    from harness.tables.writer import table_files
    from tests.conftest import scripted_settings

    settings = scripted_settings("env=gsm8k", "env.path=tests/data/datasets/gsm8k.jsonl", "variant=baseline",
                                 "stream.num_tasks=3", "stream.tuning_size=0")
    assert run(settings, tmp_path).manifest.status == "finished"
    whole = read_table(tmp_path, "episodes").sort("stream_position")
    [part] = table_files(tmp_path / "episodes")
    older = pq.read_table(part).drop_columns(["task_metadata"])
    older = older.replace_schema_metadata({**older.schema.metadata, b"harness.schema_version": b"6"})
    for row in older.sort_by("stream_position").to_pylist()[:2]:
        pq.write_table(older.filter(pc.equal(older["episode_id"], row["episode_id"])),
                       part.parent / f"part-older-{row['stream_position']}.parquet")
    part.unlink()
    resumed = run(settings, tmp_path)
    assert resumed.manifest.status == "finished"
    [compacted] = table_files(tmp_path / "episodes")
    assert pq.read_schema(compacted).metadata[b"harness.schema_version"] == SCHEMA_VERSION.encode()
    after = read_table(tmp_path, "episodes").sort("stream_position")
    assert after["task_metadata"].to_list()[:2] == [None, None]
    assert json.loads(after["task_metadata"][2]) == json.loads(whole["task_metadata"][2])
    columns = ["episode_id", "task_id", "response", "success", "total_tokens"]
    assert after.select(columns).equals(whole.select(columns))
