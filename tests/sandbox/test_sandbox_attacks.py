"""Hostile tools: every escape found against the old, Python-level sandbox now has no effect.

Each tool first switches the Python audit hook off, as hostile code can, so these tests exercise
what the kernel enforces: namespaces, the new root, dropped privileges, rlimits and seccomp. The
attacks are real (aimed at the weak sandbox, they truncate the standard library), so each tool
refuses to start unless it is PID 2 of a namespace without /proc.
A tool reports each attempt as "done: <what it got>" or "failed: <error>"; the tests then check
that nothing happened outside: no secret came back, no file changed, no server saw a connection,
no process is left.
"""

import ast
import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

from harness.sandbox import Sandbox, kernel_isolation_problem

pytestmark = pytest.mark.skipif(kernel_isolation_problem() is not None,
                                reason=f"no kernel isolation here: {kernel_isolation_problem()}")

CANARY = f"sk-canary-{uuid.uuid4().hex}"
STDLIB = sysconfig.get_paths()["stdlib"]
SITE_PACKAGES = sysconfig.get_paths()["purelib"]
REPO = Path(__file__).resolve().parents[2]

# Switches the audit hook off: empties its lists of blocked events and makes every path "inside".
DISARM = '''
import gc
for _hook in [o for o in gc.get_objects() if getattr(o, "__name__", "") == "hook"]:
    for _cell in _hook.__closure__ or ():
        if isinstance(_cell.cell_contents, tuple):
            _cell.cell_contents = ()
        elif callable(_cell.cell_contents):
            _cell.cell_contents = lambda path: True
'''
PRELUDE = DISARM + '''
import ctypes, json, os, socket, sys, time
if os.getpid() != 2 or os.path.exists("/proc"):  # these attacks are real: never aim them at the host
    raise SystemExit("not in its own PID namespace and root: refusing to attack the host")
_libc = ctypes.CDLL(None, use_errno=True)

def libc(name, *args):
    if getattr(_libc, name)(*args) == -1:
        raise OSError(ctypes.get_errno(), f"{name}: {os.strerror(ctypes.get_errno())}")

def attempt(action):
    try:
        return "done: " + repr(action())[:300]
    except BaseException as error:
        return f"failed: {type(error).__name__}: {error}"
'''


@pytest.fixture(scope="module")
def box():
    return Sandbox(cpu_s=2, wall_s=5, memory_mb=256, output_bytes=10_000)


def attempts(box: Sandbox, helpers: str = "", **actions: str) -> dict[str, str]:
    """Run each action (a Python expression) in one hostile tool; what each did, by name."""
    calls = ", ".join(f"{name!r}: attempt(lambda: {action})" for name, action in actions.items())
    result = box.run(f"{PRELUDE}\n{helpers}\ndef tool(q):\n    return json.dumps({{{calls}}})\n", "q")
    assert result.ok, result.error
    return json.loads(result.value)


def assert_all_failed(outcome: dict[str, str]) -> None:
    done = {name: what for name, what in outcome.items() if not what.startswith("failed")}
    assert not done, f"these attacks worked: {done}"


@pytest.fixture
def holder():
    """Another process of ours holding the secret in its environment."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               env={**os.environ, "OPENAI_API_KEY": CANARY}, start_new_session=True)
    yield process
    process.kill()
    process.wait()


def test_the_prelude_really_switches_the_audit_hook_off(box):
    outcome = attempts(box, ctypes="ctypes.CDLL(None).getpid()", kill="os.kill(os.getpid(), 0)")
    assert outcome == {"ctypes": "done: 2", "kill": "done: None"}  # pid 2: its own PID namespace


def test_a_well_behaved_stdlib_tool_still_works(box):
    code = """
import collections, datetime, json, math, re, statistics, hashlib, decimal, fractions, unicodedata
def tool(q):
    words = collections.Counter(re.findall(r"[a-z]+", q.lower()))
    day = datetime.date(2024, 2, 28) + datetime.timedelta(days=1)
    return json.dumps({"top": words.most_common(1)[0][0], "sqrt": math.isqrt(81), "day": day.isoformat(),
                       "mean": statistics.mean([1, 2, 3]), "md5": hashlib.md5(b"a").hexdigest()[:6],
                       "dec": str(decimal.Decimal("0.1") + decimal.Decimal("0.2")),
                       "frac": str(fractions.Fraction(1, 3) * 3), "name": unicodedata.name("é")})
