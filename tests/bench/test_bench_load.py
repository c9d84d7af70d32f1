"""`python -m harness.bench load`: busy processes that take a CPU each and end with the measurement;
rows quiet and busy of each tool, and busy over quiet from their medians."""

import os
import time

import polars as pl
import psutil
import pytest

from harness.bench.load import _ratio, busy, call_clocks


@pytest.mark.slow  # it starts processes (tests/tiers.py)
def test_busy_processes_spin_while_measured_and_are_ended_after():
    with busy(2) as pids:
        time.sleep(0.5)
        processes = [psutil.Process(pid) for pid in pids]
        assert all(p.cpu_times().user > 0.05 for p in processes)
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert os.getpid() not in pids


def test_busy_over_quiet_is_the_ratio_of_the_medians_of_the_repeats():
    rows = [{"condition": condition, "wall_s": wall, "pool_stage_s": None, "first_call_s": 1.0}
            for condition, wall in [("quiet", 10.0), ("busy 3", 30.0), ("quiet", 12.0), ("busy 3", 26.0),
                                    ("quiet", 11.0), ("busy 3", 40.0)]]
    ratio = _ratio("harness", rows, 3)
    assert ratio["condition"] == "busy 3 / quiet"
    assert ratio["wall_s"] == 30.0 / 11.0
    assert ratio["pool_stage_s"] is None and ratio["first_call_s"] == 1.0


def test_the_call_clocks_are_the_medians_of_latency_and_harness_seconds(tmp_path):
    (tmp_path / "llm_calls").mkdir()
    pl.DataFrame({"latency_s": [0.0, 0.1, 0.2], "harness_s": [1.0, 2.0, 9.0]}).write_parquet(
        tmp_path / "llm_calls" / "part-0.parquet")
    assert call_clocks(tmp_path) == {"latency_p50_s": 0.1, "harness_p50_s": 2.0}
    assert call_clocks(tmp_path / "nothing") == {"latency_p50_s": None, "harness_p50_s": None}
