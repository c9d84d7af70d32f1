"""The writer: closed Parquet parts, readable at any moment by pyarrow, polars and duckdb; at close,
every table present and compacted into one file without ever losing or repeating a row."""

import datetime as dt
import glob
import json
import shutil
import uuid
from types import SimpleNamespace

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from harness.tables.orphans import drop_orphans, finished_episodes
from harness.tables.reading import count_rows, read_table
from harness.tables.records import SCHEMA_VERSION, TABLES, LLMCall
from harness.tables.writer import COMPACTED, TableWriter, table_files


def call_row(i: int) -> dict:
    return LLMCall(call_id=f"c{i}", run_id="r", episode_id=f"r/{i}", task_id=f"t{i}", attempt=1,
                   purpose="act", model="scripted/oracle", prompt_tokens=10, completion_tokens=2,
                   total_tokens=12, cache_read_tokens=0, cache_write_tokens=0, reasoning_tokens=0,
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


def test_every_table_exists_with_its_schema_after_close_even_without_rows(tmp_path):
    writer = TableWriter(tmp_path, flush_interval_s=0)
    writer.append("llm_calls", [call_row(0)])
    writer.close()
    for table, model in TABLES.items():
        expected = 1 if table == "llm_calls" else 0
        dataset = ds.dataset(tmp_path / table)
        assert dataset.count_rows() == expected
        assert dataset.schema.remove_metadata() == model.arrow_schema().remove_metadata()
        assert dataset.schema.metadata[b"harness.schema_version"] == SCHEMA_VERSION.encode()
        frame = pl.read_parquet(tmp_path / table / "*.parquet")
        assert frame.height == expected and frame.columns == list(model.model_fields)
        query = duckdb.sql(f"select * from '{tmp_path}/{table}/*.parquet'")
        assert len(query.fetchall()) == expected and query.columns == list(model.model_fields)
    assert pl.read_parquet(tmp_path / "steps" / "*.parquet").to_pandas().empty


def test_close_compacts_each_table_into_one_file_with_every_row_once(tmp_path):
    writer = TableWriter(tmp_path, flush_interval_s=0)
    for i in range(20):
        writer.append("llm_calls", [call_row(i)])
    assert len(list((tmp_path / "llm_calls").glob("*.parquet"))) == 20
    assert writer.close()["llm_calls"] == 20
    files = list((tmp_path / "llm_calls").glob("*.parquet"))
    assert len(files) == 1 and files[0].name.endswith(COMPACTED)
    assert sorted(pl.read_parquet(files[0])["call_id"]) == sorted(f"c{i}" for i in range(20))
    assert pq.read_schema(files[0]).metadata[b"harness.schema_version"] == SCHEMA_VERSION.encode()
    assert not [p for p in (tmp_path / "llm_calls").iterdir() if p.name.startswith(".")]


def compacted_rows(directory):
    [file] = directory.glob("*.parquet")
    return pq.read_table(file)


def test_the_parts_a_writer_kept_in_memory_compact_as_the_same_file_read_from_disk(tmp_path, monkeypatch):
    """Compaction takes the parts its writer wrote from memory instead of reading them back (0.7 ms a
    file): the file it writes is the one it writes from the files, row for row, in file order, with a
    part of an earlier writer between them."""
    import harness.tables.writer

    rows = [call_row(i) for i in range(10)]

    def written(directory, keep_bytes):
        # The earlier writer's id sorts first: its file comes before this writer's kept parts.
        ids = iter([uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)])
        monkeypatch.setattr(harness.tables.writer, "uuid", SimpleNamespace(uuid4=lambda: next(ids)))
        monkeypatch.setattr(harness.tables.writer, "KEPT_BYTES", keep_bytes)
        for start in (0, 5):  # an earlier session's parts, compacted; then this one's
            writer = TableWriter(directory, flush_interval_s=0)
            for row in rows[start:start + 5]:
                writer.append("llm_calls", [row])
            writer.close()
        return compacted_rows(directory / "llm_calls")

    from_memory, from_disk = written(tmp_path / "kept", 2**30), written(tmp_path / "read", 0)
    assert from_memory["call_id"].to_pylist() == [f"c{i}" for i in range(10)]
    assert from_memory.equals(from_disk)
    replaced = json.loads(from_memory.schema.metadata[b"harness.replaces"])
    assert len(replaced) == 6 and replaced[0].endswith(COMPACTED)


