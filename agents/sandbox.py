"""Run model-written Python (`def tool(question) -> str`) where it can reach nothing of ours.

Kernel isolation (Linux; `isolation="kernel"`), in the order the layers are built:
1. Stage 1, `python -I -S` with an environment of only PATH, in its own session, is SIGKILLed if
   the calling thread dies. It unshares mount, PID, network, IPC and UTS namespaces (plus a user
   namespace mapping only its own uid when it is not root) and forks PID 1 of the new PID
   namespace. When PID 1 ends, the kernel kills every process left in the namespace, setsid or not.
2. PID 1 builds a new root on a tiny tmpfs: read-only binds of the standard library (with empty
   read-only tmpfs over every directory of installed packages), the system libraries and
   /dev/null, and a writable, size-limited /work. There is no /proc, /sys, /etc, /tmp, home,
   cache, output directory or socket in it. It chroots there and forks the tool process.
3. The tool process drops everything: a fresh uid per run when we are root (no capabilities in
   its user namespace otherwise), an empty capability bounding set, no_new_privs, on x86-64 a
   seccomp filter (no ptrace, namespaces, mounts, keyrings, bpf, io_uring or sockets), and
   rlimits: CPU seconds, address space, file size (the output cap), open files, and processes
   (by default it cannot fork). It closes every inherited descriptor, then installs the Python
   audit hook of the weak mode (defence in depth only: Python code can switch it off) and calls
   tool(argument).
4. Stage 1 enforces the wall clock (SIGKILL to PID 1 takes the namespace down), reads stdout and
   the result out of /work without following links, and reports one JSON line.
`run` returns only after every process of the sandbox is gone.

Guaranteed by the kernel: no network at all; of the host's files only the standard library (without
installed packages) and /usr/lib, /usr/lib64 are readable, and none is writable; no other process
is visible or reachable; CPU, memory, disk, descriptors and processes are bounded; nothing outlives
the run. Not guaranteed: safety from kernel bugs (the seccomp filter narrows that surface, on x86-64
only); timing side channels; the tool's answer, which is whatever the code returns.

Weak isolation (`weak=True`, `isolation="weak"`) is the old plain subprocess with rlimits, a network
namespace when allowed and the audit hook. It stops honest mistakes, not an adversary: it must be
asked for (`variant.sandbox.weak=true`); without it, `Sandbox()` refuses to run where kernel
isolation is unavailable. A violation ends the run with an error; it never raises into the caller.
"""

from __future__ import annotations

import asyncio
import base64
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
        config = {"code": code, "argument": argument, "cpu_s": self.cpu_s, "memory_mb": self.memory_mb,
                  "output_bytes": self.output_bytes, "max_processes": self.max_processes}
        launch = _run_weak if self.isolation == "weak" else _run_kernel
        stdout, result, failure = launch(config, self.wall_s)
        if failure == "timeout":
            failure = f"wall-time limit of {self.wall_s:g} s exceeded"
        return self._result(stdout, result, failure)

    async def arun(self, code: str, argument: str) -> SandboxResult:
        return await asyncio.to_thread(self.run, code, argument)

    def _result(self, raw: bytes, result: str | None, failure: str | None) -> SandboxResult:
        stdout = raw[: self.output_bytes].decode(errors="replace")
        if failure is not None and len(raw) >= self.output_bytes:
            failure = f"output size limit of {self.output_bytes} bytes exceeded"  # writes fail with EFBIG
            stdout = stdout[-200:]
        if failure is None and result is not None:
            try:
                value = json.loads(result)["value"]
                return SandboxResult(ok=True, value=value, error=None, stdout=stdout,
                                     isolation=self.isolation)
            except (ValueError, KeyError, TypeError):
                failure = "no readable result"
        if failure is None:
            failure = "no result"
        last_line = next((line for line in reversed(stdout.strip().splitlines()) if line.strip()), "")
        error = f"{failure}: {last_line[:200]}" if last_line else failure
        return SandboxResult(ok=False, value=None, error=error[:500], stdout=stdout, isolation=self.isolation)


@functools.cache
def kernel_isolation_problem() -> str | None:
    """Why kernel isolation does not work here, or None when it does (probed once per process)."""
    if sys.platform != "linux":
        return f"it needs Linux namespaces, this is {sys.platform}"
    probe = {"code": "def tool(q):\n    return q", "argument": "probe", "cpu_s": 5, "memory_mb": 256,
             "output_bytes": 10_000, "max_processes": 1}
    try:
        stdout, result, failure = _run_kernel(probe, wall_s=20)
    except OSError as error:
        return str(error)
    if failure is None and result == '{"value": "probe"}':
        return None
    last = stdout.decode(errors="replace").strip().splitlines()[-1:]
    return (failure or "no result") + (f": {last[0][:200]}" if last else "")


