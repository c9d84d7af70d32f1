"""The writer: closed Parquet parts, readable at any moment by pyarrow, polars and duckdb."""

import datetime as dt

import duckdb
import polars as pl
import pyarrow.dataset as ds
import pytest

from harness.records import SCHEMA_VERSION, LLMCall
from harness.writer import TableWriter


def call_row(i: int) -> dict:
    return LLMCall(call_id=f"c{i}", run_id="r", episode_id=f"r/{i}", task_id=f"t{i}", attempt=1,
                   purpose="act", model="scripted/oracle", prompt_tokens=10, completion_tokens=2,
                   total_tokens=12,
                   usage_source="provider", cost_usd=0.0, latency_s=0.1, queued_s=0.0, retries=0,
                   cached=False, error=None, run_in_flight=0, started_at=dt.datetime.now(dt.UTC)).model_dump()


def test_rows_are_buffered_until_the_flush_interval(tmp_path):
    writer = TableWriter(tmp_path, flush_interval_s=3600)
    writer.append("llm_calls", [call_row(0)])
    assert not (tmp_path / "llm_calls").exists()
    assert writer.poll()["llm_calls"] == 1
    assert writer.close()["llm_calls"] == 1
    assert ds.dataset(tmp_path / "llm_calls").count_rows() == 1


def test_each_flush_writes_a_new_closed_part_and_keeps_earlier_ones(tmp_path):
    writer = TableWriter(tmp_path, flush_interval_s=0)
    for i in range(3):
        writer.append("llm_calls", [call_row(i)])
    parts = sorted((tmp_path / "llm_calls").iterdir())
    assert len(parts) == 3 and all(p.suffix == ".parquet" for p in parts)
    table = ds.dataset(tmp_path / "llm_calls").to_table()
    assert sorted(table["call_id"].to_pylist()) == ["c0", "c1", "c2"]
    assert table.schema.metadata[b"harness.schema_version"] == SCHEMA_VERSION.encode()


def test_a_second_writer_on_the_same_directory_adds_parts_instead_of_overwriting(tmp_path):
    for i in range(2):
        writer = TableWriter(tmp_path, flush_interval_s=0)
        writer.append("llm_calls", [call_row(i)])
    assert ds.dataset(tmp_path / "llm_calls").count_rows() == 2


def test_tables_open_in_one_line_with_polars_and_duckdb(tmp_path):
    writer = TableWriter(tmp_path, flush_interval_s=0)
    writer.append("llm_calls", [call_row(0), call_row(1)])
    assert pl.read_parquet(tmp_path / "llm_calls" / "*.parquet").height == 2
    query = f"select sum(total_tokens) from '{tmp_path}/llm_calls/*.parquet'"
    assert duckdb.sql(query).fetchall() == [(24,)]


def test_an_unknown_table_is_rejected(tmp_path):
    writer = TableWriter(tmp_path, flush_interval_s=0)
    with pytest.raises(ValueError, match="unknown table"):
        writer.append("nope", [{}])


def test_a_superseded_writer_stops_writing(tmp_path):
    old = TableWriter(tmp_path, flush_interval_s=3600)
    old.append("llm_calls", [call_row(0)])
    TableWriter(tmp_path, flush_interval_s=3600)  # a resumed run takes over the directory
    with pytest.raises(RuntimeError, match="another writer has taken over"):
        old.flush()
    assert not (tmp_path / "llm_calls").exists()
