"""A whole job on Ray with the scripted model: tables, manifest, concurrency, the CLI."""

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.dataset as ds
import pytest

from harness.config import LocalServer, Price
from harness.driver.run import run
from harness.models.model_server import LocalModelServer, ModelServerError
from harness.tables.records import TABLES
from tests import tiers
from tests.conftest import scripted_settings
from tests.processes import StartedCli, stop_session

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
@tiers.starts_processes
def finished_run(ray_session, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    settings = scripted_settings("seeds=[0,1,2]", "stream.num_tasks=6", "model.scripted.latency_s=0.05")
    return run(settings, run_dir)


def test_each_agent_run_writes_its_stream_to_the_tables(finished_run):
    episodes = ds.dataset(finished_run.run_dir / "episodes").to_table().to_pylist()
    assert len(episodes) == 18
    assert sorted({e["seed"] for e in episodes}) == [0, 1, 2]
    for run_id in {e["run_id"] for e in episodes}:
        positions = sorted(e["stream_position"] for e in episodes if e["run_id"] == run_id)
        assert positions == list(range(6))
    assert all(e["model"] == "scripted/oracle" for e in episodes)


def test_episode_totals_equal_the_sum_of_their_calls(finished_run):
    run_dir = finished_run.run_dir
    mismatches = duckdb.sql(f"""
        with calls as (
            select run_id, task_id, count(*) n, sum(prompt_tokens) p, sum(completion_tokens) c,
                   sum(total_tokens) t, sum(cost_usd) usd
            from '{run_dir}/llm_calls/*.parquet' group by all)
        select e.task_id from '{run_dir}/episodes/*.parquet' e join calls using (run_id, task_id)
        where e.n_calls != n or e.prompt_tokens != p or e.completion_tokens != c
              or e.total_tokens != t or e.cost_usd != usd""").fetchall()
    assert mismatches == []
    assert duckdb.sql(f"select count(*) from '{run_dir}/llm_calls/*.parquet'").fetchall() == [(18,)]


def test_agent_runs_run_concurrently(finished_run):
    spans = duckdb.sql(f"""select run_id, min(started_at), max(finished_at)
                           from '{finished_run.run_dir}/episodes/*.parquet' group by run_id""").fetchall()
    latest_start = max(start for _, start, _ in spans)
    earliest_end = min(end for _, _, end in spans)
    assert latest_start < earliest_end  # every run was in progress at one same moment


def test_manifest_records_what_ran_and_how_it_ended(finished_run):
    manifest = json.loads((finished_run.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["model_is_scripted"]
    assert set(manifest["tables"]) == set(TABLES)
    assert [manifest["tables"][t] for t in ("episodes", "attempts", "llm_calls")] == [18, 18, 18]
    assert manifest["packages"]["ray"] and manifest["packages"]["litellm"]
    assert [r["episodes"] for r in manifest["agent_runs"]] == [6, 6, 6]
    assert manifest["started_at"] < manifest["finished_at"]
    assert manifest["env_setup_s"]["countries"] and all(s > 0 for s in manifest["env_setup_s"]["countries"])
    assert manifest["config"]["model"]["name"] == "scripted/oracle"


def harness_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_cli_rejects_a_bad_value_in_one_line_before_starting_anything(tmp_path):
    result = harness_cli("stream.num_tasks=0", f"hydra.run.dir={tmp_path}/run", cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: invalid config: stream.num_tasks: Input should be greater than 0 (got 0)"]
    assert "Ray" not in result.stdout and not (tmp_path / "run" / "manifest.json").exists()


SEQUENTIAL = ["-m", "hydra/launcher=basic", "seed=0,1", "model=scripted", "stream.num_tasks=3",
              "progress=false", "cache.enabled=false", "ray.include_dashboard=false"]
ALL_FAILING = ["-m", "stream.num_tasks=100000,200000", "model=scripted", "embedder=hashing", "progress=false",
               "ray.include_dashboard=false"]
ONE_FAILING = ["-m", "seed=0,1", "stream.num_tasks=8,100000", "model=scripted",
               "model.scripted.latency_s=0.3", "cache.enabled=false", "ray.include_dashboard=false"]


@pytest.fixture(scope="module")
@tiers.starts_processes
def sweeps(tmp_path_factory) -> Iterator[dict[str, StartedCli]]:
    """The sweeps of the tests below, run side by side (each into a directory of its own), each
    started once the one before has its Ray: a test waits for its own."""
    root = tmp_path_factory.mktemp("sweeps")
    started = {}
    for name, overrides in (("sequential", SEQUENTIAL), ("all failing", ALL_FAILING),
                            ("one failing", ONE_FAILING)):
        started[name] = StartedCli(root / name.replace(" ", "-"), *overrides)
        started[name].wait_past_ray_start()
    yield started
    for sweep in started.values():
        stop_session(sweep.process)


def test_the_stock_sequential_launcher_still_runs_one_job_per_seed(sweeps):
    result, sweep = sweeps["sequential"].result(), sweeps["sequential"].run_dir  # SEQUENTIAL
    assert result.returncode == 0, result.stderr[-2000:]
    for job, seed in (("0", 0), ("1", 1)):
        episodes = ds.dataset(sweep / job / "episodes").to_table()
        assert episodes.num_rows == 3 and set(episodes["seed"].to_pylist()) == {seed}
    assert result.stdout.count("success_rate") == 2 and "tables in" in result.stdout


@pytest.mark.e2e
def test_a_model_server_that_cannot_start_names_its_log(tmp_path):
    not_a_model = LocalServer(package="harness", file="__init__.py", alias="broken", n_ctx=256,
                              n_threads=1, startup_timeout_s=60,
                              price=Price(input_per_token=0, output_per_token=0))
    log = tmp_path / "model_server.log"
    with pytest.raises(ModelServerError, match=f"see {log}"), LocalModelServer(not_a_model, log):
        pass
    assert log.stat().st_size > 0


@pytest.mark.slow
def test_ctrl_c_keeps_finished_episodes_and_marks_the_run_interrupted(tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "harness", "model=scripted", "model.scripted.latency_s=0.1",
         "cache.enabled=false", "stream.num_tasks=200", "progress=false", "ray.include_dashboard=false",
         "output.flush_interval_s=0.2", f"hydra.run.dir={run_dir}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not list((run_dir / "episodes").glob("*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130 and "interrupted" in stderr.splitlines()[-1]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    written = ds.dataset(run_dir / "episodes").count_rows()
    assert manifest["status"] == "interrupted" and 0 < written < 200
    assert manifest["tables"]["episodes"] == written
    calls = ds.dataset(run_dir / "llm_calls").to_table()["task_id"].to_pylist()
    episodes = ds.dataset(run_dir / "episodes").to_table()["task_id"].to_pylist()
    assert set(episodes) <= set(calls)  # no episode row without its calls


@pytest.mark.slow
def test_ctrl_c_on_a_sweep_says_so_once_and_marks_every_job_interrupted(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "harness", "-m", "seed=0,1", "model=scripted", "model.scripted.latency_s=0.1",
         "embedder=hashing", "cache.enabled=false", "stream.num_tasks=200", "progress=false",
         "ray.include_dashboard=false", "output.flush_interval_s=0.2", f"hydra.sweep.dir={tmp_path}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 180
    while (not all(list((tmp_path / job / "episodes").glob("*.parquet")) for job in ("0", "1"))
           and time.monotonic() < deadline):  # each job has written some episodes
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=90)
    assert process.returncode == 130, stderr[-2000:]
    assert "died" not in stderr and "failed" not in stderr, stderr[-2000:]  # its own actors, killed by it
    for job in ("0", "1"):
        manifest = json.loads((tmp_path / job / "manifest.json").read_text())
        assert manifest["status"] == "interrupted"
        assert 0 < manifest["tables"]["episodes"] < 200


def test_a_sweep_whose_jobs_all_fail_says_so_and_points_at_no_tables(sweeps):
    result = sweeps["all failing"].result()  # ALL_FAILING: both jobs ask for more tasks than there are
    output = result.stdout + result.stderr
    assert result.returncode == 1 and "exceeds the" in output
    assert "2 of 2 jobs failed (see each job's line above)" in output and "nothing to compare" in output
    assert "harness.report" not in output and "sweep tables in" not in output and "the others'" not in output


def test_a_ray_sweep_runs_its_jobs_at_once_and_a_failing_job_spares_the_others(sweeps):
    result, sweep = sweeps["one failing"].result(), sweeps["one failing"].run_dir  # ONE_FAILING
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    finished = [json.loads((j / "manifest.json").read_text()) for j in jobs if (j / "manifest.json").exists()]
    assert len(jobs) == 4 and len(finished) == 2  # the two jobs with 100000 tasks fail validation
    assert result.returncode != 0 and "exceeds the" in result.stdout + result.stderr
    assert all(m["status"] == "finished" and m["tables"]["episodes"] == 8 for m in finished)
    latest_start = max(m["started_at"] for m in finished)
    earliest_end = min(m["finished_at"] for m in finished)
    assert latest_start < earliest_end  # the jobs overlapped in time
    assert (sweep / "multirun.yaml").exists() and all((j / ".hydra").is_dir() for j in jobs)
    summary = result.stdout[result.stdout.index("success_rate"):]
    assert "│ baseline ┆ 0 " in summary and "│ baseline ┆ 1 " in summary
    # One live view: each finished job reported once, by the launcher, with its figures and output dir.
    for job in (j for j in jobs if (j / "manifest.json").exists()):
        lines = [line for line in result.stdout.splitlines() if line.startswith(f"job {job.name} finished:")]
        assert len(lines) == 1 and lines[0].startswith(f"job {job.name} finished: 8/8 episodes, success ")
        assert lines[0].endswith(f"-> {job}")


@pytest.mark.e2e
def test_the_local_embedder_is_loaded_once_per_node_for_all_the_pools_workers(ray_session, tmp_path):
    """Its service (harness/models/minilm.py) encodes for every worker; each call still has its own row."""
    from ray._private import state

    settings = scripted_settings("variant=memory", "embedder=minilm", "seeds=[0,1]", "stream.num_tasks=3",
                                 "ray.num_workers=2")
    before = {a["ActorID"] for a in state.actors().values() if a["ActorClassName"] == "MiniLMService"}
    result = run(settings, tmp_path)
    services = [a for a in state.actors().values()
                if a["ActorClassName"] == "MiniLMService" and a["ActorID"] not in before]
    assert len(services) == 1  # one node here
    calls = pl.read_parquet(result.run_dir / "llm_calls" / "*.parquet").filter(pl.col("purpose") == "embed")
    assert calls.height >= 6 and calls["error"].is_null().all()
    assert (calls["prompt_tokens"] > 0).all()
    assert calls["model"].unique().to_list() == ["local/all-MiniLM-L6-v2"]


def test_a_job_whose_variant_never_embeds_starts_no_embedder(ray_session, tmp_path):
    """The default embedder is the local MiniLM; a baseline job must not pay its process and torch."""
    from ray._private import state

    settings = scripted_settings("variant=baseline", "embedder=minilm", "stream.num_tasks=2")
    before = {a["ActorID"] for a in state.actors().values() if a["ActorClassName"] == "MiniLMService"}
    result = run(settings, tmp_path)
    started = [a for a in state.actors().values()
               if a["ActorClassName"] == "MiniLMService" and a["ActorID"] not in before]
    assert started == []
    assert result.manifest.status == "finished"