Report = tuple[bytes, str | None, str | None]
"""What a launch hands back: stdout, the result file's text, and why it failed (None: it did not)."""


def _user_namespace() -> bool:
    """Whether the sandbox needs a user namespace of its own (to get the rights root has anyway)."""
    return os.geteuid() != 0


def _run_kernel(config: dict[str, Any], wall_s: float) -> Report:
    userns = _user_namespace()
    config = {**config, "host_pid": os.getpid(), "deadline": time.monotonic() + wall_s, "userns": userns,
              "uid": os.geteuid() if userns else TOOL_UIDS[secrets.randbelow(len(TOOL_UIDS))],
              "masks": _package_dirs(), "work_mb": _WORK_MB}
    process = subprocess.Popen([sys.executable, "-I", "-S", "-c", _inside_source("_inside_stage1")],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=_ENV, start_new_session=True)
    try:  # stage 1 keeps the wall clock; this only guards against stage 1 itself hanging
        out, err = process.communicate(json.dumps(config).encode(), timeout=wall_s + 10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return b"", None, "timeout"
    try:
        report = json.loads(out.splitlines()[-1])
    except (IndexError, ValueError):
        last = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {process.returncode}"]
        return b"", None, f"sandbox failed to start: {last[0][:300]}"
    stdout = base64.b64decode(report.get("stdout", ""))
    if "error" in report:
        return stdout, None, f"sandbox setup failed: {report['error']}"
    if report.get("timeout"):
        return stdout, report.get("result"), "timeout"
    return stdout, report.get("result"), _exit_reason(os.waitstatus_to_exitcode(report["status"]))


def _run_weak(config: dict[str, Any], wall_s: float) -> Report:
    with tempfile.TemporaryDirectory(prefix="harness-sandbox-") as workdir:
        root = Path(workdir)
        with (root / "stdout.txt").open("wb") as stdout:
            process = subprocess.Popen([sys.executable, "-I", "-S", "-c", _inside_source("_inside_weak")],
                                       cwd=root, stdin=subprocess.PIPE, stdout=stdout,
                                       stderr=subprocess.STDOUT, env=_ENV, start_new_session=True)
            try:
                process.communicate(json.dumps(config).encode(), timeout=wall_s)
                failure = _exit_reason(process.returncode)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                failure = "timeout"
        result_file = root / "result.json"
        result = result_file.read_text(errors="replace") if result_file.is_file() else None
        return (root / "stdout.txt").read_bytes(), result, failure


def _exit_reason(code: int) -> str | None:
    if code == 0:
        return None
    if code < 0:
        names = {signal.SIGXCPU: "CPU-time limit exceeded", signal.SIGXFSZ: "output size limit exceeded",
                 signal.SIGKILL: "killed", signal.SIGSEGV: "crashed"}
        return names.get(signal.Signals(-code), f"killed by signal {signal.Signals(-code).name}")
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
    """The program `python -I -S -c` runs: the rest of this file, then a call of `entry`."""
    source = Path(__file__).read_text()
    return source[source.index(_INSIDE_MARKER):] + f"\n{entry}()\n"


_INSIDE_MARKER = "# ---- inside the sandbox " + "-" * 75
# ---- inside the sandbox ---------------------------------------------------------------------------
# Everything below runs in the sandbox, never in this process: `_inside_source` ships it to
# `python -I -S -c`. It may use only the standard library and its own definitions.


class _Linux:
    """The bits of the Linux ABI the sandbox uses."""

    CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x4000000, 0x8000000
    CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
    CLONE_NEW_ANY = 0x7E020080  # every CLONE_NEW* flag, cgroup and time included
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
    MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
    SYS_MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY_NOSUID_NODEV = 442, -100, 0x8000, 7
    PR_SET_PDEATHSIG, PR_SET_SECCOMP, PR_CAPBSET_DROP, PR_SET_SECUREBITS = 1, 22, 24, 28
    PR_SET_NO_NEW_PRIVS = 38
    SECBITS_LOCKED = 0xE3  # noroot, no ambient raise, keep-caps off: all locked
    CAP_VERSION_3 = 0x20080522
    # seccomp on x86-64: these fail with EPERM (clone3 with ENOSYS, so libc falls back to clone)
    AUDIT_ARCH_X86_64 = 0xC000003E
    DENIED_X86_64 = (
        41, 53,  # socket, socketpair
        101, 310, 311, 438,  # ptrace, process_vm_readv/writev, pidfd_getfd
        155, 161, 165, 166, 272, 308,  # pivot_root, chroot, mount, umount2, unshare, setns
        428, 429, 430, 431, 432, 433, 442,  # the new mount API
        248, 249, 250,  # add_key, request_key, keyctl
        321, 298, 323, 425, 426, 427,  # bpf, perf_event_open, userfaultfd, io_uring
        103, 135, 163, 167, 168, 169, 175, 176, 246, 303, 304, 313, 320,  # syslog .. kexec_file_load
    )
    SYS_CLONE, SYS_CLONE3 = 56, 435


def _inside_libc():
    """call(name, *args): a libc function that raises OSError on failure."""
    import ctypes
    import os

    libc = ctypes.CDLL(None, use_errno=True)

    def call(name, *args):
        if name == "prctl":  # some options insist that the unused arguments are 0
            args = (*args, 0, 0, 0, 0)[:5]
        args = [ctypes.c_ulong(a) if isinstance(a, int) else a for a in args]
        if getattr(libc, name)(*args) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"{name}: {os.strerror(errno)}")

    return call


