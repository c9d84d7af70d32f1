"""seeds=until_decided: a sweep that adds seeds round by round, on one pool, until its comparisons are
decided by the anytime-valid test, and that reaches the same decisions when run again."""

import json
from pathlib import Path

import polars as pl
import pytest

from harness.report.build import main as report_main
from tests.driver.test_cli_errors import QUIET, refused
from tests.processes import StartedCli, run_cli, stop_session, wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def sweep(directory: Path, *overrides: str) -> dict:
    result = run_cli("-m", *QUIET, "seeds=until_decided", "stream.num_tasks=10", *overrides,
                     f"hydra.sweep.dir={directory}")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((directory / "until_decided.json").read_text())


CLEAR = ("model.scripted.accuracy=0.2,0.9", "sweep.until_decided.max_seeds=12",
         "model.scripted.latency_s=0.2")  # a round of seconds: time to stop one mid-way


def test_a_clear_difference_stops_the_sweep_early_and_the_report_knows_it(tmp_path):
    state = sweep(tmp_path / "sweep", *CLEAR)
    assert state["stopped"] == "every comparison decided" and state["reference"] == "0.2"
    decided = state["decided"]["0.9"]
    assert decided["decision"] == "better" and decided["ci_low"] > 0 and decided["seeds"] < 12
    rounds = [r["seeds"] for r in state["rounds"]]
    assert rounds == list(range(2, decided["seeds"] + 1, 2))  # batches of 2, stopped at the decision
    assert all(r["verdicts"]["0.9"]["decision"] == "go on" for r in state["rounds"][:-1])
    # The report knows the sweep was sequential: its reference, and the sequential test's verdict.
    assert report_main([str(tmp_path / "sweep"), "--out", str(tmp_path / "report")]) == 0
    row = pl.read_parquet(tmp_path / "report" / "comparisons.parquet").row(0, named=True)
    assert (row["test"], row["p_method"], row["resolved"], row["units"]) == (
        "sequential", "always valid", True, decided["seeds"])
    assert row["reference"] == "baseline / model.scripted.accuracy=0.2"
    assert (row["ci_low"], row["p_value"]) == (decided["ci_low"], decided["p_value"])
    # A sweep killed after its first round, run again, goes on to the same decision after the same rounds.
    killed = StartedCli(tmp_path / "killed", "-m", *QUIET, "seeds=until_decided", "stream.num_tasks=10",
                        *CLEAR)
    record = killed.run_dir / "until_decided.json"
    wait_for(lambda: record.exists() or killed.process.poll() is not None, timeout=240, what="round 1")
    stop_session(killed.process)
    assert json.loads(record.read_text())["stopped"] is None  # stopped mid-way
    again = sweep(killed.run_dir, *CLEAR)
    assert again["decided"] == state["decided"] and again["rounds"] == state["rounds"]


def test_arms_that_do_not_differ_run_to_the_most_seeds_undecided(tmp_path):
    # A latency that changes no answer: the two arms solve the same tasks alike, seed by seed.
    state = sweep(tmp_path / "sweep", "model.scripted.latency_s=0.0,0.001", "sweep.until_decided.max_seeds=4")
    assert state["stopped"] == "max_seeds spent" and state["decided"] == {}
    assert [r["seeds"] for r in state["rounds"]] == [2, 4]
    assert state["rounds"][-1]["verdicts"]["0.001"]["decision"] == "go on"


def test_until_decided_outside_a_sweep_of_one_parameter_is_refused_in_one_line(tmp_path):
    line = refused("seeds=until_decided", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert line.startswith("error: invalid config: seeds: until_decided needs a sweep of two or more jobs "
                           "that differ in one parameter: python -m harness -m variant=baseline,memory")
    line = refused("seeds=until_decided", "model.scripted.accuracy=0.2,0.9", "stream.num_tasks=5,6",
                   f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path, flags=("-m",))
    assert line == ("error: invalid config: seeds=until_decided compares the values of one swept parameter "
                    "(-m variant=baseline,memory seeds=until_decided); it varies 2 (model.scripted.accuracy, "
                    "stream.num_tasks)")
    line = refused("seeds=until_decided", "model.scripted.accuracy=0.2,0.9",
                   "sweep.until_decided.reference=x", f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path,
                   flags=("-m",))
    assert line == ("error: invalid config: sweep.until_decided.reference='x' is not a value of "
                    "model.scripted.accuracy (0.2, 0.9)")
