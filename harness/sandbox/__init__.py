"""Run model-written Python (`def tool(question) -> str`) where it can reach nothing of ours.

Kernel isolation (Linux; `isolation="kernel"`), in the order the layers are built:
1. Stage 1, `python -I -S` with an environment of only PATH, in its own session, is SIGKILLed if
   the calling thread dies. It unshares mount, PID, network, IPC and UTS namespaces (plus a user
   namespace mapping only its own uid when it is not root) and forks PID 1 of the new PID
   namespace. When PID 1 ends, the kernel kills every process left in the namespace, setsid or not.
2. PID 1 builds a new root on a tiny tmpfs: read-only binds of the standard library (with empty
   read-only tmpfs over every directory of installed packages) and the system libraries, an
   empty read-only file as /dev/null (not the host's device), and a writable, size-limited
   /work. There is no /proc, /sys, /etc, /tmp, home, cache, output directory or socket in it. It
   chroots there and forks the tool process.
3. The tool process drops everything: a fresh uid per run when we are root (no capabilities in
   its user namespace otherwise), an empty capability bounding set, no_new_privs, on x86-64 a
   seccomp filter (no ptrace, namespaces, mounts, keyrings, bpf, io_uring, sockets, nor memory
   the address-space limit does not count: SysV shared memory, semaphores and message queues,
   POSIX message queues, memfd), and rlimits: CPU seconds, address space, file size (the output
   cap), open files, and processes (by default it cannot fork). It closes every inherited
   descriptor but the result channel, then installs the Python audit hook of the weak mode
   (defence in depth only: Python code can switch it off) and calls tool(argument).
4. Stage 1 enforces the wall clock (SIGKILL to PID 1 takes the namespace down), reads the result
   channel and stdout (out of /work, without following links), and reports one JSON line.
The value comes back through a channel the trusted side owns, never a file the code can write: a
pipe (kernel) or a file with no name (weak) that the trusted runner writes once tool(argument) has
returned, as `{"nonce": ..., "value": ...}` with a nonce drawn for the run; anything else there
(no nonce, a wrong one, over the output limit) is no result. So code that writes a result file
and exits, or writes to a descriptor it guesses, gets no value. The nonce is in no file, no
argument and no name the code is given; code that searches its own interpreter's frames for it
(the runner and the code share one interpreter) is beyond what this channel can stop.
`Sandbox.run` returns only after every process of the sandbox is gone, and it never raises: every way a
tool can end (any signal, a result that is huge, deeply nested, not UTF-8 or not JSON) is a result.
What the tool returns or prints is made safe (harness.text) before anyone reads it: lone
surrogates replaced, control characters shown escaped, so it can reach no terminal or table raw.

Guaranteed by the kernel: no network at all; of the host's files only the standard library (without
installed packages) and /usr/lib, /usr/lib64 are readable, and none is writable; no other process
is visible or reachable; CPU, memory, disk, descriptors and processes are bounded; nothing outlives
the run. Not guaranteed: safety from kernel bugs (the seccomp filter narrows that surface, on x86-64
only); timing side channels; the tool's answer, which is whatever the code returns.

Two sandboxes can be linked: `Sandbox.start(code, argument, link=(read_fd, write_fd))` gives the
tool two descriptors of ours as 4 and 5 (the ends of pipes to another sandbox) and returns at once.
apart.py runs the code scorer's program and its tests so, in two sandboxes that only plain values
cross between (crossing.py, shipped as text like inside.py), the verdict the tests sandbox's.

Weak isolation (`weak=True`, `isolation="weak"`) is the old plain subprocess with rlimits, a network
namespace when allowed and the audit hook. It stops honest mistakes, not an adversary: it must be
asked for (`variant.sandbox.weak=true`); without it, `Sandbox()` refuses to run where kernel
isolation is unavailable. A violation ends the run with an error; it never raises into the caller.

Its face (`__all__`): `Sandbox` and what it returns, `kernel_isolation_problem`, `WEAK_OPT_IN`, and
`apart`; `crossing` and `inside` are shipped as text into the sandboxes, never imported by others.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import glob
import json
import os
import secrets
import signal
import site
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from harness.errors import one_line
from harness.text import safe_text

__all__ = ["WEAK_OPT_IN", "Running", "Sandbox", "SandboxResult", "apart", "kernel_isolation_problem"]

WEAK_OPT_IN = "variant.sandbox.weak=true"
TOOL_UIDS = range(1 << 30, (1 << 30) + (1 << 24))
"""When we are root, each kernel-isolated run gets its own uid from here (so RLIMIT_NPROC counts
only that run's processes)."""
_ENV = {"PATH": "/usr/bin:/bin"}
_WORK_MB = 64


class SandboxResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    ok: bool
    value: str | None
    error: str | None
    stdout: str
    isolation: Literal["kernel", "weak"]
    """kernel: own namespaces, a root holding only the standard library, no privileges; weak: a plain
    subprocess with rlimits and an audit hook (only when asked for with `weak=True`)."""


class Sandbox:
    def __init__(self, cpu_s: int = 2, wall_s: float = 5.0, memory_mb: int = 256,
                 output_bytes: int = 64_000, weak: bool = False, max_processes: int = 1) -> None:
        if not weak and (problem := kernel_isolation_problem()) is not None:
            raise ValueError(f"kernel sandbox unavailable here ({problem}); to run tools in the weak "
                             f"subprocess sandbox instead, opt in with {WEAK_OPT_IN}")
        self.cpu_s = cpu_s
        self.wall_s = wall_s
        self.memory_mb = memory_mb
        self.output_bytes = output_bytes
        self.max_processes = max_processes
        """Processes the tool may have at once, itself included (kernel isolation only): 1, no fork."""
        self.isolation: Literal["kernel", "weak"] = "weak" if weak else "kernel"

    def run(self, code: str, argument: str) -> SandboxResult:
        return self.start(code, argument).result()

    def start(self, code: str, argument: str, link: tuple[int, int] | None = None) -> Running:
        """Start `tool(argument)` and return at once: `result()` waits for it, `stop()` ends it.
        `link`: two descriptors of ours (read, write) that the tool gets as 4 and 5, e.g. the ends of
        pipes to another sandbox (harness/sandbox/apart.py); the caller closes its own copies."""
        nonce = secrets.token_hex(16)
        config = {"code": code, "argument": argument, "cpu_s": self.cpu_s, "memory_mb": self.memory_mb,
                  "output_bytes": self.output_bytes, "max_processes": self.max_processes, "nonce": nonce,
                  "link": list(link or ())}
        launch = _WeakLaunch if self.isolation == "weak" else _KernelLaunch
        try:
            return Running(self, nonce, launch(config, self.wall_s))
        except Exception as error:  # a host failure (no process to start): the run fails, no more
            return Running(self, nonce, None, error)

    async def arun(self, code: str, argument: str) -> SandboxResult:
        return await asyncio.to_thread(self.run, code, argument)

    def _result(self, raw: bytes, result: bytes, failure: str | None, nonce: str) -> SandboxResult:
        stdout = safe_text(raw[: self.output_bytes].decode(errors="replace"))
        if failure is not None and len(raw) >= self.output_bytes:
            failure = f"output size limit of {self.output_bytes} bytes exceeded"  # writes fail with EFBIG
            stdout = stdout[-200:]
        if failure is None and result:
            value = _result_value(result, nonce) if len(result) <= self.output_bytes else None
            if value is not None:
                return SandboxResult(ok=True, value=safe_text(value), error=None, stdout=stdout,
                                     isolation=self.isolation)
            failure = "no readable result"
        if failure is None:
            failure = "ended without returning a result"
        last_line = next((line for line in reversed(stdout.strip().splitlines()) if line.strip()), "")
        error = f"{failure}: {last_line[:200]}" if last_line else failure
        return SandboxResult(ok=False, value=None, error=error[:500], stdout=stdout, isolation=self.isolation)


class Running:
    """A sandbox run started by `Sandbox.start`: `result()` waits for it (and never raises), `stop()`
    ends it at once, every process of it included."""

    def __init__(self, box: Sandbox, nonce: str, launch: _KernelLaunch | _WeakLaunch | None,
                 failed: Exception | None = None) -> None:
        self.box, self.nonce, self.launch, self.failed = box, nonce, launch, failed

    def result(self) -> SandboxResult:
        box = self.box
        try:
            if self.launch is None:
                raise self.failed or RuntimeError("not started")
            stdout, result, failure = self.launch.report()
            if failure == "timeout":
                failure = f"wall-time limit of {box.wall_s:g} s exceeded"
            return box._result(stdout, result, failure, self.nonce)
        except Exception as error:  # a bug of ours or a host failure: the tool's attempt fails, no more
            error_text = one_line(f"sandbox error: {type(error).__name__}: {error}")
            return SandboxResult(ok=False, value=None, error=error_text, stdout="", isolation=box.isolation)

    def stop(self) -> None:
        if self.launch is not None:
            self.launch.stop()


def _result_value(result: bytes, nonce: str) -> str | None:
    """The tool's value from what came through the result channel: `{"nonce": "<this run's>",
    "value": "<text>"}`, else None. Code that finds the channel can write anything there (bytes
    that are not UTF-8, nesting deep enough to exhaust the parser's recursion), so anything is
    read as a result or as none."""
    try:
        said = json.loads(result)
        value = said["value"] if said["nonce"] == nonce else None
    except (ValueError, KeyError, TypeError, IndexError, RecursionError):
        return None
    return value if isinstance(value, str) else None


@functools.cache
def kernel_isolation_problem() -> str | None:
    """Why kernel isolation does not work here, or None when it does (probed once per process)."""
    if sys.platform != "linux":
        return f"it needs Linux namespaces, this is {sys.platform}"
    probe = {"code": "def tool(q):\n    return q", "argument": "probe", "cpu_s": 5, "memory_mb": 256,
             "output_bytes": 10_000, "max_processes": 1, "nonce": secrets.token_hex(16), "link": []}
    try:
        stdout, result, failure = _KernelLaunch(probe, wall_s=20).report()
    except OSError as error:
        return str(error)
    if failure is None and _result_value(result, probe["nonce"]) == "probe":
        return None
    last = stdout.decode(errors="replace").strip().splitlines()[-1:]
    return (failure or "no result") + (f": {last[0][:200]}" if last else "")


Report = tuple[bytes, bytes, str | None]
"""What a launch hands back: stdout, what came through the result channel (up to the output limit
and one byte more), and why it failed (None: it did not)."""


def _user_namespace() -> bool:
    """Whether the sandbox needs a user namespace of its own (to get the rights root has anyway)."""
    return os.geteuid() != 0


class _KernelLaunch:
    """Stage 1 started (`python -I -S -c` inside.py), its config not yet sent: `report` sends it and
    waits (it keeps the wall clock itself)."""

    def __init__(self, config: dict[str, Any], wall_s: float) -> None:
        userns = _user_namespace()
        config = {**config, "host_pid": os.getpid(), "deadline": time.monotonic() + wall_s, "userns": userns,
                  "uid": os.geteuid() if userns else TOOL_UIDS[secrets.randbelow(len(TOOL_UIDS))],
                  "masks": _package_dirs(), "work_mb": _WORK_MB}
        self.wall_s, self.input = wall_s, json.dumps(config).encode()
        command = [sys.executable, "-I", "-S", "-c", _inside_source("_inside_stage1")]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, env=_ENV, start_new_session=True,
                                        pass_fds=config["link"])

    def report(self) -> Report:
        process = self.process
        try:  # stage 1 keeps the wall clock; this only guards against stage 1 itself hanging
            out, err = process.communicate(self.input, timeout=self.wall_s + 10)
        except subprocess.TimeoutExpired:
            self.stop()
            process.communicate()
            return b"", b"", "timeout"
        try:
            report = json.loads(out.splitlines()[-1])
        except (IndexError, ValueError):
            last = (err.decode(errors="replace").strip().splitlines()[-1:]
                    or [f"exit code {process.returncode}"])
            return b"", b"", f"sandbox failed to start: {last[0][:300]}"
        stdout = base64.b64decode(report.get("stdout", ""))
        result = base64.b64decode(report.get("result", ""))
        if "error" in report:
            return stdout, b"", f"sandbox setup failed: {report['error']}"
        if report.get("timeout"):
            return stdout, result, "timeout"
        return stdout, result, _exit_reason(os.waitstatus_to_exitcode(report["status"]))

    def stop(self) -> None:
        """SIGKILL to stage 1's process group; PID 1 dies with it (its parent-death signal), and with
        PID 1 the whole namespace."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


class _WeakLaunch:
    """The weak sandbox's one process started; `report` sends its config and waits."""

    def __init__(self, config: dict[str, Any], wall_s: float) -> None:
        # The result channel: a file with no name (unlinked at birth), outside the tool's directory.
        self.workdir = tempfile.TemporaryDirectory(prefix="harness-sandbox-")
        self.channel = tempfile.TemporaryFile(prefix="harness-sandbox-result-")  # noqa: SIM115 closed by report
        self.root, self.wall_s, self.limit = Path(self.workdir.name), wall_s, config["output_bytes"]
        config = {**config, "result_fd": self.channel.fileno()}
        self.input = json.dumps(config).encode()
        command = [sys.executable, "-I", "-S", "-c", _inside_source("_inside_weak")]
        with (self.root / "stdout.txt").open("wb") as stdout:
            self.process = subprocess.Popen(command, cwd=self.root, stdin=subprocess.PIPE, stdout=stdout,
                                            stderr=subprocess.STDOUT, env=_ENV, start_new_session=True,
                                            pass_fds=(self.channel.fileno(), *config["link"]))

    def report(self) -> Report:
        try:
            try:
                self.process.communicate(self.input, timeout=self.wall_s)
                failure = _exit_reason(self.process.returncode)
            except subprocess.TimeoutExpired:
                self.stop()
                self.process.wait()
                failure = "timeout"
            self.channel.seek(0)
            return (self.root / "stdout.txt").read_bytes(), self.channel.read(self.limit + 1), failure
        finally:
            self.channel.close()
            self.workdir.cleanup()

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


