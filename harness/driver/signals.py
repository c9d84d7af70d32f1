"""SIGTERM and SIGHUP take the Ctrl-C path; a second signal ends the command at once.

Schedulers stop a job with SIGTERM (Slurm, Kubernetes, Ray's autoscaler; SIGKILL after a grace
period), a closed terminal sends SIGHUP. The first of either raises `Terminated`, a
KeyboardInterrupt, in the main thread, so everything Ctrl-C does happens: every job stops taking
tasks, flushes its writer, marks its manifest interrupted, and the command says so in one line with
the resume command, exiting 128 + the signal's number (143, 129). At that moment the writers are
also told to flush at once (`on_first_signal`), from a thread: a second signal, during the shutdown,
waits a few seconds for that flush, kills the processes of the Ray this command started, and exits
with the same code: no episode the writer had is lost.

What must not stop halfway (the teardown of Ray) holds a first signal until it is done (`held`).

Ray's driver installs a SIGTERM handler of its own in `ray.init` (and its core worker a C++ one that
prints `*** SIGTERM received` and aborts the process), so `install` runs again once Ray is up; and
`ray.shutdown` sets SIGTERM back to the kernel's default (killed, exit -15) while
`signal.getsignal` still names ours, so it runs again after that too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil

SIGNALS = (signal.SIGTERM, signal.SIGHUP)
SECOND_SIGNAL_FLUSH_S = 5.0
"""How long a second signal waits for the writers' flush the first one started."""


class Terminated(KeyboardInterrupt):
    """The command was told to stop by a signal (SIGTERM, SIGHUP), not by the user's Ctrl-C."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def stop_reason(interrupt: KeyboardInterrupt) -> tuple[str, int]:
    """How the stop is told (in the manifest and the last line) and the exit code. A signal that
    arrives while Ray waits comes out of Ray as a plain KeyboardInterrupt: the signal received says
    what it was."""
    if not isinstance(interrupt, Terminated) and _received:
        interrupt = Terminated(_received[0])
    if isinstance(interrupt, Terminated):
        return f"terminated by {interrupt.name}", interrupt.exit_code
    return "interrupted by the user (Ctrl-C)", 130


_received: list[int] = []
_holding: list[str] = []
"""What is under way that a first signal waits for (`held`)."""
_held: list[int] = []
_flushes: list[Callable[[], object]] = []
_flushing: list[threading.Thread] = []
_ray_processes: list[psutil.Process] = []


def install() -> None:
    """Handle SIGTERM and SIGHUP here (again: after `ray.init`, which replaces the handler)."""
    if threading.current_thread() is threading.main_thread():
        for number in SIGNALS:
            signal.signal(number, _on_signal)


def on_first_signal(flush: Callable[[], object]) -> Callable[[], None]:
    """Call `flush` (in a thread) when the first signal arrives; returns what forgets it again."""
    _flushes.append(flush)
    return lambda: _flushes.remove(flush) if flush in _flushes else None


def started_ray(processes: list[psutil.Process]) -> Callable[[], None]:
    """The processes of the Ray this command started (killed on a second signal); returns what
    forgets them again (once that Ray is shut down)."""
    _ray_processes.extend(processes)
    return _ray_processes.clear


@contextlib.contextmanager
def held(what: str) -> Iterator[None]:
    """Let `what` finish before a first signal stops the command (then raised as `Terminated` as it
    would have been); a second signal still stops it at once. For what must not stop halfway: the
    teardown of Ray, which a signal cut short in `ray.shutdown`, leaving the driver connected, its
    processes to Ray's exit handler and their last forwarded lines after the command's last line."""
    _holding.append(what)
    try:
        yield
    finally:
        _holding.remove(what)
    if _held and not _holding:
        raise Terminated(_held.pop())


def _on_signal(signum: int, frame: object) -> None:
    if _received:
        _stop_now(signum)
    _received.append(signum)
    flushes = list(_flushes)
    if flushes:
        thread = threading.Thread(target=lambda: [_quietly(flush) for flush in flushes], daemon=True,
                                  name="flush on signal")
        thread.start()
        _flushing.append(thread)
    if _holding:
        _held.append(signum)
        return
    raise Terminated(signum)


def _quietly(action: Callable[[], object]) -> None:
    with contextlib.suppress(Exception):
        action()


def _stop_now(signum: int) -> None:
    """The second signal: the writers' flush finished (a few seconds at most), Ray's processes
    killed, exit."""
    for thread in _flushing:
        thread.join(SECOND_SIGNAL_FLUSH_S)
    for process in _ray_processes:
        with contextlib.suppress(psutil.Error):
            for child in process.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    child.kill()
            process.kill()
    print(f"\nstopped at once by a second {signal.Signals(signum).name}", flush=True)
    os._exit(128 + signum)


def ray_processes(node: Any = None) -> list[psutil.Process]:
    """The processes of the Ray this process started (`ray.init(address="local")`; or of `node`, a
    Ray node object) and all their descendants (workers, agents, tools they run): nothing else of this
    process's children. One that has exited is passed over: its number may be another's by now."""
    from harness.driver import ray_insides  # Ray, imported only once a command starts one

    found: dict[int, psutil.Process] = {}
    for started in ray_insides.node_processes(node):
        with contextlib.suppress(psutil.Error, AttributeError):
            if started.poll() is not None:
                continue
            process = psutil.Process(started.pid)
            for each in (process, *process.children(recursive=True)):
                found[each.pid] = each
    return list(found.values())


def end_leftovers(processes: list[psutil.Process], reap_s: float = 5.0) -> None:
    """End the processes of a Ray this command started, once its driver has disconnected: killed all at
    once (they hold nothing the run needs), then waited on for up to `reap_s` until each is gone or a
    zombie (dead: one whose parent died too waits for whichever process adopts it to reap it)."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
    deadline = time.monotonic() + reap_s
    alive = processes
    while alive and time.monotonic() < deadline:
        _, alive = psutil.wait_procs(alive, timeout=0.01)
        alive = [p for p in alive if _running(p)]


def _running(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return process.status() != psutil.STATUS_ZOMBIE
    return False
