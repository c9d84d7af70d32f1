"""The CLI stops on a bad value before anything starts: exit 2, one line naming the field or line."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
QUIET = ("model=scripted", "embedder=hashing", "progress=false", "ray.include_dashboard=false",
         "cache.enabled=false")


def refused(*args: str, cwd: Path, flags: tuple[str, ...] = ()) -> str:
    """Run the CLI, check that it stopped before Ray in one line with exit code 2; the line."""
    result = subprocess.run([sys.executable, "-m", "harness", *flags, *QUIET, *args], cwd=cwd,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: invalid config: "), result.stderr[-2000:]
    assert "Ray" not in result.stdout + result.stderr
    assert not list(cwd.rglob("manifest.json"))
    return lines[0]


def test_a_completion_parameter_of_the_wrong_type(tmp_path):
    line = refused("model.params.temperature=abc", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert line == ("error: invalid config: model.params.temperature: Input should be a valid number "
                    "(got 'abc')")


def test_a_run_dir_that_is_a_file(tmp_path):
    (tmp_path / "taken").write_text("")
    line = refused(f"hydra.run.dir={tmp_path}/taken", cwd=tmp_path)
    assert line == f"error: invalid config: hydra.run.dir: {tmp_path}/taken is a file, not a directory"
    line = refused(f"hydra.run.dir={tmp_path}/taken/run", cwd=tmp_path)
    assert line == f"error: invalid config: hydra.run.dir: {tmp_path}/taken is a file, not a directory"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_a_run_dir_that_cannot_be_created(tmp_path):
    line = refused("hydra.run.dir=/proc/harness-run", cwd=tmp_path)
    assert line.startswith("error: invalid config: hydra.run.dir: cannot create /proc/harness-run (")


def test_a_run_dir_that_does_not_resolve(tmp_path):
    line = refused("hydra.run.dir=${nosuchkey}", cwd=tmp_path)
    assert line == "error: invalid config: hydra.run.dir: Interpolation key 'nosuchkey' not found"


@pytest.mark.parametrize("multirun_flag_first", [True, False])
def test_a_sweep_dir_that_is_a_file(tmp_path, multirun_flag_first):
    (tmp_path / "taken").write_text("")
    args = (f"hydra.sweep.dir={tmp_path}/taken", "seed=0,1")
    if multirun_flag_first:
        line = refused(*args, flags=("-m",), cwd=tmp_path)
    else:
        line = refused(*args, "-m", cwd=tmp_path)
    assert line == f"error: invalid config: hydra.sweep.dir: {tmp_path}/taken is a file, not a directory"


def test_a_task_file_that_is_not_utf8(tmp_path):
    (tmp_path / "t.jsonl").write_bytes(b'{"id": "a", "question": "q", "answer": "x"}\n'
                                       b'{"id": "b", "question": "caf\xe9?", "answer": "y"}\n')
    line = refused("env=jsonl", f"env.path={tmp_path}/t.jsonl", "stream.tuning_size=0", "stream.num_tasks=2",
                   f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert line.startswith("error: invalid config: env: ValueError: t.jsonl line 2: not UTF-8 text")
