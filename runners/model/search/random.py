"""random: a random order of the configs that pass the constraints, seeded; the first budget_trials."""
from __future__ import annotations

import random

from triton_sweep.model.search import Strategy
from triton_sweep.model.trial import Trial


class Random(Strategy):
    def choose(self, index: int, trials: list[Trial]) -> list[Trial]:
        valid = [t for t in trials if not t.pruned_reason]
        random.Random(f"{self.seed}:{index}").shuffle(valid)
        return self.within_budget(valid)