"""
    result = box.run(code, "the cat and the hat")
    assert result.ok and result.isolation == "kernel", result.error
    assert json.loads(result.value) == {"top": "the", "sqrt": 9, "day": "2024-02-29", "mean": 2,
                                        "md5": "0cc175", "dec": "0.3", "frac": "1",
                                        "name": "LATIN SMALL LETTER E WITH ACUTE"}


def test_secrets_in_our_environment_or_other_processes_never_reach_the_tool(box, holder, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    outcome = attempts(
        box, environ="dict(os.environ)", parent="open(f'/proc/{os.getppid()}/environ', 'rb').read()",
        init="open('/proc/1/environ', 'rb').read()", own="open('/proc/self/environ', 'rb').read()",
        holder=f"open('/proc/{holder.pid}/environ', 'rb').read()",
        scan="[open(f'/proc/{p}/environ', 'rb').read() for p in os.listdir('/proc')]")
    assert CANARY not in json.dumps(outcome)
    assert set(ast.literal_eval(outcome.pop("environ").removeprefix("done: "))) <= {"PATH", "LC_CTYPE"}
    assert_all_failed(outcome)


def test_nothing_but_the_standard_library_can_be_read_or_imported(box, tmp_path):
    secret = tmp_path / "outputs.parquet"
    secret.write_text(CANARY)
    outcome = attempts(
        box, passwd="open('/etc/passwd').read()", output=f"open({str(secret)!r}).read()",
        repo=f"open({str(REPO / 'pyproject.toml')!r}).read()", home="os.listdir('/home')",
        tmp="os.listdir('/tmp')", root_cache="os.listdir('/root/.cache')",
        python_bin=f"os.listdir({os.path.dirname(sys.executable)!r})",
        proc="os.listdir('/proc')", sys="os.listdir('/sys')", ray="os.listdir('/tmp/ray')",
        countryinfo="__import__('countryinfo')", harness="__import__('harness')",
        path_added=f"sys.path.append({SITE_PACKAGES!r}) or __import__('countryinfo')",
        package_file=f"open({SITE_PACKAGES + '/countryinfo/__init__.py'!r}).read()",
        device="open('/dev/sda', 'rb').read(1)", memory="open('/dev/mem', 'rb').read(1)")
    assert CANARY not in json.dumps(outcome)
    assert_all_failed(outcome)
    seen = attempts(box, site_packages=f"os.listdir({SITE_PACKAGES!r})", dev="os.listdir('/dev')",
                    root="sorted(os.listdir('/'))")
    # Installed packages are hidden: an empty directory where site-packages lies under a path the sandbox
    # mounts, no such path at all where it does not (a venv under /tmp); never a listing of them.
    listing = seen["site_packages"]
    assert listing == "done: []" or listing.startswith("failed: FileNotFoundError"), listing
    assert seen["dev"] == "done: ['null']"
    assert not {"proc", "etc", "tmp", "sys", "home", "run", "var"} & set(ast.literal_eval(seen["root"][6:]))


def test_nothing_outside_work_can_be_written(box, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    stdlib_file = os.path.join(STDLIB, "json", "__init__.py")
    before = hashlib.sha256(Path(stdlib_file).read_bytes()).hexdigest()
    out = str(tmp_path)
    outcome = attempts(
        box, helpers="open('/work/f', 'w').close()",
        open_write=f"open({out + '/new.txt'!r}, 'w').write('x')",
        dir_fd_tmp="os.open('x', os.O_WRONLY | os.O_CREAT, dir_fd=os.open('/tmp', os.O_RDONLY))",
        dir_fd_root="os.open('x', os.O_WRONLY | os.O_CREAT, dir_fd=os.open('/', os.O_RDONLY))",
        mkdir_dir_fd="os.mkdir('d', dir_fd=os.open('/usr', os.O_RDONLY))",
        rename=f"os.rename('/work/f', {out + '/renamed'!r})", link=f"os.link('/work/f', {out + '/linked'!r})",
        symlink=f"os.symlink('/work/f', {out + '/symlinked'!r})",
        truncate=f"os.open({str(victim)!r}, os.O_RDONLY | os.O_TRUNC)",
        stdlib_truncate=f"os.open({stdlib_file!r}, os.O_RDONLY | os.O_TRUNC)",
        stdlib_append=f"open({stdlib_file!r}, 'a').write('#')",
        stdlib_link=f"os.link({stdlib_file!r}, '/work/json.py')",
        chmod_stdlib=f"os.chmod({stdlib_file!r}, 0o777)")
    assert_all_failed(outcome)
    assert sorted(os.listdir(tmp_path)) == ["victim.txt"] and victim.read_text() == "original"
    assert hashlib.sha256(Path(stdlib_file).read_bytes()).hexdigest() == before


def test_no_connection_leaves_the_sandbox(box, tmp_path):
    servers = {"tcp": socket.create_server(("127.0.0.1", 0)), "unix": socket.socket(socket.AF_UNIX),
               "abstract": socket.socket(socket.AF_UNIX)}
    abstract_name = f"\0harness-test-{uuid.uuid4().hex}"
    servers["unix"].bind(str(tmp_path / "ray.sock"))
    servers["abstract"].bind(abstract_name)
    try:
        for server in servers.values():
            server.listen()
            server.setblocking(False)
        port = servers["tcp"].getsockname()[1]
        outcome = attempts(
            box, tcp=f"socket.create_connection(('127.0.0.1', {port}), timeout=1)",
            unix=f"socket.socket(socket.AF_UNIX).connect({str(tmp_path / 'ray.sock')!r})",
            abstract=f"socket.socket(socket.AF_UNIX).connect({abstract_name!r})",
            dns="socket.getaddrinfo('example.com', 443)", pair="socket.socketpair()",
            raw="socket.socket(socket.AF_PACKET, socket.SOCK_RAW)")
        assert_all_failed(outcome)
        for name, server in servers.items():
            with pytest.raises(BlockingIOError):
                server.accept()
                pytest.fail(f"the {name} server saw a connection")
    finally:
        for server in servers.values():
            server.close()


def test_no_process_can_be_started(box, tmp_path):
    marker = str(tmp_path / "forked")
    fork_exec = ("__import__('_posixsubprocess').fork_exec([b'/bin/sh', b'-c', b'touch " + marker + "'], "
                 "[b'/bin/sh'], True, (), None, None, -1, -1, -1, -1, -1, -1, *os.pipe(), True, True, -1, "
                 "None, None, None, -1, None, False)")
    outcome = attempts(box, fork="os.fork()", fork_exec=fork_exec,
                       thread="__import__('threading').Thread(target=print).start()",
                       spawn="os.posix_spawn('/bin/sh', ['sh'], {})", system="os.system('true')")
    assert outcome.pop("system") == f"done: {127 << 8}"  # libc's answer when it could not start a shell
    assert_all_failed(outcome)
    assert not os.path.exists(marker)


def test_a_fork_bomb_stops_at_the_first_fork(box):
    result = box.run(PRELUDE + "def tool(q):\n    while True:\n        os.fork()", "q")
    assert not result.ok and "BlockingIOError" in result.error


def test_other_processes_cannot_be_seen_signalled_or_traced(box, holder):
    outcome = attempts(
        box, kill_holder=f"os.kill({holder.pid}, 9)", kill_init="os.kill(1, 9)",
        kill_holder_group=f"os.killpg({holder.pid}, 9)", ptrace_init="libc('ptrace', 16, 1, 0, 0)",
        proc_mem="open('/proc/1/mem', 'rb').read(1)")
    assert_all_failed(outcome)
    kill_all = "def tool(q):\n    if os.getpid() == 2:\n        os.kill(-1, 9)\n    return 'alive'"
    result = box.run(PRELUDE + kill_all, "q")
    assert not result.ok and "ProcessLookupError" in result.error  # no process it may signal, not even PID 1
    assert holder.poll() is None


def test_privileged_system_calls_fail(box):
    outcome = attempts(
        box, setuid_root="os.setuid(0)", setgid_root="os.setgid(0)",
        mount_proc="libc('mount', b'proc', b'/work', b'proc', 0, None)",
        remount_stdlib_rw=f"libc('mount', None, {STDLIB.encode()!r}, None, 32 | 4096, None)",
        umount_mask=f"libc('umount2', {SITE_PACKAGES.encode()!r}, 2)",
        unshare_user="libc('unshare', 0x10000000)", unshare_mount="libc('unshare', 0x20000)",
        chroot="libc('chroot', b'/work')", setns="libc('setns', 0, 0)",
        keyctl="libc('syscall', 250, 0, -3, 0)", bpf="libc('syscall', 321, 0, 0, 0)",
        io_uring="libc('syscall', 425, 1, 0)", userfaultfd="libc('syscall', 323, 0)")
    assert_all_failed(outcome)
    capget = "libc('capget', (ctypes.c_uint32 * 2)(0x20080522, 0), caps) or list(caps)"
    caps = attempts(box, helpers="caps = (ctypes.c_uint32 * 6)()", caps=capget,
                    no_new_privs="libc('prctl', 39, 0, 0, 0, 0)")
    assert caps == {"caps": "done: [0, 0, 0, 0, 0, 0]", "no_new_privs": "done: None"}


def test_the_disk_cannot_be_filled(box):
    outcome = attempts(box, big_file="open('big', 'wb').write(b'x' * 50_000_000)",
                       many_files="[open(f'f{i}', 'w').close() for i in range(100_000)]",
                       dev_null="open('/dev/null', 'wb').write(b'x' * 50_000_000)")
    assert_all_failed(outcome)


def test_dev_null_inside_is_not_the_hosts_and_is_read_only(box):
    before = os.stat("/dev/null")
    outcome = attempts(box, write="open('/dev/null', 'wb').write(b'x')",
                       touch="os.utime('/dev/null', (0, 0))", chmod="os.chmod('/dev/null', 0o777)",
                       remove="os.remove('/dev/null')")
    assert_all_failed(outcome)
    read = attempts(box, helpers="import fcntl", listing="os.listdir('/dev')",
                    read="open('/dev/null', 'rb').read()",
                    lock="fcntl.flock(open('/dev/null', 'rb'), fcntl.LOCK_EX | fcntl.LOCK_NB)")
    assert read == {"listing": "done: ['null']", "read": "done: b''", "lock": "done: None"}
    after = os.stat("/dev/null")  # the lock was on the sandbox's own file: the host's is free
    same = ("st_ino", "st_mtime_ns", "st_mode")
    assert [getattr(after, key) for key in same] == [getattr(before, key) for key in same]
    with open("/dev/null", "rb") as host_null:
        import fcntl

        fcntl.flock(host_null, fcntl.LOCK_EX | fcntl.LOCK_NB)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the seccomp filter is x86-64 only")
def test_memory_outside_the_address_space_limit_cannot_be_taken(box):
    # 768 MB of detached SysV shared memory once sat beside a 256 MB limit; semaphores, message
    # queues and memfd hold memory the limit does not count either.
    outcome = attempts(
        box, shmget="libc('syscall', 29, 0, 256 << 20, 0o1000 | 0o600)",
        semget="libc('syscall', 64, 0, 1, 0o1000)",
        msgget="libc('syscall', 68, 0, 0o1000 | 0o600)", memfd="libc('syscall', 319, b'x', 0)",
        mq_open="libc('syscall', 240, b'q', 0o100 | 2, 0o600, None)", posix_shm="open('/dev/shm/x', 'wb')")
    assert_all_failed(outcome)


def run_tool(box: Sandbox, body: str):
    return box.run(f"{PRELUDE}\ndef tool(q):\n" + "".join(f"    {line}\n" for line in body.splitlines()), "q")


# Writes to the result channel with this run's nonce, both found in the runner's frame, as code
# sharing the runner's interpreter can: whatever comes through the channel is a result or none.
SEND = """
def send(payload):
    frame = sys._getframe()
    while "nonce" not in frame.f_locals:
        frame = frame.f_back
    data = payload.replace(b"NONCE", frame.f_locals["nonce"].encode())
    while data:
        data = data[os.write(frame.f_locals["channel"], data):]
