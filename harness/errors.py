"""Errors as users see them: one line, no traceback, no terminal escape codes.

Ray wraps an exception raised in an actor in a `RayTaskError` whose text is the remote traceback,
coloured; a table cell or a terminal line needs the cause alone.
"""

from __future__ import annotations

import re
import sys

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
MAX_CHARS = 500


class RunAborted(RuntimeError):
    """A part the whole run depends on died; the message says which and how to resume."""


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
    """Say `message` on stderr and return the exit to raise."""
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
    """`Type: message` on one line: the root cause, escape codes stripped, a traceback reduced to its
    last line, whitespace collapsed, at most `limit` characters."""
    if isinstance(error, BaseException):
        cause = root_cause(error)
        text = f"{type(cause).__name__}: {clean(str(cause))}" if str(cause).strip() else type(cause).__name__
    else:
        text = clean(error)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clean(text: str) -> str:
    text = _ANSI.sub("", text)
    if "Traceback (most recent call last)" in text:
        lines = [line for line in text.splitlines() if line.strip()]
        text = lines[-1] if lines else text
    return " ".join(text.split())