def test_what_writers_keep_is_bounded_for_the_whole_process_and_let_go_at_close(tmp_path, monkeypatch):
    """A sweep's hub holds every job's writer: the bytes they keep are counted together, past the bound
    parts are read back instead, and a writer's close gives its share back, also when it fails."""
    import harness.tables.writer as writer_module

    before = writer_module._kept_bytes
    one_part = pa.Table.from_pylist([call_row(0)], schema=LLMCall.arrow_schema()).nbytes
    monkeypatch.setattr(writer_module, "KEPT_BYTES", before + 3 * one_part)
    writers = [TableWriter(tmp_path / name, flush_interval_s=0) for name in ("a", "b")]
    for i in range(2):
        for writer in writers:
            writer.append("llm_calls", [call_row(i)])
    assert writer_module._kept_bytes == before + 3 * one_part  # the fourth part is not kept
    assert sorted(len(w._kept["llm_calls"]) for w in writers) == [1, 2]
    writers[0].close()
    monkeypatch.setattr(writer_module, "_fsync", lambda path: (_ for _ in ()).throw(OSError(28, "full")))
    with pytest.raises(OSError):
        writers[1].close()
    assert writer_module._kept_bytes == before


def test_a_kept_part_rewritten_on_disk_since_is_read_from_disk(tmp_path):
    """Rows set aside after a dead worker rewrite its parts (harness/tables/orphans.py): the file as it
    is now is what gets compacted, not the copy the writer kept."""
    writer = TableWriter(tmp_path, flush_interval_s=0)
    for i in range(3):
        writer.append("llm_calls", [call_row(i)])
    first = sorted((tmp_path / "llm_calls").glob("*.parquet"))[0]
    rewritten = pa.Table.from_pylist([call_row(99)], schema=LLMCall.arrow_schema())
    pq.write_table(rewritten, first)
    writer.close()
    assert sorted(compacted_rows(tmp_path / "llm_calls")["call_id"].to_pylist()) == ["c1", "c2", "c99"]


def test_a_resumed_run_compacts_its_rows_with_the_earlier_ones(tmp_path):
    for start in (0, 10):
        writer = TableWriter(tmp_path, flush_interval_s=0)
        for i in range(start, start + 5):
            writer.append("llm_calls", [call_row(i)])
        writer.close()
    assert len(list((tmp_path / "llm_calls").glob("*.parquet"))) == 1
    assert pl.read_parquet(tmp_path / "llm_calls" / "*.parquet").height == 10


