"""Policies the harness applies in one place each: unknown cost, atomic files, the UTC clock."""

import datetime as dt
import os
import subprocess
import sys
import threading

import polars as pl
import pytest

from harness.clock import utc_now
from harness.files import replace_atomically, write_text_atomically
from harness.tables.costs import add_costs, known_sum, total_cost


def test_a_total_is_unknown_as_soon_as_one_cost_is():
    assert add_costs(0.5, 0.25) == 0.75
    assert add_costs(0.5, None) is None and add_costs(None, 0.5) is None
    assert total_cost([]) == 0.0 and total_cost([0.1, None, 0.2]) is None


def test_the_polars_sum_says_unknown_per_group_instead_of_skipping_nulls():
    frame = pl.DataFrame({"group": ["priced", "priced", "unpriced", "unpriced"],
                          "cost_usd": [0.25, 0.5, 0.5, None]})
    totals = dict(frame.group_by("group").agg(known_sum(pl.col("cost_usd"))).iter_rows())
    assert totals == {"priced": 0.75, "unpriced": None}


def test_a_file_is_replaced_whole_and_no_temporary_is_left(tmp_path):
    path = tmp_path / "manifest.json"
    write_text_atomically(path, "first")
    write_text_atomically(path, "second")
    assert path.read_text() == "second" and [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "table.parquet"
    path.write_text("old")

    def half_then_fail(temporary):
        temporary.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_atomically(path, half_then_fail)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["table.parquet"]


def test_writers_of_one_file_at_once_never_mix_their_contents(tmp_path):
    path = tmp_path / "cached.json"
    texts = [str(i) * 10_000 for i in range(8)]
    threads = [threading.Thread(target=write_text_atomically, args=(path, text)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert path.read_text() in texts


def test_the_clock_is_utc():
    assert utc_now().tzinfo is dt.UTC


def test_every_entry_point_maps_errors_to_the_same_exit_codes(capsys):
    from harness.config import ConfigError
    from harness.errors import RunAborted
    from harness.exit_codes import exit_code, exit_for
    from harness.models.model_server import ModelServerError

    assert [exit_code(e) for e in (ConfigError("x"), ModelServerError("x"), RunAborted("x"))] == [2, 2, 1]
    assert exit_code(ValueError("a bug")) == 1
    raised = exit_for(RunAborted("the writer actor died; resume with: ..."))
    assert raised.code == 1 and str(raised) == "error: the writer actor died; resume with: ..."
    assert capsys.readouterr().err == "error: the writer actor died; resume with: ...\n"


def test_an_exit_says_its_reason_last_even_through_a_pipe():
    """Ray's forwarded lines go to standard output, which a pipe holds until the exit; a command's
    reason for stopping still comes after them, where a user (and a script) looks for it."""
    script = ("from harness.errors import exit_with\n"
              "print('(raylet) a worker died')\n"
              "raise exit_with(1, 'error: the writer actor died; resume with: ...')\n")
    buffered = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    ran = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=60, env=buffered)
    assert ran.returncode == 1
    assert ran.stdout.splitlines() == ["(raylet) a worker died",
                                       "error: the writer actor died; resume with: ..."]
