"""Starting the CLI as a process of its own, and finding the processes it started.

A test touches only what it started: the harness runs in a session of its own
(`start_new_session=True`), and Ray's processes stay in that session, so a process is ours when its
session id is the run's pid. Never kill by command-line pattern: that reaches other users' runs on a
shared machine.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
# One agent worker: each imports litellm (seconds of CPU), and these runs are small; the two-worker
# default is exercised by the in-process runs (tests/test_e2e.py, tests/driver/test_run.py).
QUIET = ["progress=false", "ray.include_dashboard=false", "ray.num_workers=1"]


def short_temp_dir() -> Path:
    """A `--temp-dir` for a `ray start` of a test's own, with a short path: Ray's socket paths under it
    (`<dir>/session_<date>_<time>_<usec>_<pid>/sockets/plasma_store.1`) must stay within AF_UNIX's 107
    bytes, which pytest-xdist's deeper temp paths (`/tmp/pytest-of-root/pytest-46/popen-gw1/ray0/`) can
    pass. Removed when the test process exits."""
    directory = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    atexit.register(shutil.rmtree, directory, True)
    return directory


def start_cli(*overrides: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "harness", *overrides], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def start_cli_logged(log: Path, *args: str, module: str = "harness") -> subprocess.Popen[str]:
    """`python -m <module> args` as start_cli starts it, its output into `log`: for a run left to
    itself while the test does something else (a pipe nobody reads would stop it once full).
    `finish_logged` waits for it."""
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)


def finish_logged(process: subprocess.Popen[str], log: Path, timeout: float = 300) -> str:
    """Wait for a run of `start_cli_logged` (kill what is left of it, however this ends): its output."""
    try:
        process.wait(timeout=timeout)
    finally:
        stop_session(process)
    return log.read_text()


class StartedCli:
    """A command started now and left to run, its output into files under `directory` (a pipe nobody
    reads would stop it once full), its run directory `directory/run`: for commands that need nothing
    of each other, started together so that each pays Python's, Ray's and the pool's start while the
    others do. `result()` waits for it and gives what run_cli would have."""

    def __init__(self, directory: Path, *overrides: str, env: dict[str, str] | None = None) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.out, self.err = directory / "stdout", directory / "stderr"
        sweep = "-m" in overrides
        self.run_dir = directory / ("sweep" if sweep else "run")
        """The run's directory (a sweep's, `directory/sweep`, when the overrides hold -m)."""
        where = f"hydra.{'sweep' if sweep else 'run'}.dir={self.run_dir}"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.process = subprocess.Popen([sys.executable, "-m", "harness", *overrides, where], cwd=ROOT,
                                            stdout=out, stderr=err, text=True, start_new_session=True,
                                            env=env)

    def wait_past_ray_start(self, timeout: float = 120) -> None:
        """Until its Ray has started (or it has ended): commands started together start their Rays one
        after another. Ray's raylet aborts when its agent takes more than 15 s to start, which four
        Rays starting at once beside the suite's other tests have made it take."""
        deadline = time.monotonic() + timeout
        while (self.process.poll() is None and "a local Ray" not in self.out.read_text()
               and time.monotonic() < deadline):
            time.sleep(0.2)

    def result(self, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        try:
            self.process.wait(timeout=timeout)
        finally:
            stop_session(self.process)
        return subprocess.CompletedProcess(self.process.args, self.process.returncode, self.out.read_text(),
                                           self.err.read_text())


def run_cli(*overrides: str, timeout: float = 300,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *overrides], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, start_new_session=True, env=env)


def session_processes(session: int, marker: str) -> list[psutil.Process]:
    """Live processes of the session whose command line (or Ray process title) contains `marker`."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE or os.getsid(process.pid) != session:
                continue
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
        if marker in " ".join(process.info["cmdline"] or []):
            found.append(process)
    return found


def wait_for(condition, timeout: float = 120, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def kill_9(processes: list[psutil.Process]) -> None:
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGKILL)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_until_session_gone(session: int, timeout: float = 60) -> None:
    """Ray's processes of a killed run linger a few seconds; a crashed machine would have none."""
    wait_for(lambda: not session_processes(session, ""), timeout, f"session {session} to end")


def stop_session(process: subprocess.Popen[str]) -> None:
    """Kill what a test started, if it is still there (a failed assertion must not leave a run)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    kill_9(session_processes(process.pid, ""))


def finished_so_far(run_dir: Path) -> int:
    """Episodes a running job has finished, read while it writes: read again when its writer's
    compaction removed a part between the listing and the read."""
    from harness.tables.orphans import finished_episodes

    for _ in range(10):
        try:
            return len(finished_episodes(run_dir))
        except FileNotFoundError:
            continue
    return 0
