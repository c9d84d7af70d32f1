"""The end-of-run summary, computed from the Parquet tables themselves (not from memory)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow.parquet as pq


def read_table(run_dir: Path, table: str) -> pl.DataFrame:
    files = sorted((run_dir / table).glob("*.parquet"))
    if not files:
        return pl.DataFrame()
    return pl.read_parquet(files)


def count_rows(run_dir: Path, table: str) -> int:
    files = sorted((run_dir / table).glob("*.parquet"))
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def summarize(episodes: pl.DataFrame) -> pl.DataFrame:
    """Per variant and seed, over the tasks of the stream (replay probes and tasks a spent budget
    left undone aside): episodes, success rate, tokens, dollars, p50 latency, errors, not attempted."""
    if episodes.is_empty():
        return pl.DataFrame()
    return (
        episodes.filter(~pl.col("probe"))
        .group_by("variant", "seed", "model")
        .agg(
            episodes=pl.col("attempted").sum(),
            not_attempted=(~pl.col("attempted")).sum(),
            success_rate=pl.col("success").filter(pl.col("attempted")).mean(),
            total_tokens=pl.col("total_tokens").sum(),
            cost_usd=pl.col("cost_usd").sum() if episodes["cost_usd"].null_count() == 0
            else pl.lit(None, dtype=pl.Float64),
            p50_latency_s=pl.col("latency_s").filter(pl.col("attempted")).median(),
            errors=(pl.col("error").is_not_null() & pl.col("attempted")).sum(),
        )
        .sort("variant", "seed")
    )


def format_summary(summary: pl.DataFrame) -> str:
    with pl.Config(tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True,
                   float_precision=3, tbl_rows=100, tbl_cols=20, tbl_width_chars=160,
                   fmt_str_lengths=60):
        return str(summary)
