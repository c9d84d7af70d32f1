"""How the command-line entry points end on an error they expect: `error: <one line>` on stderr
and an exit code that says whose move it is. `python -m harness`, its sweep launcher and
`python -m harness.evaluate` all map errors here.

- 2: what was asked cannot run (a config value, a model server that does not start): fix the input;
- 1: the run stopped on its way (a part it depends on died): the rows so far are kept, resume.
Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

from harness.config import ConfigError
from harness.errors import Exit, RunAborted, exit_with
from harness.models.model_server import ModelServerError

EXIT_CODES: dict[type[Exception], int] = {ConfigError: 2, ModelServerError: 2, RunAborted: 1}
EXPECTED_ERRORS: tuple[type[Exception], ...] = tuple(EXIT_CODES)
"""Catch these (`except EXPECTED_ERRORS as error: raise exit_for(error)`); let the rest through."""


def exit_code(error: BaseException) -> int:
    """The exit code for `error`; 1, as Python's own for an uncaught exception, if it is unexpected."""
    return next((code for kind, code in EXIT_CODES.items() if isinstance(error, kind)), 1)


def exit_for(error: BaseException) -> Exit:
    """Say `error: <error>` on stderr; the exit to raise."""
    return exit_with(exit_code(error), f"error: {error}")