def _inside_stage1():
    """Trusted bootstrap: namespaces, PID 1, the wall clock, the report."""
    import base64
    import json
    import os
    import select
    import signal
    import sys
    import time

    config = json.loads(sys.stdin.buffer.read())
    call = _inside_libc()
    call("prctl", _Linux.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != config["host_pid"]:
        os._exit(1)  # the caller died before the line above
    try:
        _inside_unshare(call, config)
    except OSError as error:
        print(json.dumps({"error": str(error)}), flush=True)
        return
    config["binds"] = [p for p in sys.path if os.path.isdir(p)]
    status_r, status_w = os.pipe()
    pid1 = os.fork()
    if pid1 == 0:
        os.close(status_r)
        _inside_pid1(config, call, status_w)
    os.close(status_w)
    messages, timed_out = b"", False
    while True:  # PID 1 closes the pipe when it is gone
        remaining = config["deadline"] - time.monotonic()
        if remaining <= 0 or not select.select([status_r], [], [], remaining)[0]:
            timed_out = True
            os.kill(pid1, signal.SIGKILL)
            break
        chunk = os.read(status_r, 4096)
        if not chunk:
            break
        messages += chunk
    os.waitpid(pid1, 0)  # returns once the kernel has killed and reaped the whole namespace
    try:
        report = {"timeout": True} if timed_out else json.loads(messages.splitlines()[-1])
    except (IndexError, ValueError):
        report = {"error": "PID 1 ended without a status"}
    limit = config["output_bytes"]
    report["stdout"] = base64.b64encode(_inside_read("/tmp/work", "stdout.txt", limit) or b"").decode()
    result = _inside_read("/tmp/work", "result.json", limit)
    report["result"] = result.decode(errors="replace") if result is not None else None
    print(json.dumps(report), flush=True)


def _inside_unshare(call, config):
    import os

    flags = (_Linux.CLONE_NEWNS | _Linux.CLONE_NEWPID | _Linux.CLONE_NEWNET | _Linux.CLONE_NEWIPC
             | _Linux.CLONE_NEWUTS)
    if config["userns"]:
        call("unshare", flags | _Linux.CLONE_NEWUSER)
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {os.geteuid()} 1"),
                           ("gid_map", f"0 {os.getegid()} 1")):
            with open(f"/proc/self/{name}", "w") as file:
                file.write(text)
    else:
        call("unshare", flags)


def _inside_read(directory, name, limit):
    """Up to `limit` bytes of a regular file the tool wrote, or None; links are not followed."""
    import os
    import stat

    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = b""
        while len(data) < limit and (chunk := os.read(fd, limit - len(data))):
            data += chunk
        return data
    finally:
        os.close(fd)


def _inside_pid1(config, call, status_fd):
    """PID 1 of the namespace: build the root, fork the tool, reap; its exit ends the namespace."""
    import json
    import os
    import signal

    try:
        call("prctl", _Linux.PR_SET_PDEATHSIG, signal.SIGKILL)
        os.write(status_fd, b"up\n")  # raises if stage 1 died before the line above
        _inside_build_root(config, call)
        tool = os.fork()
        if tool == 0:  # the tool closes status_fd with every other inherited descriptor
            _inside_finish(lambda: _inside_tool(config, call))
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == tool:
                break
        message = {"status": status}
    except BaseException as error:
        message = {"error": f"{type(error).__name__}: {error}"}
    try:
        os.write(status_fd, json.dumps(message).encode() + b"\n")
    finally:
        os._exit(0)