"""


def test_every_way_a_tool_ends_is_a_result_never_an_exception(box):
    import signal

    realtime = run_tool(box, f"os.kill(os.getpid(), {signal.SIGRTMIN + 3})")
    assert not realtime.ok and realtime.error.startswith(f"killed by signal {signal.SIGRTMIN + 3}")
    endings = {
        "nested": "b'{\"nonce\": \"NONCE\", \"value\": ' + b'[' * 4_000 + b']' * 4_000 + b'}'",
        "huge": "b'{\"nonce\": \"NONCE\", \"value\": \"' + b'x' * 9_000_000 + b'\"}'",
        "not_utf8": "b'\\xff\\xfe{\"nonce\": \"NONCE\", \"value\": \"x\"}'",
        "not_json": "b'value = 1'",
        "not_text": "b'{\"nonce\": \"NONCE\", \"value\": {\"a\": [1, 2]}}'",
    }
    for name, payload in endings.items():
        # (the huge one runs past the output limit: the sandbox keeps 10,001 bytes and reads none)
        result = box.run(f"{PRELUDE}\n{SEND}\ndef tool(q):\n    attempt(lambda: send({payload}))\n"
                         "    os._exit(0)\n", "q")
        assert not result.ok and result.error == "no readable result", (name, result)
    # The control: send() does reach the reader. Code that finds the nonce in the runner's frame
    # can return a value without returning (harness/sandbox/__init__.py says so; no file can).
    control = box.run(f"{PRELUDE}\n{SEND}\ndef tool(q):\n"
                      "    send(b'{\"nonce\": \"NONCE\", \"value\": \"sent\"}')\n    os._exit(0)\n", "q")
    assert control.ok and control.value == "sent"


def test_what_a_tool_returns_or_prints_reaches_no_table_or_terminal_raw(box):
    result = run_tool(box, "print('\\x1b[2J\\x1b]0;pwned\\x07\\x00')\nreturn 'ok\\ud800 \\x1b[31mred'")
    assert result.ok and result.value == "ok\ufffd \\x1b[31mred"
    assert result.stdout == "\\x1b[2J\\x1b]0;pwned\\x07\\x00\n"
    failed = run_tool(box, "raise ValueError('\\x1b[31m\\x00 \\udcff')")
    assert not failed.ok and "\x1b" not in failed.error and "\x00" not in failed.error
    assert "ValueError: \\x1b[31m\\x00" in failed.error
    for text in (result.value, result.stdout, failed.error, failed.stdout):
        text.encode("utf-8")  # a table can hold it


def test_links_and_fifos_in_work_cannot_make_the_reporter_read_our_files(box, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(CANARY)
    swap = (f"    for name in ('stdout.txt', 'result.json'):\n        os.remove(name)\n"
            f"        os.symlink({str(secret)!r}, name)\n    return 'x'")
    result = box.run(PRELUDE + "def tool(q):\n" + swap, "q")
    assert not result.ok and CANARY not in result.model_dump_json()
    started = time.monotonic()
    fifo = "    os.remove('stdout.txt')\n    os.mkfifo('stdout.txt')\n    return 'x'"
    result = box.run(PRELUDE + "def tool(q):\n" + fifo, "q")
    assert result.ok and time.monotonic() - started < 2


def sandbox_processes(box: Sandbox, code: str, at_least: int) -> tuple[list[psutil.Process], float]:
    """Run code; while it runs, collect our descendant processes. Returns them and the run's time."""
    seen: dict[int, psutil.Process] = {}
    done = threading.Event()
    started = time.monotonic()
    runner = threading.Thread(target=lambda: (box.run(code, "q"), done.set()))
    runner.start()
    while not done.is_set():
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if child.cmdline()[1:3] == ["-I", "-S"]:  # stage 1 and its forks, not Ray's workers
                    seen.setdefault(child.pid, child)
        time.sleep(0.01)
    runner.join()
    assert len(seen) >= at_least, "the sandbox ended before its processes were seen"
    return list(seen.values()), time.monotonic() - started


def gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


DETACH = PRELUDE + '''
def tool(q):
    if os.fork() == 0:
        os.setsid()
        while True:
            open("alive", "a").write("x")
            time.sleep(0.05)
    time.sleep(0.5)
    return str(os.getuid())
'''


def test_a_detached_child_does_not_outlive_the_run():
    box = Sandbox(cpu_s=2, wall_s=5, max_processes=4)
    result = box.run(DETACH, "q")
    assert result.ok, result.error
    uid = int(result.value)
    assert not [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and uid in p.info["uids"]]
    # stage 1, PID 1, the tool and its child, all gone the moment run() returns
    processes, seconds = sandbox_processes(box, DETACH, at_least=4)
    assert all(gone(p) for p in processes) and seconds < 3


def test_the_wall_clock_ends_every_process():
    box = Sandbox(cpu_s=2, wall_s=1.5, max_processes=4)
    code = DETACH.replace("time.sleep(0.5)", "time.sleep(60)")
    processes, seconds = sandbox_processes(box, code, at_least=4)
    assert all(gone(p) for p in processes) and seconds < 3


def test_the_sandbox_dies_with_its_caller():
    program = ("import harness.sandbox as s\ns.kernel_isolation_problem = lambda: None  # no probe run\n"
               "s.Sandbox(wall_s=60).run('import time\\ndef tool(q):\\n    time.sleep(60)', 'q')")
    caller = subprocess.Popen([sys.executable, "-c", program])
    deadline = time.monotonic() + 10
    while len(psutil.Process(caller.pid).children(recursive=True)) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)  # stage 1, PID 1, the tool
    sandbox = psutil.Process(caller.pid).children(recursive=True)
    assert len(sandbox) >= 3
    caller.kill()
    caller.wait()
    deadline = time.monotonic() + 5
    while not all(gone(p) for p in sandbox) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all(gone(p) for p in sandbox)
