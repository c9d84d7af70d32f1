"""What the bench's measurements share: the config they compose, a table's timestamps as Unix
seconds, and the markdown table every measurement prints its rows as."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from harness.config import HarnessConfig, compose_conf

ROOT = Path(__file__).resolve().parents[2]
"""The checkout: where the commands the bench measures run."""


def bench_settings(*overrides: str) -> HarnessConfig:
    """The real config (conf/) without the progress bar, the response cache or a tuning split, then
    `overrides`."""
    cfg = compose_conf("progress=false", "cache.enabled=false", "stream.tuning_size=0", *overrides)
    return HarnessConfig.from_dictconfig(cfg)


def unix(moment: dt.datetime) -> float:
    """A table's timestamp in Unix seconds (a naive one is read as UTC, which the harness writes)."""
    return (moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)).timestamp()


def cell(value: Any) -> str:
    """A table cell: a float to 3 significant digits (whole from 100 up), None empty."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def table(rows: list[dict[str, Any]]) -> str:
    """Rows as a markdown table: every key of any row is a column, in the order first seen; a row
    without a column's key leaves its cell empty."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(column)) for column in columns) + " |" for row in rows]
    return "\n".join(lines)