def _inside_build_root(config, call):
    """Mount the new root at /tmp (in this mount namespace only) and chroot into it."""
    import os

    k, new = _Linux, "/tmp"
    call("mount", None, b"/", None, k.MS_REC | k.MS_PRIVATE, None)
    call("mount", b"tmpfs", new.encode(), b"tmpfs", k.MS_NOSUID | k.MS_NODEV,
         b"size=1m,nr_inodes=1000,mode=0755")
    bound = []
    for path in ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/lib32", "/usr/lib32", *config["binds"]):
        real = os.path.realpath(path)
        if os.path.islink(path) and os.path.dirname(path) == "/":
            os.symlink(os.readlink(path), new + path)  # e.g. /lib -> usr/lib
        elif os.path.isdir(real) and not any(real == b or real.startswith(b + "/") for b in bound):
            os.makedirs(new + real, exist_ok=True)
            _inside_bind(call, real, new + real, k.MS_RDONLY | k.MS_NODEV)
            bound.append(real)
    for path in config["masks"]:  # installed packages: hidden under an empty read-only tmpfs
        if any(path.startswith(b + "/") for b in bound) and os.path.isdir(new + path):
            call("mount", b"tmpfs", (new + path).encode(), b"tmpfs",
                 k.MS_RDONLY | k.MS_NOSUID | k.MS_NODEV | k.MS_NOEXEC, b"size=4k,nr_inodes=1")
    os.makedirs(new + "/dev")
    open(new + "/dev/null", "w").close()
    _inside_bind(call, "/dev/null", new + "/dev/null", k.MS_NOEXEC)
    os.makedirs(new + "/work")
    uid = 0 if config["userns"] else config["uid"]
    options = f"size={config['work_mb']}m,nr_inodes=1000,mode=0700,uid={uid},gid={uid}"
    call("mount", b"tmpfs", (new + "/work").encode(), b"tmpfs", k.MS_NOSUID | k.MS_NODEV | k.MS_NOEXEC,
         options.encode())
    call("mount", None, new.encode(), None, k.MS_REMOUNT | k.MS_RDONLY | k.MS_NOSUID | k.MS_NODEV, None)
    call("sethostname", b"sandbox", 7)  # in its own UTS namespace
    os.chdir(new)
    os.chroot(".")
    os.chdir("/work")


def _inside_bind(call, source, target, flags):
    """A bind mount, then remounted nosuid plus `flags` (keeping noexec, which may be locked)."""
    import contextlib
    import ctypes
    import os

    k = _Linux
    try:
        call("mount", source.encode(), target.encode(), None, k.MS_BIND, None)
    except OSError:  # in a user namespace, a tree with locked submounts must be bound whole...
        call("mount", source.encode(), target.encode(), None, k.MS_BIND | k.MS_REC, None)
        if flags & k.MS_RDONLY:  # ... and made read-only whole, submounts included (Linux 5.12+)
            attr = (ctypes.c_uint64 * 4)(k.MOUNT_ATTR_RDONLY_NOSUID_NODEV, 0, 0, 0)
            with contextlib.suppress(OSError):
                call("syscall", k.SYS_MOUNT_SETATTR, k.AT_FDCWD, target.encode(), k.AT_RECURSIVE, attr, 32)
    keep = os.statvfs(source).f_flag & k.MS_NOEXEC
    call("mount", None, target.encode(), None, k.MS_REMOUNT | k.MS_BIND | k.MS_NOSUID | flags | keep, None)


def _inside_tool(config, call):
    """The tool process: descriptors, privileges, limits, seccomp, then the tool itself."""
    import os

    null = os.open("/dev/null", os.O_RDWR)
    out = os.open("stdout.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    try:
        call("close_range", 3, 0xFFFFFFFF, 0)
    except (AttributeError, OSError):  # libc or kernel too old
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    _inside_drop_privileges(config, call)
    # in a user namespace, stage 1 and PID 1 have the tool's uid too
    _inside_limits(config, processes=config["max_processes"] + (2 if config["userns"] else 0))
    _inside_seccomp(call)
    _inside_call_tool(config)


def _inside_drop_privileges(config, call):
    import ctypes
    import os

    k = _Linux
    for cap in range(64):
        try:
            call("prctl", k.PR_CAPBSET_DROP, cap)
        except OSError:
            break  # past the last capability this kernel has
    call("prctl", k.PR_SET_SECUREBITS, k.SECBITS_LOCKED)
    if not config["userns"]:  # root: become a uid nobody else has
        uid = config["uid"]
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    header, caps = (ctypes.c_uint32 * 2)(k.CAP_VERSION_3, 0), (ctypes.c_uint32 * 6)()
    call("capset", header, caps)
    call("prctl", k.PR_SET_NO_NEW_PRIVS, 1)
    call("capget", header, caps)
    if any(caps) or (not config["userns"] and 0 in os.getresuid()):
        raise PermissionError("sandbox: could not drop privileges")


def _inside_limits(config, processes=None):
    import resource

    memory, output = config["memory_mb"] * 1024 * 1024, config["output_bytes"]
    resource.setrlimit(resource.RLIMIT_CPU, (config["cpu_s"], config["cpu_s"] + 1))  # SIGXCPU, then SIGKILL
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (output, output))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if processes is not None:  # after setuid: the kernel counts the processes of the current uid
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))


