"""Faults around a run: one live run per directory, nothing left running after a kill -9, and a
run whose gateway, writer or model server dies stops with one line saying what died and the exact
command that resumes it, which then finishes the run without a duplicate."""

from __future__ import annotations

import fcntl
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from harness.driver.lock import DirectoryInUse, exclusive
from tests.processes import (
    QUIET,
    ROOT,
    finished_so_far,
    gone,
    kill_9,
    run_cli,
    session_processes,
    start_cli,
    stop_session,
    wait_for,
)

SCRIPTED = ["model=scripted", "embedder=hashing", *QUIET, "output.flush_interval_s=0.2"]


def episodes(run_dir: Path) -> pl.DataFrame:
    return pl.read_parquet(run_dir / "episodes" / "*.parquet")


@pytest.mark.slow
def test_of_two_runs_into_one_directory_one_runs_the_other_says_who_holds_it(tmp_path):
    """Started at the same instant, as the worst case: whichever takes the lock runs; the other
    exits 2 with one line naming the holder's pid, before Ray starts."""
    run_dir = tmp_path / "run"
    args = [*SCRIPTED, "stream.num_tasks=10", "model.scripted.latency_s=0.2", "cache.enabled=false",
            f"hydra.run.dir={run_dir}"]
    racers = [start_cli(*args) for _ in range(2)]
    try:
        results = [(p.communicate(timeout=300)[0], p.returncode) for p in racers]
    finally:
        for process in racers:
            stop_session(process)
    assert sorted(code for _, code in results) == [0, 2], results
    winner = next(p.pid for p, (_, code) in zip(racers, results, strict=True) if code == 0)
    loser = next(output for output, code in results if code == 2)
    assert loser.strip().startswith("error: ") and len(loser.strip().splitlines()) == 1
    assert f"is in use by another live harness run (pid {winner} " in loser
    assert "Ray" not in loser
    written = episodes(run_dir)
    assert written.height == 10 and written["episode_id"].is_unique().all()


def test_the_lock_dies_with_its_holder(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time, pathlib; from harness.driver.lock import exclusive\n"
        f"with exclusive(pathlib.Path({str(tmp_path)!r})):\n"
        "    print('held', flush=True); time.sleep(600)")], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(DirectoryInUse, match=f"pid {holder.pid} "), exclusive(tmp_path):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with exclusive(tmp_path):  # kill -9 left no stale lock
        fd = os.open(tmp_path / ".lock", os.O_RDWR)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)


@pytest.mark.slow
def test_a_live_sweep_directory_is_refused_too(tmp_path):
    with exclusive(tmp_path / "sweep", "sweep"):
        result = run_cli("-m", "seed=0,1", *SCRIPTED, f"hydra.sweep.dir={tmp_path / 'sweep'}", timeout=120)
    assert result.returncode == 2
    assert "is in use by another live harness sweep" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.slow
def test_an_unwritable_cache_directory_is_refused_before_anything_starts(tmp_path):
    result = run_cli(*SCRIPTED, "cache.enabled=true", "cache.dir=/proc/harness-cache",
                     f"hydra.run.dir={tmp_path / 'run'}", timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().startswith(
        "error: invalid config: cache.dir: cannot write to /proc/harness-cache")
    assert len(result.stderr.strip().splitlines()) == 1 and "Ray" not in result.stdout


def resume_command(output: str) -> list[str]:
    line = output.strip().splitlines()[-1]
    assert line.startswith("error: ") and "resume with: " in line, output[-2000:]
    command = shlex.split(line.split("resume with: ", 1)[1])
    assert command[:3] == ["python", "-m", "harness"]
    return [sys.executable, *command[1:]]


def resume_to_the_end(command: list[str], run_dir: Path, planned: int) -> None:
    """Run the printed resume command: the run completes, no episode twice, none failed by the fault."""
    resumed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                             start_new_session=True)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    written = episodes(run_dir)
    assert written.height == planned and written["episode_id"].is_unique().all()
    assert written["error"].null_count() == planned


@pytest.mark.slow
@pytest.mark.parametrize("part, marker", [("the model limits actor", "ray::ModelLimits"),
                                          ("the writer actor", "ray::WriterHub")])
def test_a_dead_limits_or_writer_actor_stops_the_run_with_the_command_that_resumes_it(tmp_path, part, marker):
    run_dir = tmp_path / "run"
    process = start_cli(*SCRIPTED, "stream.num_tasks=20", "model.scripted.latency_s=0.1", "seeds=[0,1]",
                        f"cache.dir={tmp_path / 'cache'}", f"hydra.run.dir={run_dir}")
    try:
        wait_for(lambda: finished_so_far(run_dir) >= 4, 120, "some episodes")
        victims = session_processes(process.pid, marker)
        assert len(victims) == 1
        kill_9(victims)
        output, _ = process.communicate(timeout=120)
    finally:
        stop_session(process)
    assert process.returncode == 1, output[-2000:]
    assert output.strip().splitlines()[-1].startswith(f"error: {part} died")
    assert "Traceback" not in output, output[-3000:]  # nor a worker's, forwarded by Ray
    command = resume_command(output)
    assert f"hydra.run.dir={run_dir}" in command
    if part == "the writer actor":
        return  # the same resume as after the limits actor's death, tested there
    resume_to_the_end(command, run_dir, 40)


@pytest.mark.e2e
def test_the_local_model_server_never_outlives_its_run_and_its_death_stops_the_run(tmp_path):
    """Its death stops the run with one line and the resume command; a kill -9 of the run that
    started it (the driver alone, as an OOM killer would) takes it down too; the resume completes
    the run with no episode failed by the outage."""
    run_dir = tmp_path / "run"
    # 30 tasks: on a loaded machine the poll below can come late, and 8 were sometimes all done by
    # then (the server was killed after the run had finished: exit 0).
    # Replies of a few tokens: what is under test is the server's life, not its answers (48 tokens made
    # the resume the suite's longest test under load).
    args = [*QUIET, "stream.num_tasks=30", "model.params.max_tokens=8", f"cache.dir={tmp_path / 'cache'}",
            f"hydra.run.dir={run_dir}"]
    process = start_cli(*args)
    try:
        wait_for(lambda: finished_so_far(run_dir) >= 2, 180, "some episodes")
        kill_9(session_processes(process.pid, "harness.models.adapter_server"))
        output, _ = process.communicate(timeout=120)
    finally:
        stop_session(process)
    assert process.returncode == 1, output[-2000:]
    assert output.strip().splitlines()[-1].startswith("error: the local model server died (exit code -9")
    command = resume_command(output)

    again = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    try:
        wait_for(lambda: session_processes(again.pid, "harness.models.adapter_server"), 240,
                 "the resumed run's server")
        server = session_processes(again.pid, "harness.models.adapter_server")[0]
        again.send_signal(signal.SIGKILL)
        again.wait()
        wait_for(lambda: gone(server.pid), 15, "the model server to die with its parent")
    finally:
        stop_session(again)

    resume_to_the_end(command, run_dir, 30)
