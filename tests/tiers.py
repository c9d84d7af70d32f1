"""The suite's tiers, kept by a rule rather than by memory.

- unmarked: runs in the test's own process, plus at most Python snippets (`python -c`: the sandbox's
  interpreter, the math-verify helper) and a few system tools (`tiers.CHEAP_TOOLS`);
- `slow`: starts anything else: a harness command, Ray, a model or agent server, an outside agent;
- `e2e`: loads the real local model or the MiniLM embedder, in any process it starts (and so is slow).

`python -m pytest -m "not slow"` is the inner loop. tests/conftest.py records every process a test
starts (`subprocess.Popen`, which Ray, asyncio and the harness all go through) and every real-model
import noted by tests/tier_probe/sitecustomize.py in the processes below it, and fails a test whose
marks do not cover what it did, naming the mark it needs. A fixture that starts processes says so
(`@starts_processes`): every test that uses it is slow, whichever test happened to set it up, and a
fixture that starts them without saying so fails the test that set it up.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.tier_probe.sitecustomize import note_real_models

F = TypeVar("F")

PROBE_DIR = Path(__file__).resolve().parent / "tier_probe"
E2E_LOG_VARIABLE = "HARNESS_TEST_E2E_LOG"


CHEAP_TOOLS = ("git", "uname", "mount", "umount")
"""System tools that answer in milliseconds: the manifest's commit, `platform.processor()` (which the
openai SDK calls), a test's small tmpfs. And `java -version`, env=scienceworld's check of its Java."""


def _argv(argv: Sequence[str] | str) -> list[str]:
    """A Popen's `args` as a list (a string is a shell command line, or a program alone)."""
    return [str(argv)] if isinstance(argv, (str, bytes)) else [os.fspath(a) for a in argv]


def is_cheap_child(argv: Sequence[str] | str) -> bool:
    """A process an unmarked test may start: a Python snippet (`python -c`: the sandbox's isolated
    interpreter, the math scorer's helper, a process holding something for a test) or a CHEAP_TOOLS
    tool. A module or script (`python -m harness`, an outside agent), Ray, a server, a JVM or a browser
    is not."""
    args = _argv(argv)
    if not args:
        return True
    if args[0] == sys.executable:
        options = args[1:args.index("-c") + 1] if "-c" in args else args[1:]
        return bool(options) and options[-1] == "-c" and all(o.startswith("-") for o in options)
    return Path(args[0]).name in CHEAP_TOOLS or (Path(args[0]).name == "java" and args[1:] == ["-version"])


def starts_processes(fixture: F) -> F:
    """Declares that a fixture starts processes (a command, Ray, a server): its tests are slow. Put it
    under `@pytest.fixture`."""
    fixture.starts_processes = True  # type: ignore[attr-defined]
    return fixture


PROCESS_ENVS = ("scienceworld", "textworld")
"""Environments that start processes: ScienceWorld's JVM, and TextWorld's game compiler (Inform 7's
`ni`, for every game its cache does not hold yet: a cold cache, a fresh machine)."""


def env_params(envs: Iterable[str]) -> list[Any]:
    """`envs` for `pytest.mark.parametrize`, those of PROCESS_ENVS marked slow."""
    return [pytest.param(env, marks=pytest.mark.slow) if env in PROCESS_ENVS else env for env in envs]


def declares_processes(function: Any) -> bool:
    return bool(getattr(function, "starts_processes", False))


def shown(argv: Sequence[str] | str) -> str:
    args = _argv(argv)
    text = " ".join(Path(a).name if i == 0 else a for i, a in enumerate(args))
    return text if len(text) <= 120 else text[:117] + "..."


def missing_marks(marks: set[str], started: list[Sequence[str] | str], real_models: list[str]) -> str | None:
    """What a test did that its marks do not say, or None."""
    if real_models and "e2e" not in marks:
        return (f"it loads the real models ({', '.join(sorted(set(real_models)))}) without the e2e mark: "
                f"mark it `@pytest.mark.e2e`")
    expensive = [argv for argv in started if not is_cheap_child(argv)]
    if expensive and not marks & {"slow", "e2e"}:
        return (f"it starts `{shown(expensive[0])}`"
                f"{f' and {len(expensive) - 1} more processes' if len(expensive) > 1 else ''} "
                f"without the slow mark: mark it `@pytest.mark.slow` (or the module: "
                f"`pytestmark = pytest.mark.slow`)")
    return None


class Watch:
    """What the running test started (every `subprocess.Popen`: Ray, asyncio's subprocesses and the
    harness all go through it) and the real models loaded in any Python process below this one (each
    loads tests/tier_probe/sitecustomize.py from PYTHONPATH and notes them in this process's log; one
    log per pytest-xdist worker)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self._started: list[Any] = []
        self._log_seen = 0
        self.undeclared: list[str] = []
        """Fixtures set up for the running test that started processes without `@starts_processes`."""

    @classmethod
    def install(cls) -> Watch:
        log = Path(tempfile.gettempdir()) / f"harness-tests-e2e-{os.getpid()}.log"
        log.touch()
        atexit.register(log.unlink, missing_ok=True)
        os.environ[E2E_LOG_VARIABLE] = str(log)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in [str(PROBE_DIR), os.environ.get("PYTHONPATH")] if p)
        note_real_models(str(log))
        watch = cls(log)
        popen_init = subprocess.Popen.__init__

        def recorded(popen: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
            watch._started.append(args)
            popen_init(popen, args, *rest, **kwargs)

        subprocess.Popen.__init__ = recorded  # type: ignore[method-assign]
        return watch

    def restart(self) -> None:
        self._started.clear()
        self.undeclared.clear()
        self._log_seen = self.log.stat().st_size

    def launched_since(self, count: int) -> list[Any]:
        """The expensive processes started after the first `count` of the running test's."""
        return [argv for argv in self._started[count:] if not is_cheap_child(argv)]

    def count(self) -> int:
        return len(self._started)

    def started(self) -> list[Any]:
        return list(self._started)

    def real_models(self) -> list[str]:
        with self.log.open() as log:
            log.seek(self._log_seen)
            return [line.split()[0] for line in log if line.strip()]
