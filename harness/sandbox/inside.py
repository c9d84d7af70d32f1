"""What runs inside the sandbox, never in the harness's own processes.

`harness.sandbox` ships this file's text to `python -I -S -c` followed by a call of one entry point
(`_inside_stage1` for kernel isolation, `_inside_weak` for the weak mode): it may use only the
standard library and its own definitions, and is never imported by the harness.
"""


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
        # memory outside the address-space limit: SysV shared memory, semaphores and message queues,
        # POSIX message queues, memfd
        29, 30, 31, 67, 64, 65, 66, 220, 68, 69, 70, 71, 240, 241, 242, 243, 244, 245, 319,
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
    import signal
    import sys

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
    result_r, result_w = os.pipe()  # the result channel: no path reaches it, inside or out
    config["result_fd"] = result_w
    pid1 = os.fork()
    if pid1 == 0:
        os.close(status_r)
        os.close(result_r)
        _inside_pid1(config, call, status_w)
    os.close(status_w)
    os.close(result_w)
    for fd in config["link"]:  # the tool's alone: its peer sees an end of file when the tool ends
        os.close(fd)
    limit = config["output_bytes"]
    messages, result, timed_out = _inside_watch(pid1, status_r, result_r, config["deadline"], limit)
    os.waitpid(pid1, 0)  # returns once the kernel has killed and reaped the whole namespace
    while chunk := os.read(result_r, 65536):  # every writer is gone: this ends
        result = _inside_keep(result, chunk, limit)
    try:
        report = {"timeout": True} if timed_out else json.loads(messages.splitlines()[-1])
    except (IndexError, ValueError):
        report = {"error": "PID 1 ended without a status"}
    report["stdout"] = base64.b64encode(_inside_read("/tmp/work", "stdout.txt", limit) or b"").decode()
    report["result"] = base64.b64encode(result).decode()
    print(json.dumps(report), flush=True)


def _inside_watch(pid1, status_r, result_r, deadline, limit):
    """PID 1's status lines and the result channel, read until PID 1 is gone (it closes the status
    pipe) or the wall clock runs out (then PID 1 is killed): (messages, result, timed out)."""
    import os
    import select
    import signal
    import time

    messages, result, watched = b"", b"", [status_r, result_r]
    while True:
        remaining = deadline - time.monotonic()
        ready = select.select(watched, [], [], remaining)[0] if remaining > 0 else []
        if not ready:
            os.kill(pid1, signal.SIGKILL)
            return messages, result, True
        if result_r in ready:
            chunk = os.read(result_r, 65536)
            if not chunk:  # every writer closed it: watch the status alone
                watched.remove(result_r)
            result = _inside_keep(result, chunk, limit)
        if status_r in ready:
            chunk = os.read(status_r, 4096)
            if not chunk:
                return messages, result, False
            messages += chunk


def _inside_keep(kept, chunk, limit):
    """What is kept of the result channel: up to `limit` + 1 bytes (one more says it ran over)."""
    return kept + chunk[: max(0, limit + 1 - len(kept))]


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
        for fd in (config["result_fd"], *config["link"]):  # the tool's alone now
            os.close(fd)
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
    # /dev/null is an empty file of this root, read-only with it: never the host's device, whose
    # times a tool could change and on which it could hold a lock the host then cannot take
    os.makedirs(new + "/dev")
    open(new + "/dev/null", "w").close()
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

    null = os.open("/dev/null", os.O_RDONLY)
    out = os.open("stdout.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    kept = _inside_place_fds(config)  # the result channel (and the link, if any): nothing else
    try:
        call("close_range", kept, 0xFFFFFFFF, 0)
    except (AttributeError, OSError):  # libc or kernel too old
        os.closerange(kept, os.sysconf("SC_OPEN_MAX"))
    _inside_drop_privileges(config, call)
    # in a user namespace, stage 1 and PID 1 have the tool's uid too
    _inside_limits(config, processes=config["max_processes"] + (2 if config["userns"] else 0))
    _inside_seccomp(call)
    _inside_call_tool(config)


def _inside_place_fds(config):
    """The result channel as descriptor 3 and the link's two ends (if any) as 4 (read) and 5
    (write), wherever they were (one may sit where another must go: each is first copied above
    them all); returns the first descriptor number past them."""
    import fcntl
    import os

    wanted = [config["result_fd"], *config["link"]]
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in wanted]
    for number, fd in enumerate(high, start=3):
        os.dup2(fd, number)
    for fd in {*high, *wanted} - set(range(3, 3 + len(wanted))):
        os.close(fd)
    config["result_fd"] = 3
    return 3 + len(wanted)


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
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))  # POSIX message queues hold memory outside RLIMIT_AS
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
    _inside_place_fds(config)
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
    """The audit hook (a tripwire, not a wall), then tool(argument) -> the result channel."""
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
    # The value goes out through the channel the trusted side holds, with the run's nonce: a file
    # the code writes, or a guess at the descriptor without the nonce, is no result.
    channel, nonce, limit = config.pop("result_fd"), config.pop("nonce"), config["output_bytes"]
    with open("tool.py", "w") as source:  # for tracebacks
        source.write(code)
    sys.addaudithook(hook)
    namespace = {"__name__": "tool"}
    exec(compile(code, "tool.py", "exec"), namespace)
    value = namespace["tool"](argument)
    data = json.dumps({"nonce": nonce, "value": str(value)}).encode()
    if len(data) > limit:
        raise ValueError(f"the value is over the output size limit of {limit} bytes")
    while data:
        data = data[os.write(channel, data):]