def test_a_compaction_that_fails_before_its_rename_leaves_the_parts_as_they_were(tmp_path, monkeypatch):
    import harness.tables.writer

    writer = TableWriter(tmp_path, flush_interval_s=0)
    for i in range(3):
        writer.append("llm_calls", [call_row(i)])

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(harness.tables.writer, "_fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        writer.close()
    assert sorted(p.name for p in (tmp_path / "llm_calls").iterdir()) == [
        f"part-{writer._writer_id}-{i:06d}.parquet" for i in range(3)]


def test_a_crash_between_the_rename_and_the_deletions_never_repeats_a_row(tmp_path):
    """A compacted file next to parts it already holds (its writer died in between): the harness's
    readers leave those parts out, and the next writer on the directory (a resume) deletes them."""
    from tests.conftest import run_variant

    run = run_variant("stream.num_tasks=4")
    writer = TableWriter(tmp_path, flush_interval_s=0)
    for row in run.rows["llm_calls"]:
        writer.append("llm_calls", [row])
    for row in run.rows["episodes"]:
        writer.append("episodes", [row])
    saved = tmp_path.parent / f"{tmp_path.name}-parts"
    shutil.copytree(tmp_path, saved)
    writer.close()
    for table in ("llm_calls", "episodes"):
        for part in (saved / table).glob("*.parquet"):
            shutil.copy(part, tmp_path / table)  # as if the deletions never happened
    (tmp_path / "llm_calls" / ".part-deadbeef-000009-compacted.parquet.tmp").write_bytes(b"half")
    calls, episodes = len(run.rows["llm_calls"]), len(run.rows["episodes"])
    assert pl.read_parquet(tmp_path / "llm_calls" / "*.parquet").height == 2 * calls  # a plain glob
    assert read_table(tmp_path, "llm_calls").height == calls and count_rows(tmp_path, "episodes") == episodes
    assert len(table_files(tmp_path / "llm_calls")) == 1
    assert len(finished_episodes(tmp_path)) == episodes
    TableWriter(tmp_path, flush_interval_s=0)  # a resume
    assert sorted(p.name for p in (tmp_path / "llm_calls").iterdir()) == [
        p.name for p in table_files(tmp_path / "llm_calls")]
    assert pl.read_parquet(tmp_path / "llm_calls" / "*.parquet").height == calls


def test_resume_reads_and_rewrites_a_compacted_table(tmp_path):
    from tests.conftest import run_variant

    run = run_variant("stream.num_tasks=3")
    writer = TableWriter(tmp_path, flush_interval_s=0)
    for row in run.rows["llm_calls"] + run.rows["attempts"]:
        writer.append("llm_calls" if "call_id" in row else "attempts", [row])
    writer.append("episodes", run.rows["episodes"][:2])  # the third episode never made it
    writer.close()
    finished = finished_episodes(tmp_path)
    assert len(finished) == 2 and drop_orphans(tmp_path, finished) == 2
    writer = TableWriter(tmp_path, flush_interval_s=0)  # the resumed run writes the third again
    writer.append("llm_calls", [r for r in run.rows["llm_calls"] if r["episode_id"] not in finished])
    writer.append("episodes", run.rows["episodes"][2:])
    writer.close()
    calls = pl.read_parquet(tmp_path / "llm_calls" / "*.parquet")
    assert sorted(calls["call_id"]) == sorted(r["call_id"] for r in run.rows["llm_calls"])
    assert pl.read_parquet(tmp_path / "interrupted_calls" / "*.parquet").height == 1
    assert pl.read_parquet(tmp_path / "episodes" / "*.parquet").height == 3


def test_parts_of_another_schema_are_left_as_they_are(tmp_path):
    old = tmp_path / "llm_calls"
    old.mkdir()
    pq.write_table(pa.table({"call_id": ["old"]}), old / "part-old-000000.parquet")
    writer = TableWriter(tmp_path, flush_interval_s=0)
    writer.append("llm_calls", [call_row(0)])
    writer.close()
    assert len(list(old.glob("*.parquet"))) == 2


def test_parts_written_before_a_column_was_added_are_read_and_compacted_with_nulls_there(tmp_path):
    """A run resumed by a newer harness: its older parts lack the columns added since. Readers see
    one table meanwhile, and the close leaves one file of today's schema, nulls in the old rows."""
    from tests.conftest import run_variant

    rows = run_variant("env=gsm8k", "env.path=tests/data/datasets/gsm8k.jsonl", "stream.num_tasks=3",
                       "stream.tuning_size=0").rows["episodes"]
    assert all(json.loads(row["task_metadata"])["row"] in range(4) for row in rows)
    schema = TABLES["episodes"].arrow_schema()
    older = schema.remove(schema.get_field_index("task_metadata")).with_metadata(
        {b"harness.schema_version": b"6", b"harness.table": b"episodes"})
    (tmp_path / "episodes").mkdir()
    written = pa.Table.from_pylist(
        [{k: v for k, v in row.items() if k != "task_metadata"} for row in rows[:2]], schema=older)
    pq.write_table(written, tmp_path / "episodes" / "part-older-000000.parquet")
    writer = TableWriter(tmp_path, flush_interval_s=0)
    writer.append("episodes", rows[2:])
    meanwhile = read_table(tmp_path, "episodes").sort("stream_position")
    assert meanwhile["task_metadata"].to_list() == [None, None, rows[2]["task_metadata"]]
    writer.close()
    [compacted] = table_files(tmp_path / "episodes")
    assert pq.read_schema(compacted).remove_metadata().equals(schema.remove_metadata())
    assert pq.read_schema(compacted).metadata[b"harness.schema_version"] == SCHEMA_VERSION.encode()
    after = pl.read_parquet(tmp_path / "episodes" / "*.parquet").sort("stream_position")
    assert after.drop("task_metadata").equals(meanwhile.drop("task_metadata"))
    assert after["task_metadata"].to_list() == [None, None, rows[2]["task_metadata"]]


def test_a_part_whose_column_changed_its_type_is_left_as_it_is(tmp_path):
    schema = TABLES["llm_calls"].arrow_schema()
    row = call_row(0)
    changed = schema.set(schema.get_field_index("prompt_tokens"), pa.field("prompt_tokens", pa.string()))
    (tmp_path / "llm_calls").mkdir()
    pq.write_table(pa.Table.from_pylist([{**row, "prompt_tokens": "10"}], schema=changed),
                   tmp_path / "llm_calls" / "part-older-000000.parquet")
    writer = TableWriter(tmp_path, flush_interval_s=0)
    writer.append("llm_calls", [call_row(1)])
    writer.close()
    assert len(table_files(tmp_path / "llm_calls")) == 2


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    """Two job directories of a sweep, as `-m variant=reflexion variant.max_attempts=1,3` lays them out."""
    from tests.tables.test_summary import sweep

    root = tmp_path_factory.mktemp("sweep")
    sweep(root, ("variant=reflexion", "variant.max_attempts=1"),
          ("variant=reflexion", "variant.max_attempts=3"))
    (root / "0" / ".hydra").mkdir()
    (root / "0" / ".hydra" / "config.yaml").write_text("seed: 0\n")
    return str(root)


def test_a_sweep_directory_is_not_a_dataset_of_one_table(sweep_dir):
    with pytest.raises(pa.ArrowInvalid):
        ds.dataset(sweep_dir).to_table()
    mixed = ds.dataset(sweep_dir, format="parquet", exclude_invalid_files=True)
    assert "variant" not in mixed.schema.names  # every table, read with the first file's schema


def test_the_readmes_sweep_one_liners_read_every_job(sweep_dir):
    sweep = sweep_dir
    episodes = pl.read_parquet(f"{sweep}/*/episodes/*.parquet")
    assert episodes.height == 12
    rows = duckdb.sql(f"select variant, avg(success::int) from '{sweep}/*/episodes/*.parquet' group by all")
    assert [r[0] for r in rows.fetchall()] == ["reflexion"]
    table = ds.dataset(sorted(glob.glob(f"{sweep}/*/episodes/*.parquet"))).to_table()
    assert table.num_rows == 12 and isinstance(table.to_pandas(), pd.DataFrame)
    runs = pl.read_parquet(f"{sweep}/*/runs/*.parquet")
    joined = pl.read_parquet(f"{sweep}/*/episodes/*.parquet").join(
        runs.select("run_id", "job", "settings"), on="run_id").with_columns(
        max_attempts=pl.col("settings").str.json_path_match("$['variant.max_attempts']"))
    assert sorted(joined.group_by("max_attempts", "job").len().rows()) == [("1", 0, 6), ("3", 1, 6)]
    by_sql = duckdb.sql(f"""select json_extract(r.settings, '$."variant.max_attempts"') as max_attempts,
                            avg(e.success::int) from '{sweep}/*/episodes/*.parquet' e
                            join '{sweep}/*/runs/*.parquet' r using (run_id) group by all""")
    assert sorted(json.loads(str(r[0])) for r in by_sql.fetchall()) == [1, 3]


def test_the_readmes_one_run_one_liners_work(sweep_dir):
    run = f"{sweep_dir}/0"
    assert len(ds.dataset(f"{run}/episodes").to_table().to_pandas()) == 6
    assert pl.read_parquet(f"{run}/episodes/*.parquet").to_pandas().shape[0] == 6
    query = f"select variant, avg(success::int) from '{run}/episodes/*.parquet' group by all"
    assert duckdb.sql(query).fetchall()[0][0] == "reflexion"
