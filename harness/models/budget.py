"""The budget ledger: what an agent run has spent, enforced before a call is sent.

Caps count every purpose (acting and all self-improvement overhead) and cached answers at what
they are billed. A call is admitted while the run is under its cap; calls already in flight when
the cap is crossed still complete, so a run can overshoot by at most those calls, and each call
records how many of its run's calls were in flight when it was admitted.
"""

from __future__ import annotations

from harness.config import BudgetSettings
from harness.tables.records import Usage


def exhausted(budget: BudgetSettings, spent: Usage) -> str | None:
    """Why `spent` has used up `budget`, or None while it has not."""
    if budget.max_tokens is not None and spent.total_tokens >= budget.max_tokens:
        return f"token budget spent ({spent.total_tokens} >= {budget.max_tokens})"
    cost = spent.cost_usd
    if budget.max_cost_usd is not None and cost is None:  # never a cap that silently stops counting
        return "dollar budget cannot be kept: a call's cost is unknown (its model has no price)"
    if budget.max_cost_usd is not None and cost is not None and cost >= budget.max_cost_usd:
        return f"dollar budget spent ({cost:.4f} >= {budget.max_cost_usd})"
    return None


class RunLedger:
    """One agent run's tally, kept beside the run (in its AgentModelClient): the only count of what
    the run has spent, so the gateway holds no per-run state and can be replicated."""

    def __init__(self, budget: BudgetSettings | None) -> None:
        self.budget = budget
        self.spent = Usage()
        self.in_flight = 0

    def exhausted(self) -> str | None:
        return exhausted(self.budget, self.spent) if self.budget is not None else None

    def admit(self) -> int:
        """Count a call in flight; returns how many of the run's calls already were."""
        self.in_flight += 1
        return self.in_flight - 1

    def settle(self, usage: Usage) -> None:
        self.in_flight -= 1
        self.spent = self.spent + usage
