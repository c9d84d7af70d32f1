"""The budget ledger: what each agent run has spent, enforced before a call is sent.

Caps count every purpose (acting and all self-improvement overhead) and cached answers at what
they are billed. A call is admitted while the run is under its cap; calls already in flight when
the cap is crossed still complete, so a run can overshoot by at most those calls, and each call
records how many of its run's calls were in flight when it was admitted.
"""

from __future__ import annotations

from collections import Counter

from harness.config import BudgetSettings
from harness.records import Usage


def exhausted(budget: BudgetSettings, spent: Usage) -> str | None:
    """Why `spent` has used up `budget`, or None while it has not."""
    if budget.max_tokens is not None and spent.total_tokens >= budget.max_tokens:
        return f"token budget spent ({spent.total_tokens} >= {budget.max_tokens})"
    cost = spent.cost_usd
    if budget.max_cost_usd is not None and cost is not None and cost >= budget.max_cost_usd:
        return f"dollar budget spent ({cost:.4f} >= {budget.max_cost_usd})"
    return None


class Ledger:
    def __init__(self) -> None:
        self.caps: dict[str, BudgetSettings] = {}
        self.spent: dict[str, Usage] = {}
        self.in_flight: Counter[str] = Counter()

    def set_cap(self, run_id: str, budget: BudgetSettings) -> None:
        self.caps[run_id] = budget
        self.spent.setdefault(run_id, Usage())

    def exhausted(self, run_id: str) -> str | None:
        budget = self.caps.get(run_id)
        return exhausted(budget, self.spent.get(run_id, Usage())) if budget is not None else None

    def admit(self, run_id: str) -> int:
        """Count a call in flight; returns how many of the run's calls already were."""
        already = self.in_flight[run_id]
        self.in_flight[run_id] += 1
        return already

    def settle(self, run_id: str, usage: Usage) -> None:
        self.in_flight[run_id] -= 1
        self.spent[run_id] = self.spent.get(run_id, Usage()) + usage
