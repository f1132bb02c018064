"""grid: every config in plan order (pruned ones are recorded as pruned, with their reason); with
budget_trials, the first that many of the configs that pass the constraints."""
from __future__ import annotations

from triton_sweep.model.search import Strategy
from triton_sweep.model.trial import Trial


class Grid(Strategy):
    def choose(self, index: int, trials: list[Trial]) -> list[Trial]:
        pruned = [t for t in trials if t.pruned_reason]  # recorded with their reasons, outside the budget
        return pruned + self.within_budget([t for t in trials if not t.pruned_reason])
