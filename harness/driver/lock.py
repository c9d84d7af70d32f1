"""One live run per directory: an exclusive lock held for as long as the run (or sweep) lives.

`flock` on `<dir>/.lock`: the kernel releases it when the holding process dies, however it dies, so
a kill -9 leaves no stale lock for the resume to trip over. The file says who holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from harness.config import ConfigError

LOCK_FILE = ".lock"


class DirectoryInUse(ConfigError):
    """Another live run writes into this directory."""


@contextlib.contextmanager
def exclusive(directory: Path, what: str = "run") -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            raise DirectoryInUse(
                f"{directory} is in use by another live harness {what} ({holder}); wait for it to "
                f"finish or stop it, or choose another directory") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _holder(fd: int) -> str:
    """Who holds the lock, as its file says; a holder that has just taken it may not have written
    yet, so wait a moment for it."""
    deadline = time.monotonic() + 2.0
    while True:
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
        if text or time.monotonic() > deadline:
            return text or "holder unknown"
        time.sleep(0.05)