def _exit_reason(code: int) -> str | None:
    if code == 0:
        return None
    if code < 0:
        names = {signal.SIGXCPU: "CPU-time limit exceeded", signal.SIGXFSZ: "output size limit exceeded",
                 signal.SIGKILL: "killed", signal.SIGSEGV: "crashed"}
        try:
            number: signal.Signals | int = signal.Signals(-code)
        except ValueError:  # a real-time signal (SIGRTMIN + n) has no name of its own
            return f"killed by signal {-code}"
        return names.get(number, f"killed by signal {number.name}")  # type: ignore[union-attr]
    return f"exited with code {code}"


@functools.cache
def _package_dirs() -> list[str]:
    """Directories of installed packages, to be hidden where they lie inside the bound stdlib."""
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    dirs = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    dirs |= {sysconfig.get_paths(vars=base)[k] for k in ("purelib", "platlib")}
    dirs |= {*site.getsitepackages(), site.getusersitepackages()}
    dirs |= {p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages"))}
    dirs |= {*glob.glob("/usr/lib/python3*/dist-packages"), *glob.glob("/usr/lib/python3*/site-packages")}
    return sorted({os.path.realpath(d) for d in dirs if os.path.isdir(d)})


@functools.cache
def _inside_source(entry: str) -> str:
    """The program `python -I -S -c` runs: inside.py, then a call of `entry`."""
    return (Path(__file__).with_name("inside.py")).read_text() + f"\n{entry}()\n"
