"""The warm pool (`python -m harness.warm`, `ray.address=warm`): commands run on actors started ahead,
write the rows a pool of their own would, never share processes, and nothing outlives the pool."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import psutil
import pytest

from harness.driver.startup import changed_modules
from harness.driver.warm_pool import LEASE_TIMEOUT_S, Lease, WarmState, read_state, usable_state, write_state
from harness.errors import RunAborted
from harness.tables.reading import read_table
from tests import tiers
from tests.processes import ROOT, session_processes, start_cli, stop_session, wait_for
from tests.processes import wait_until_session_gone as all_gone

SWEEP = ["-m", "variant=baseline,memory", "seed=0", "model=scripted", "embedder=hashing",
         "stream.num_tasks=4", "model.scripted.latency_s=1.0", "cache.enabled=false", "progress=false",
         "ray.include_dashboard=false"]
VARYING = {"call_id", "memory_id", "tool_id", "run_in_flight", "similarity", "path"}
"""Ids, in-flight counts and paths differ between any two sweeps (as every `*_s` and `*_at` clock).
Slow calls (1 s) keep one command on the pool while the other starts."""


def warm(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.warm", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def rows(sweep: Path, job: str, name: str) -> pl.DataFrame:
    frame = read_table(sweep / job, name)
    frame = frame.drop([c for c in frame.columns if c in VARYING or c.endswith(("_s", "_at"))])
    return frame.sort(frame.columns) if frame.columns else frame


@pytest.fixture
@tiers.starts_processes
def warm_pool(tmp_path):
    """A warm pool of one agent worker that stops itself after 15 s without a lease (stopped, and its
    processes killed, after the test should it still run)."""
    state_path = tmp_path / "warm.json"
    started = warm("start", "--state", str(state_path), "--workers", "1", "--idle-minutes", "0.25")
    assert started.returncode == 0, started.stdout + started.stderr
    state = read_state(state_path)
    assert state is not None and "run commands with ray.address=warm" in started.stdout
    yield state_path, state
    warm("stop", "--state", str(state_path), timeout=90)
    for process in session_processes(state.pid, ""):
        process.kill()


@pytest.mark.slow
def test_commands_on_the_warm_pool_write_the_rows_of_their_own_pool_on_fresh_processes_and_idle_it_ends(
        tmp_path, warm_pool):
    state_path, state = warm_pool
    on_warm = [*SWEEP, "ray.address=warm", f"ray.warm_pool={state_path}"]
    leased = [p.pid for p in session_processes(state.pid, "ray::AgentWorker")]  # the ready generation's
    # Two commands at once: one leases the pool, the other starts workers of its own on the same Ray
    # (the pool's way of a cold start), whose rows the first's must equal.
    commands = {name: start_cli(*on_warm, f"hydra.sweep.dir={tmp_path / name}") for name in ("a", "b")}
    try:
        output = {name: command.communicate(timeout=300)[0] for name, command in commands.items()}
    finally:
        for command in commands.values():
            stop_session(command)
    said = {name: [line for line in out.splitlines() if "error" in line.lower() or "failed" in line][-10:]
            or out[-2000:] for name, out in output.items()}
    assert all(command.returncode == 0 for command in commands.values()), {
        name: (command.returncode, said[name]) for name, command in commands.items()}
    [warm_one] = [name for name, out in output.items() if "on the warm pool: generation 1, 1 agent" in out]
    [cold_one] = [name for name, out in output.items() if "pool is not used: another command holds" in out]
    assert "on the warm pool" not in output[cold_one]
    for job in ("0", "1"):
        for name in ("episodes", "attempts", "llm_calls", "transcripts", "memory_events", "runs"):
            warm_rows, cold_rows = (rows(tmp_path / run, job, name) for run in (warm_one, cold_one))
            assert warm_rows.equals(cold_rows), (job, name)
    # Given back, the generation is gone with its processes, and the next one is started for the next command
    # (120 s: under the whole suite's load it once took over 60).
    wait_for(lambda: (read_state(state_path) or state).generation == 2, 120, "the next generation")
    assert leased and not any(psutil.pid_exists(pid) and pid in _pids(state.pid) for pid in leased)
    assert (read_state(state_path) or state).holder is None

    # Unused, it stops by itself, its Ray and every process of it with it.
    wait_for(lambda: not state_path.exists(), 90, "the idle pool to stop")
    all_gone(state.pid, 60)
    assert "idle for 0.25 minutes: stopping" in (tmp_path / "warm.log").read_text()
    stopped = warm("stop", "--state", str(state_path))
    assert stopped.returncode == 0 and "no warm pool runs here" in stopped.stdout


def _pids(session: int) -> set[int]:
    return {process.pid for process in session_processes(session, "")}


def test_without_a_warm_pool_the_command_stops_in_one_line_before_anything_runs(tmp_path):
    with pytest.raises(RunAborted, match=r"^ray.address=warm: no warm pool runs here .*"
                                         r"python -m harness.warm start; nothing was run$"):
        usable_state(tmp_path / "warm.json")
    # A state file whose process is gone (killed with -9) names no pool either.
    write_state(tmp_path / "warm.json", _state(pid=_dead_pid()))
    assert read_state(tmp_path / "warm.json") is None


def test_a_pool_started_with_other_code_paths_is_refused_naming_the_difference(tmp_path, monkeypatch):
    write_state(tmp_path / "warm.json", _state(pythonpath="/elsewhere"))
    monkeypatch.setenv("PYTHONPATH", "/here")
    with pytest.raises(RunAborted, match=r"started with PYTHONPATH '/elsewhere' \(here '/here'\), so its "
                                         r"workers would run other code; stop it"):
        usable_state(tmp_path / "warm.json")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert usable_state(tmp_path / "warm.json").pythonpath == "/elsewhere"


def test_a_module_edited_after_the_process_imported_it_is_named_as_changed(tmp_path, monkeypatch):
    module = tmp_path / "warm_probe_agent.py"
    module.write_text("ANSWER = 1\n")
    os.utime(module, (time.time() - 3600, time.time() - 3600))  # written before this process started
    monkeypatch.syspath_prepend(str(tmp_path))
    import warm_probe_agent  # noqa: F401

    assert str(module) not in changed_modules()
    module.write_text("ANSWER = 2\n")  # an edit: the process still runs ANSWER = 1
    assert str(module) in changed_modules()
    # The keeper asks about its own modules only (the actors it starts import theirs afresh).
    assert changed_modules(None, ["warm_probe_agent"]) == [str(module)]
    assert str(module) not in changed_modules(None, ["json", "harness.driver.warm_pool"])
    module.unlink()
    assert str(module) in changed_modules()
    monkeypatch.delitem(sys.modules, "warm_probe_agent")


def test_the_lease_is_one_commands_at_a_time_and_taken_back_when_its_holder_stops_renewing():
    lease = Lease(released=0.0)
    assert lease.idle_s(100.0) == 100.0
    assert lease.take("a", 100.0) is None
    assert lease.take("b", 101.0) == "another command holds it (a)"
    assert lease.idle_s(101.0) == 0.0
    assert lease.renew("a", 120.0) and not lease.renew("b", 120.0)
    assert not lease.expired(120.0 + LEASE_TIMEOUT_S)
    assert lease.expired(120.1 + LEASE_TIMEOUT_S)
    assert lease.take("b", 121.0 + LEASE_TIMEOUT_S) is None  # a's command was killed: b gets it
    assert not lease.give_back("a", 200.0) and lease.holder == "b"
    assert lease.give_back("b", 200.0) and lease.holder is None and lease.idle_s(230.0) == 30.0


def test_a_command_refused_the_lease_keeps_the_pool_in_use_until_it_leaves_or_stops_renewing():
    """A second command runs workers of its own on the pool's Ray: the pool must not stop under it when
    the holder gives its lease back (it did, under the suite's load: the guest's actors died with the
    pool's Ray, "Connection refused")."""
    lease = Lease(released=0.0)
    assert lease.take("a", 10.0) is None
    assert lease.take("b", 11.0) is not None
    lease.visit("b", 11.0)
    assert lease.give_back("a", 20.0) and lease.idle_s(35.0) == 0.0  # b still runs
    assert lease.renew("b", 40.0) and lease.idle_s(60.0) == 0.0
    lease.leave("b", 65.0)
    assert lease.idle_s(80.0) == 15.0  # idle from when the last command left
    lease.visit("c", 90.0)
    assert lease.idle_s(90.0 + LEASE_TIMEOUT_S) == 0.0
    # c's command was killed: it stopped renewing, and the pool is idle from its last renewal
    assert lease.idle_s(100.0 + LEASE_TIMEOUT_S) == 10.0 + LEASE_TIMEOUT_S and not lease.guests


def _state(**changes: object) -> WarmState:
    me = psutil.Process()
    fields = {"address": "127.0.0.1:1", "pid": me.pid, "started": me.create_time(), "workers": 1,
              "idle_minutes": 1.0, "python": sys.executable, "pythonpath": os.environ.get("PYTHONPATH", ""),
              "cwd": os.getcwd()}
    return WarmState(**{**fields, **changes})


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid
