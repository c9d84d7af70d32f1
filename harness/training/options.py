"""What every kind of weight update takes: its options (`supervised.SftOptions` and
`preference.DpoOptions` add their own and their defaults) and the examples it trains on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from harness.training.needs import require

T = TypeVar("T")


@dataclass(frozen=True)
class UpdateOptions:
    """What every kind of weight update takes (`supervised.SftOptions` and `preference.DpoOptions` add
    their own and their defaults)."""

    steps: int = 10
    learning_rate: float = 1e-3
    """AdamW's, constant over the steps (LoRA on a few examples learns at 1e-4 to 2e-3)."""
    max_examples: int = 32
    """The most recent examples trained on; older ones are left out."""
    seed: int = 0
    threads: int | None = 1
    """torch's threads during the update (None: torch's default); why 1: `accounting.torch_threads`."""


def trained_on(items: list[T], options: UpdateOptions, update: str, unit: str) -> list[T]:
    """The items `update` trains on: the `options.max_examples` most recent. It stops in one line where
    the train extra is missing (`needs.require`) or there is no item."""
    require(update)
    if not items:
        raise ValueError(f"{update} needs at least one {unit}")
    return items[-options.max_examples:]
