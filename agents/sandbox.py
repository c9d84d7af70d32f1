"""Run model-written Python in a separate, locked-down process.

Layers, each of which stops a different escape:
- a fresh temporary working directory, removed afterwards, is the only place it may write;
- rlimits: CPU seconds (an infinite loop), address space (a memory bomb), file size (the output
  cap: stdout goes to a file in the working directory, so it cannot exceed the cap), no core dumps;
- a wall-clock timeout (a sleep or a blocked read), after which the process group is killed;
- no network: a new, empty network namespace where the kernel allows it (root on Linux), and in
  any case a Python audit hook, installed before the code runs and impossible to remove from it,
  that refuses sockets, subprocesses, exec/fork, ctypes, and writes or deletions outside the
  working directory;
- `python -I`: isolated mode, no user site-packages, no PYTHON* environment variables.
A violation ends the run with an error; it never raises into the caller.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

CLONE_NEWNET = 0x40000000

# Runs inside the sandbox: install the audit hook, then load the tool and call it.
_RUNNER = r'''
import json, os, sys
ROOT = os.path.realpath(os.getcwd())
BLOCKED = ("socket.", "subprocess.", "os.system", "os.exec", "os.spawn", "os.fork", "os.forkpty",
           "os.posix_spawn", "os.kill", "ctypes.", "pty.", "shutil.", "sys.addaudithook", "winreg.")
FILE_EVENTS = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link",
               "os.symlink", "os.truncate", "os.utime")

def inside(path):
    try:
        real = os.path.realpath(os.fsdecode(path))
    except Exception:
        return False
    return real == ROOT or real.startswith(ROOT + os.sep)

def hook(event, args):
    if event.startswith(BLOCKED) and event != "socket.gethostname":
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "open":
        path, mode, flags = args
        write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT
        writing = (mode and any(c in str(mode) for c in "wax+")) or (flags or 0) & write_flags
        if writing and isinstance(path, (str, bytes)) and not inside(path):
            raise PermissionError(f"sandbox: writing {os.fsdecode(path)} outside the working directory")
    if event in FILE_EVENTS and args and isinstance(args[0], (str, bytes)) and not inside(args[0]):
        raise PermissionError(f"sandbox: {event} outside the working directory")

code = open("tool.py").read()
argument = json.load(open("input.json"))
result_file = open("result.json", "w")
sys.addaudithook(hook)
namespace = {"__name__": "tool"}
exec(compile(code, "tool.py", "exec"), namespace)
value = namespace["tool"](argument)
json.dump({"value": str(value)}, result_file)
result_file.close()
'''


class SandboxResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    ok: bool
    value: str | None
    error: str | None
    stdout: str
    network_namespace: bool
    """True when the run had its own empty network namespace (else the audit hook alone blocked it)."""


class Sandbox:
    def __init__(self, cpu_s: int = 2, wall_s: float = 5.0, memory_mb: int = 256,
                 output_bytes: int = 64_000) -> None:
        self.cpu_s = cpu_s
        self.wall_s = wall_s
        self.memory_mb = memory_mb
        self.output_bytes = output_bytes

    def run(self, code: str, argument: str) -> SandboxResult:
        with tempfile.TemporaryDirectory(prefix="harness-sandbox-") as workdir:
            root = Path(workdir)
            (root / "tool.py").write_text(code)
            (root / "input.json").write_text(json.dumps(argument))
            (root / "runner.py").write_text(_RUNNER)
            netns = _network_namespace_available()
            stdout_path = root / "stdout.txt"
            with stdout_path.open("wb") as stdout:
                process = subprocess.Popen(
                    [sys.executable, "-I", "runner.py"], cwd=root, stdin=subprocess.DEVNULL,
                    stdout=stdout, stderr=subprocess.STDOUT, env={"PATH": "/usr/bin:/bin"},
                    preexec_fn=lambda: self._limit(netns), start_new_session=True)
                try:
                    process.wait(timeout=self.wall_s)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                    return self._result(root, f"wall-time limit of {self.wall_s:g} s exceeded", netns)
            return self._result(root, _exit_reason(process.returncode), netns)

    async def arun(self, code: str, argument: str) -> SandboxResult:
        return await asyncio.to_thread(self.run, code, argument)

    def _limit(self, netns: bool) -> None:
        if netns:
            ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET)
        memory = self.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_CPU, (self.cpu_s, self.cpu_s + 1))  # SIGXCPU, then SIGKILL
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.output_bytes, self.output_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    def _result(self, root: Path, failure: str | None, netns: bool) -> SandboxResult:
        raw = (root / "stdout.txt").read_bytes()
        stdout = raw[: self.output_bytes].decode(errors="replace")
        if failure is not None and len(raw) >= self.output_bytes:
            failure = f"output size limit of {self.output_bytes} bytes exceeded"  # writes fail with EFBIG
            stdout = stdout[-200:]
        result_file = root / "result.json"
        if failure is None and result_file.exists():
            try:
                value = json.loads(result_file.read_text())["value"]
                return SandboxResult(ok=True, value=value, error=None, stdout=stdout, network_namespace=netns)
            except (ValueError, KeyError):
                failure = "no readable result"
        if failure is None:
            failure = "no result"
        last_line = next((line for line in reversed(stdout.strip().splitlines()) if line.strip()), "")
        error = f"{failure}: {last_line[:200]}" if last_line else failure
        return SandboxResult(ok=False, value=None, error=error[:500], stdout=stdout, network_namespace=netns)


def _exit_reason(code: int) -> str | None:
    if code == 0:
        return None
    if code < 0:
        names = {signal.SIGXCPU: "CPU-time limit exceeded", signal.SIGXFSZ: "output size limit exceeded",
                 signal.SIGKILL: "killed", signal.SIGSEGV: "crashed"}
        return names.get(signal.Signals(-code), f"killed by signal {signal.Signals(-code).name}")
    return f"exited with code {code}"


_NETNS: bool | None = None


def _network_namespace_available() -> bool:
    """Whether this process may give a child its own network namespace (checked once)."""
    global _NETNS
    if _NETNS is None:
        probe = subprocess.run([sys.executable, "-c", "import ctypes, sys; "
                                "sys.exit(ctypes.CDLL(None, use_errno=True).unshare(0x40000000) != 0)"],
                               capture_output=True)
        _NETNS = probe.returncode == 0
    return _NETNS