def _inside_seccomp(call):
    """Deny syscalls that only widen the kernel surface (x86-64 only; elsewhere the other layers hold)."""
    import ctypes
    import os

    k = _Linux
    if os.uname().machine != "x86_64":
        return
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, deny, nosys, kill = 0x7FFF0000, 0x00050001, 0x00050026, 0x80000000
    program = [(ld, 0, 0, 4), (jeq, 1, 0, k.AUDIT_ARCH_X86_64), (ret, 0, 0, kill), (ld, 0, 0, 0)]
    checks = [(jge, 0x40000000), *((jeq, nr) for nr in k.DENIED_X86_64)]  # x32 syscalls, then the list
    for i, (op, value) in enumerate(checks):
        program.append((op, len(checks) - i - 1 + 6, 0, value))  # to `deny`, past the clone checks
    program += [(jeq, 0, 2, k.SYS_CLONE), (ld, 0, 0, 16), (jset, 3, 2, k.CLONE_NEW_ANY),
                (jeq, 0, 1, k.SYS_CLONE3), (ret, 0, 0, nosys), (ret, 0, 0, allow), (ret, 0, 0, deny)]

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(program))(*program)
    call("prctl", k.PR_SET_SECCOMP, 2, ctypes.pointer(Program(len(program), filters)))


def _inside_weak():
    """Weak isolation: this process is the tool process; rlimits, a network namespace if allowed."""
    import contextlib
    import json
    import os
    import sys

    config = json.loads(sys.stdin.buffer.read())
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    _inside_limits(config)
    with contextlib.suppress(OSError):  # not root: the audit hook alone refuses sockets
        _inside_libc()("unshare", _Linux.CLONE_NEWNET)
    _inside_finish(lambda: _inside_call_tool(config))


def _inside_finish(run):
    """Run, print a traceback on error, exit; never returns (a forked child must not fall back
    into its parent's code), even when printing fails because the output cap is reached."""
    import os
    import sys
    import traceback

    status = 1
    try:
        try:
            run()
            status = 0
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else 1
        except BaseException:
            traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status & 0xFF)


def _inside_call_tool(config):
    """The audit hook (a tripwire, not a wall), then tool(argument) -> result.json."""
    import json
    import os
    import sys

    root = os.path.realpath(os.getcwd())
    blocked = ("socket.", "subprocess.", "os.system", "os.exec", "os.spawn", "os.fork", "os.forkpty",
               "os.posix_spawn", "os.kill", "ctypes.", "pty.", "shutil.", "sys.addaudithook", "winreg.")
    file_events = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link",
                   "os.symlink", "os.truncate", "os.utime")

    def inside(path):
        try:
            real = os.path.realpath(os.fsdecode(path))
        except Exception:
            return False
        return real == root or real.startswith(root + os.sep)

    def hook(event, args):
        if event.startswith(blocked) and event != "socket.gethostname":
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = args
            write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT
            writing = (mode and any(c in str(mode) for c in "wax+")) or (flags or 0) & write_flags
            if writing and isinstance(path, (str, bytes)) and not inside(path):
                raise PermissionError(f"sandbox: writing {os.fsdecode(path)} outside the working directory")
        if event in file_events and args and isinstance(args[0], (str, bytes)) and not inside(args[0]):
            raise PermissionError(f"sandbox: {event} outside the working directory")

    code = config.pop("code")
    argument = config.pop("argument")
    with open("tool.py", "w") as source:  # for tracebacks
        source.write(code)
    result_file = open("result.json", "w")  # noqa: SIM115  (closed below, after the tool ran)
    sys.addaudithook(hook)
    namespace = {"__name__": "tool"}
    exec(compile(code, "tool.py", "exec"), namespace)
    value = namespace["tool"](argument)
    json.dump({"value": str(value)}, result_file)
    result_file.close()
