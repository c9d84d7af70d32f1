"""The bench's one process meter counts what its processes spent: this process's tree (and no process
that merely names Ray), or a command's session from the command's start to its exit, and the processes
of a session it only uses (a warm pool's) from entering on."""

import subprocess
import sys
import time

import pytest

from harness.bench.meter import ProcessMeter, kill_session, wait_unreaped

BURN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"


@pytest.mark.slow
def test_the_process_meter_counts_its_own_process_tree_even_children_that_exited(tmp_path):
    done = tmp_path / "orphan-done"
    with ProcessMeter() as meter:
        started = time.time()
        subprocess.run([sys.executable, "-c", BURN.format(s=0.5)], check=True)  # exits before the meter
        burnt = time.time()
        # Not ours, though its command line says "ray::": a process the shell left behind, which init
        # (or another subreaper) adopts once the shell exits.
        subprocess.run(["sh", "-c", f"{sys.executable} -c '# ray::IDLE\n{BURN.format(s=0.5)}"
                        f"open(\"{done}\", \"w\").close()' &"], check=True)
        deadline = time.monotonic() + 30
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert done.exists()
    assert 0.4 <= meter.cpu_s < 0.9
    assert 0.4 <= meter.cpu_between(started, burnt) < 0.9
    assert meter.peak_rss > 0


@pytest.mark.slow
def test_the_meter_counts_a_commands_cpu_up_to_its_exit_not_to_its_last_sample():
    process = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.4)], start_new_session=True)
    with ProcessMeter(process.pid, interval_s=60) as meter:  # no sample while it runs
        assert wait_unreaped(process.pid, timeout_s=60)
        meter.sample()
        process.wait()
    assert meter.cpu_s >= 0.39


@pytest.mark.slow
def test_a_session_the_command_uses_counts_from_entering_the_command_from_its_start(tmp_path):
    ready = tmp_path / "pool-ready"
    pool = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.5) + f"open({str(ready)!r}, 'w').close()\n"
                             "time.sleep(60)"], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:  # the pool's 0.5 s spent before
            time.sleep(0.05)
        command = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.3)], start_new_session=True)
        with ProcessMeter(command.pid, also=(pool.pid,), interval_s=0.05) as meter:
            assert wait_unreaped(command.pid, timeout_s=60)
            meter.sample()
            command.wait()
    finally:
        kill_session(pool.pid)
        pool.wait()
    assert 0.29 <= meter.cpu_s < 0.45  # the command's 0.3 s, not the pool's 0.5 s before it


def test_a_limit_on_the_machines_memory_stops_a_session_only():
    with pytest.raises(ValueError, match="session"):
        ProcessMeter(used_limit=2**30)
