"""A search strategy that is not built in, for the test that a new strategy is a class and a config node:
every `step`-th config that passes the constraints, from the last of the plan backwards (a setting of its
own, which the schema does not know).

    python -m runners.sweep search._target_=tests.search_plugin.Backwards +search.settings.step=3
"""
from __future__ import annotations

from runners.model.search import Strategy
from runners.model.trial import ConfigError, Trial


class Backwards(Strategy):
    defaults = {"step": 2}

    def __init__(self, trials: list[Trial], **common):
        super().__init__(trials, **common)
        if self.settings["step"] < 1:
            raise ConfigError(f"search.settings.step: {self.settings['step']} must be >= 1")

    def choose(self, index: int, trials: list[Trial]) -> list[Trial]:
        valid = [t for t in trials if not t.pruned_reason]
        return self.within_budget(valid[::-1][:: self.settings["step"]])
