"""The one line that says weight learning needs the `train` extra (harness/extras.py declares it)."""

from __future__ import annotations

from harness.config import ConfigError
from harness.extras import EXTRAS


class MissingTrainExtra(ConfigError):
    """Weight learning was asked for where the `train` extra is not installed."""


def require(who: str = "weight learning") -> None:
    """Stop in one line naming the extra where any of its modules is missing."""
    extra = EXTRAS["train"]
    if not extra.installed:
        raise MissingTrainExtra(f"{who} needs the {extra.name} extra: {extra.install}")
