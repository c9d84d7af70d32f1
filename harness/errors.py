"""Errors as users see them: one line, no traceback, no terminal escape codes.

Ray wraps an exception raised in an actor in a `RayTaskError` whose text is the remote traceback,
coloured; a table cell or a terminal line needs the cause alone.
"""

from __future__ import annotations

import errno
import re
import sys
from pathlib import Path

from harness.text import safe_text

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
MAX_CHARS = 500


class RunAborted(RuntimeError):
    """A part the whole run depends on died; the message says which and how to resume."""


class DiskFull(RunAborted):
    """A write failed for want of space (tables, memory, snapshots, the manifest): nothing more can
    be recorded, so the run stops; what was written is kept, and a resume carries on once space is
    freed. Made by `disk_full`, with the directory in its one-line message."""

    def with_hint(self, resume_hint: str) -> DiskFull:
        return DiskFull(f"{self}; {resume_hint}")


_NO_SPACE = re.compile(r"no space left on device|errno 28|disk quota exceeded", re.IGNORECASE)


def is_disk_full(error: BaseException) -> bool:
    """Whether `error`, or anything it wraps or was raised from, says the disk is full. pyarrow and
    LanceDB report it in their own exception types, with errno 28 in the text."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, DiskFull):
            return True
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if _NO_SPACE.search(str(current)):
            return True
        wrapped = getattr(current, "cause", None)  # Ray's wrappers
        pending += [current.__cause__, current.__context__,
                    wrapped if isinstance(wrapped, BaseException) else None]
    return False


def disk_full(where: Path | str, error: BaseException) -> DiskFull:
    """The DiskFull to raise for `error`, naming the directory that could not be written."""
    if isinstance(error, DiskFull):
        return error
    return DiskFull(f"the disk is full: no space left to write under {where} ({one_line(error, 200)})")


class Exit(SystemExit):
    """Exit with `code` after saying `message` on stderr. The message stays the exception's text, so
    a sweep's launcher can repeat a job's reason (a job's own stderr reaches the driver only through
    Ray's log forwarding, which may drop its last lines)."""

    code: int

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code)
        self.message = message

    def __str__(self) -> str:
        return self.message


def exit_with(code: int, message: str) -> Exit:
    """Say `message` on stderr, after whatever standard output still holds, and return the exit to
    raise. The message is the command's last line: Ray prints what it forwards from its processes
    (the raylet's word of a killed worker) on standard output, which a pipe buffers to the exit."""
    sys.stdout.flush()
    print(message, file=sys.stderr, flush=True)
    return Exit(code, message)


def root_cause(error: BaseException) -> BaseException:
    """The exception behind Ray's wrappers (`RayTaskError.cause`), else the error itself."""
    seen: set[int] = set()
    while id(error) not in seen:
        seen.add(id(error))
        cause = getattr(error, "cause", None)
        if not isinstance(cause, BaseException):
            break
        error = cause
    return error


def one_line(error: BaseException | str, limit: int = MAX_CHARS) -> str:
    """`Type: message` on one line: the root cause, colour codes stripped and other control characters
    shown escaped (harness.text), a traceback reduced to its last line, whitespace collapsed, at most
    `limit` characters."""
    if isinstance(error, BaseException):
        cause = root_cause(error)
        text = f"{type(cause).__name__}: {clean(str(cause))}" if str(cause).strip() else type(cause).__name__
    else:
        text = clean(error)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clean(text: str) -> str:
    text = safe_text(_ANSI.sub("", text))
    if "Traceback (most recent call last)" in text:
        lines = [line for line in text.splitlines() if line.strip()]
        text = lines[-1] if lines else text
    return " ".join(text.split())
