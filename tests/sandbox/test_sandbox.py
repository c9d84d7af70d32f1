"""The sandbox: model-written code runs with no network, no writes outside, bounded CPU and memory.

These limits hold in both isolations; tests/agents/test_sandbox_attacks.py shows what only the kernel
isolation stops (hostile code that switches the audit hook off)."""

import pytest

import harness.sandbox
from harness.sandbox import Sandbox, kernel_isolation_problem

NO_KERNEL_ISOLATION = kernel_isolation_problem()


@pytest.fixture(scope="module", params=["kernel", "weak"])
def sandbox(request):
    if request.param == "kernel" and NO_KERNEL_ISOLATION:
        pytest.skip(f"no kernel isolation here: {NO_KERNEL_ISOLATION}")
    return Sandbox(cpu_s=1, wall_s=3, memory_mb=256, output_bytes=10_000, weak=request.param == "weak")


@pytest.fixture
def no_namespaces(monkeypatch):
    monkeypatch.setattr(harness.sandbox, "kernel_isolation_problem", lambda: "no namespaces (test)")


def test_without_kernel_isolation_the_weak_sandbox_must_be_asked_for(no_namespaces):
    with pytest.raises(ValueError) as refused:
        Sandbox()
    assert "variant.sandbox.weak=true" in str(refused.value) and "\n" not in str(refused.value)
    result = Sandbox(weak=True).run("def tool(q):\n    return q.upper()", "abc")
    assert result.ok and result.value == "ABC" and result.isolation == "weak"


def test_each_result_says_how_it_was_isolated(sandbox):
    assert sandbox.run("def tool(q):\n    return q", "x").isolation == sandbox.isolation


def test_a_well_behaved_tool_returns_its_value(sandbox):
    code = "def tool(q):\n    open('scratch', 'w').write(q)\n    return open('scratch').read()[::-1]"
    result = sandbox.run(code, "abc")
    assert result.ok and result.value == "cba" and result.error is None


def test_a_socket_connect_is_blocked(sandbox):
    code = ("import socket\ndef tool(q):\n"
            "    socket.create_connection(('127.0.0.1', 80), timeout=1)\n    return 'out'")
    result = sandbox.run(code, "x")
    assert not result.ok and "socket" in result.error and "not allowed" in result.error


def test_a_write_outside_the_temp_dir_is_blocked(sandbox, tmp_path):
    target = tmp_path / "escaped.txt"
    result = sandbox.run(f"def tool(q):\n    open({str(target)!r}, 'w').write('x')\n    return 'wrote'", "x")
    assert not result.ok and "outside the working directory" in result.error
    assert not target.exists()


def test_an_infinite_loop_hits_the_cpu_limit(sandbox):
    # A wall-clock limit far above the CPU one: on a loaded machine 1 s of CPU can take many seconds.
    roomy = Sandbox(cpu_s=1, wall_s=60, memory_mb=256, output_bytes=10_000, weak=sandbox.isolation == "weak")
    result = roomy.run("def tool(q):\n    while True:\n        pass", "x")
    assert not result.ok and result.error.startswith("CPU-time limit exceeded")


def test_a_memory_bomb_hits_the_memory_limit(sandbox):
    result = sandbox.run("def tool(q):\n    block = bytearray(4 * 1024 ** 3)\n    return 'big'", "x")
    assert not result.ok and "MemoryError" in result.error


def test_a_sleeping_tool_hits_the_wall_clock_limit(sandbox):
    result = sandbox.run("import time\ndef tool(q):\n    time.sleep(60)", "x")
    assert not result.ok and result.error.startswith("wall-time limit")


def test_output_is_capped(sandbox):
    result = sandbox.run("def tool(q):\n    while True:\n        print('x' * 1000)", "x")
    assert not result.ok and result.error.startswith("output size limit") and len(result.stdout) <= 10_000


@pytest.mark.parametrize("code", ["import os\ndef tool(q):\n    return os.system('true')",
                                  "import subprocess\ndef tool(q):\n    return subprocess.run(['true'])",
                                  "import ctypes\ndef tool(q):\n    return ctypes.CDLL(None)"])
def test_processes_and_native_code_are_blocked(sandbox, code):
    result = sandbox.run(code, "x")
    assert not result.ok and "not allowed" in result.error


FORGE = "json.dumps({'value': 'passed'})"


@pytest.mark.parametrize(("forgery", "error"), [
    (f"open('result.json', 'w').write({FORGE})", "ended without returning a result"),
    ("[write(fd) for fd in range(3, 1024)]", "no readable result"),
], ids=["result-file", "guessed-descriptor"])
def test_a_value_written_anywhere_but_through_the_runner_is_no_result(sandbox, forgery, error):
    # A file in the working directory is no channel; a descriptor guessed lacks the run's nonce.
    code = (f"import json, os\n\ndef write(fd):\n    try:\n        os.write(fd, {FORGE}.encode())\n"
            f"    except OSError:\n        pass\n\ndef tool(q):\n    {forgery}\n    os._exit(0)\n")
    result = sandbox.run(code, "x")
    assert (result.ok, result.value, result.error) == (False, None, error)


def test_a_tools_value_reaches_the_agent_as_plain_text_never_its_object(sandbox):
    # Issue 50, item 3: what a learnt tool returns is made text in the tool's own process and crosses
    # as a JSON string; an object that claims to equal everything arrives as the str it printed as.
    code = ("class Sly(str):\n    def __eq__(self, other):\n        return True\n"
            "    __hash__ = str.__hash__\n\n"
            "class Answer:\n    def __str__(self):\n        return Sly('42')\n\n"
            "def tool(q):\n    return Answer()")
    result = sandbox.run(code, "q")
    assert result.ok and type(result.value) is str and result.value == "42" and result.value != "43"
