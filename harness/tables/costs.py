"""Unknown cost: the one policy for dollars that may be missing.

A cost of None means unknown (a model with no price). A total over costs is unknown as soon as one
of them is: a sum that skipped it would understate the spend without saying so.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl


def add_costs(*costs: float | None) -> float | None:
    """The sum of `costs`; None when any of them is unknown."""
    return total_cost(costs)


def total_cost(costs: Iterable[float | None]) -> float | None:
    """The sum of `costs` (0.0 for none at all); None when any of them is unknown."""
    total = 0.0
    for cost in costs:
        if cost is None:
            return None
        total += cost
    return total


def known_sum(values: pl.Expr) -> pl.Expr:
    """`total_cost` as a polars aggregation (per group under `group_by`), for dollars or any count
    that may be unknown (cache-read tokens): null when any of `values` is null, else their sum."""
    # Imported here: processes that only add scalar costs (a gateway's usage sums) need not load polars.
    import polars as pl

    return pl.when(values.null_count() == 0).then(values.sum()).otherwise(None)
