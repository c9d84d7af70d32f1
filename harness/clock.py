"""The harness's one wall clock: every timestamp it writes is timezone-aware UTC."""

from __future__ import annotations

import datetime as dt


def utc_now() -> dt.datetime:
    """Now, in UTC (Parquet stores `timestamp[us, UTC]`; a naive time would be read as local)."""
    return dt.datetime.now(dt.UTC)
