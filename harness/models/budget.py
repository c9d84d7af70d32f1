"""The budget ledger: what an agent run has spent, enforced before a call is sent.

Caps count every purpose of the agent's (acting and all self-improvement overhead) and cached
answers at what they are billed; never the benchmark's grading (purpose grade), which its client
tallies on a ledger of its own with no cap (AgentModelClient.grading). A call is admitted while the
run is under its cap; calls already in flight when the cap is crossed still complete, so a run can
overshoot by at most those calls, and each call records how many of its run's calls were in flight
when it was admitted.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.config import BudgetSettings
from harness.tables.costs import add_costs
from harness.tables.records import Usage


def exhausted(budget: BudgetSettings, spent: Usage, trained: Training | None = None) -> str | None:
    """Why `spent` (the calls) and `trained` (a learner's updates) have used up `budget`, or None
    while they have not."""
    trained = trained or Training()
    tokens = spent.total_tokens + trained.tokens
    if budget.max_tokens is not None and tokens >= budget.max_tokens:
        return f"token budget spent ({tokens} >= {budget.max_tokens})"
    flops = add_costs(spent.flops, trained.flops)
    if budget.max_flops is not None and flops is None:
        return "FLOPs budget cannot be kept: a call's FLOPs are unknown (set model.parameters)"
    if budget.max_flops is not None and flops is not None and flops >= budget.max_flops:
        return f"FLOPs budget spent ({flops:.3g} >= {budget.max_flops:.3g})"
    cost = add_costs(spent.cost_usd, trained.cost_usd)
    if budget.max_cost_usd is not None and cost is None:  # never a cap that silently stops counting
        return "dollar budget cannot be kept: a call's cost is unknown (its model has no price)"
    if budget.max_cost_usd is not None and cost is not None and cost >= budget.max_cost_usd:
        return f"dollar budget spent ({cost:.4f} >= {budget.max_cost_usd})"
    return None


@dataclass(frozen=True)
class Training:
    """What a learner's weight updates spent (the `training` table's rows summed)."""

    tokens: int = 0
    cost_usd: float = 0.0
    flops: float | None = 0.0


class RunLedger:
    """One agent run's tally, kept beside the run (in its AgentModelClient): the only count of what
    the run has spent, so the gateway holds no per-run state and can be replicated."""

    def __init__(self, budget: BudgetSettings | None) -> None:
        self.budget = budget
        self.spent = Usage()
        self.trained = Training()
        self.in_flight = 0

    def exhausted(self) -> str | None:
        return exhausted(self.budget, self.spent, self.trained) if self.budget is not None else None

    def train(self, tokens: int, cost_usd: float, flops: float | None) -> None:
        """Count a weight update: its tokens, dollars and FLOPs go against the same caps as calls."""
        self.trained = Training(self.trained.tokens + tokens, self.trained.cost_usd + cost_usd,
                                add_costs(self.trained.flops, flops))

    def admit(self) -> int:
        """Count a call in flight; returns how many of the run's calls already were."""
        self.in_flight += 1
        return self.in_flight - 1

    def settle(self, usage: Usage) -> None:
        self.in_flight -= 1
        self.spent = self.spent + usage
