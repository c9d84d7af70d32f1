"""The bench's one process meter: the CPU and memory a set of processes spends, sampled live.

Ray reaps its workers without adding their time to its own children's, so the time must be read from
each process while it lives; a process is known by its pid and start time (a pid can be reused). Two
sets, the two ways a measurement runs what it measures:

- `ProcessMeter()`: this process and its descendants (a local Ray's gcs_server, raylet, dashboard and
  every worker the raylet starts), plus the Ray session's own processes and theirs when Ray runs
  elsewhere on the machine: the harness run in this process (section 1). Not by a pattern such as
  "ray" in the command line: on a shared machine that takes in other runs' Ray processes (and any
  command line that merely names ray).
- `ProcessMeter(session=pid)`: every process of a command started with `start_new_session=True`, and
  everything it starts (a local Ray's processes stay in its session, even when reparented), plus the
  processes of the sessions `also` (a warm pool's, which the command uses): the sweep and versus
  commands, one whole command line each.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

import numpy as np
import psutil

Key = tuple[int, float]
"""A process: its pid and start time."""


class ProcessMeter:
    """Samples the processes of its set every `interval_s`, and once more on leaving.

    `cpu_s`: CPU seconds (user + system) the processes spent, each counted up to its last sample (a
    process that exits loses at most its last interval; `wait_unreaped` and a `sample()` before
    reaping a command keep even that): from entering the meter for a process already running then,
    except the command `session`, counted from its start; processes that started and exited in
    between count too. This process's own sampler thread is left out where this process is measured.
    `cpu_between(start, end)`: the same between two moments (Unix seconds) of the sampled span.
    `peak_rss`: the largest summed RSS seen. `peak_used` and `used_at_start`: the machine's used
    memory; `loads`: its 1-minute load average at each sample (others' work shows here). With
    `used_limit` (bytes, a `session` only): once the machine's used memory passes it, `over_limit` is
    set and the session killed.
    """

    def __init__(self, session: int | None = None, also: tuple[int, ...] = (), interval_s: float = 0.1,
                 used_limit: int | None = None) -> None:
        if used_limit is not None and session is None:
            raise ValueError("used_limit stops a session: give the session")
        self.session, self.interval_s, self.used_limit = session, interval_s, used_limit
        self.sessions = {session, *also} if session is not None else set()
        self.peak_rss = 0
        self.used_at_start = self.peak_used = 0
        self.loads: list[float] = []
        self.over_limit = False
        self._me = psutil.Process()
        self._roots: set[int] = set()
        self._first: dict[Key, float] = {}
        """CPU seconds at entering of the processes counted from then."""
        self._last: dict[Key, float] = {}
        """CPU seconds of every process at its latest sample."""
        self._own_cpu_s = 0.0
        self._timeline: list[tuple[float, float]] = []
        """(Unix seconds, `cpu_s` then) at each sample."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def cpu_s(self) -> float:
        spent = sum(last - self._first.get(key, 0.0) for key, last in self._last.items())
        return spent - (self._own_cpu_s if self.session is None else 0.0)

    def processes(self) -> list[psutil.Process]:
        return self._members() if self.session is not None else self._tree()

    def _tree(self) -> list[psutil.Process]:
        children: dict[int, list[psutil.Process]] = {}
        for process in psutil.process_iter(["ppid"]):
            children.setdefault(process.info["ppid"], []).append(process)
        found = {self._me.pid: self._me}
        stack = [self._me.pid, *self._roots]
        while stack:
            pid = stack.pop()
            for child in children.get(pid, []):
                if child.pid not in found:
                    found[child.pid] = child
                    stack.append(child.pid)
        for pid in self._roots - found.keys():
            with contextlib.suppress(psutil.Error):
                found[pid] = psutil.Process(pid)
        return list(found.values())

    def _members(self) -> list[psutil.Process]:
        found = []
        for process in psutil.process_iter():
            with contextlib.suppress(OSError, psutil.Error):
                if os.getsid(process.pid) in self.sessions:
                    found.append(process)
        return found

    def _read(self) -> dict[Key, float]:
        """CPU seconds so far of each process of the set; updates the RSS peak."""
        cpu, rss = {}, 0
        for process in self.processes():
            try:
                with process.oneshot():
                    times = process.cpu_times()  # readable from a zombie too, its memory not
                    cpu[(process.pid, process.create_time())] = times.user + times.system
                    rss += process.memory_info().rss
            except psutil.Error:  # exited meanwhile, or a zombie's memory
                continue
        self.peak_rss = max(self.peak_rss, rss)
        return cpu

    def sample(self) -> None:
        self._last.update(self._read())
        used = psutil.virtual_memory().used
        self.peak_used = max(self.peak_used, used)
        self.loads.append(os.getloadavg()[0])
        self._timeline.append((time.time(), self.cpu_s))
        if self.used_limit is not None and used > self.used_limit and not self.over_limit:
            self.over_limit = True
            assert self.session is not None
            kill_session(self.session)

    def _run(self) -> None:
        started = time.thread_time()
        while not self._stop.wait(self.interval_s):
            self._own_cpu_s = time.thread_time() - started
            self.sample()
        self._own_cpu_s = time.thread_time() - started

    def cpu_between(self, start: float, end: float) -> float:
        moments, spent = zip(*self._timeline, strict=True)
        return float(np.interp(end, moments, spent) - np.interp(start, moments, spent))

    def __enter__(self) -> ProcessMeter:
        if self.session is None:
            self._roots = _ray_session_roots()
        self.used_at_start = self.peak_used = psutil.virtual_memory().used
        self._last = self._read()
        self._first = {key: cpu for key, cpu in self._last.items() if key[0] != self.session}
        self._timeline = [(time.time(), self.cpu_s)]
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def _ray_session_roots() -> set[int]:
    """Pids of this process's Ray session's own processes (gcs_server, raylet, dashboard, log monitor),
    found by the session directory their command lines name: needed when Ray was attached to a cluster
    started elsewhere on this machine, whose processes are not this process's descendants."""
    ray = sys.modules.get("ray")  # a process that has not imported Ray has no Ray session
    try:
        if ray is None or not ray.is_initialized():
            return set()
        context = ray.get_runtime_context()
        session = os.path.join(context.get_temp_dir(), context.get_session_name())
    except Exception:  # no session to read here: the descendants are all there is
        return set()
    return {process.pid for process in psutil.process_iter(["cmdline"])
            if session in " ".join(process.info["cmdline"] or [])}


def wait_unreaped(pid: int, timeout_s: float) -> bool:
    """Wait until child `pid` has exited, leaving it unreaped (a zombie) so that its CPU times can still be
    read: a meter that samples every interval would otherwise lose the process's last one. False when it
    is still running after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
            return True
        time.sleep(0.02)
    return False


def kill_session(session: int) -> None:
    """SIGKILL every process of a session this bench started (never by name)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(session, signal.SIGKILL)
    for process in psutil.process_iter():
        with contextlib.suppress(OSError, psutil.Error):
            if os.getsid(process.pid) == session:
                process.kill()

