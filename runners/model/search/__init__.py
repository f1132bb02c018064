"""Which configs a job measures: a search strategy, one module a strategy, chosen by the config group
`search`, under budgets.

Search runs inside the job, on the trials runners/model/space.py planned (constraints already applied,
so a pruned config never reaches a compiler), and feeds the same scheduler, store, W&B runs and export
as a grid. Each conf/search/<name>.yaml names a Strategy class (`_target_`) with the settings every
strategy takes and its own under `settings` (the class declares them in `defaults`: the schema need not
know them); `search=<name>` selects one, `search._target_=pkg.mod.Class` any other. The built-in ones:
guided.py (the default), grid.py, random.py, optuna.py; simulate.py runs any of them on a space of
record. The same seed and budget give the same configs (for optuna and guided: as long as the measured
values repeat)."""
from __future__ import annotations

import importlib
from collections import defaultdict
from typing import Optional

from triton_sweep.model.trial import TRITON_PROVIDER, ConfigError, Trial


class Strategy:
    """Which of the planned trials a job measures, batch by batch (module docstring). `defaults`: the
    strategy's own settings (`search.settings`) and their values when the config leaves them out.

    A strategy is asked for the next trials (`ask`, [] when done) and told each one's outcome (`tell`),
    for trials the store already held too. One that decides up front defines `choose` alone: the configs
    of one (shape, dtype) to measure, in order; the base class hands them all out in one batch.
    - budget_trials counts the kernel's configs measured per (shape, dtype); baselines always run.
    - budget_s stops handing out new trials once the job's search has run that long (the scheduler's
      deadline); trials not started by then are not run and the job says how many.
    - seed: the strategy's randomness; batch: the configs asked per round, by a strategy that asks in
      rounds.
    A `pipelined` strategy is asked again as results come in (whenever no config waits for a compile
    process), its trials in flight not told yet: it hands out what it can choose without them, [] for
    now where nothing; any other is asked once all it handed out is told."""

    defaults: dict = {}
    pipelined = False

    def __init__(self, trials: list[Trial], budget_trials: Optional[int] = None, seed: int = 0,
                 batch: int = 8, settings: Optional[dict] = None):
        if budget_trials is not None and budget_trials < 1:
            raise ConfigError(f"search.budget_trials: {budget_trials} must be >= 1 (or null: no limit)")
        if batch < 1:
            raise ConfigError(f"search.batch: {batch} must be >= 1")
        for name in settings or {}:
            if name not in self.defaults:
                raise ConfigError(f"search.settings.{name}: not a setting of {type(self).__name__} "
                                  f"(its settings: {', '.join(self.defaults) or 'none'})")
        self.budget, self.seed, self.batch = budget_trials, seed, batch
        self.settings = {**self.defaults, **(settings or {})}
        self.baselines = [t for t in trials if t.provider != TRITON_PROVIDER]
        self.groups: dict[tuple, list[Trial]] = defaultdict(list)  # (shape, dtype) -> its configs, in order
        for trial in trials:
            if trial.provider == TRITON_PROVIDER:
                self.groups[trial.shape, trial.dtype].append(trial)
        self._passing = {key: sum(not t.pruned_reason for t in group) for key, group in self.groups.items()}
        self._handed_out = False

    def ask(self) -> list[Trial]:
        """The trials to run next; [] when the search is done. By default the whole plan in one batch:
        each (shape, dtype)'s `choose`, then the baselines."""
        if self._handed_out:
            return []
        self._handed_out = True
        chosen = [t for index, trials in enumerate(self.groups.values()) for t in self.choose(index, trials)]
        return chosen + self.baselines

    @property
    def decides_up_front(self) -> bool:
        """Whether the first `ask` is the whole plan (the base class's ask: each group's `choose`), so a
        dry run can name every trial; a strategy that asks in rounds decides by what it measures."""
        return type(self).ask is Strategy.ask

    def choose(self, index: int, trials: list[Trial]) -> list[Trial]:
        """The trials of one (shape, dtype) to run, in order, for a strategy that decides up front; index:
        the group's place in the plan (a seed of its own)."""
        raise NotImplementedError(f"{type(self).__name__} defines neither choose nor ask")

    def tell(self, trial: Trial, result: dict) -> None:
        """The outcome of a trial `ask` handed out (its row: `status`, `p50_us`, ...); a strategy that
        decides up front learns nothing from it."""

    def planned(self, trial: Trial) -> Optional[int]:
        """How many configs of the trial's (shape, dtype) pass the constraints: what a search measures "of"
        (a row's planned_configs); None for a baseline."""
        return self._passing[trial.shape, trial.dtype] if trial.provider == TRITON_PROVIDER else None

    def said(self) -> list[str]:
        """What the job prints at the end of its trials: one line per (shape, dtype), for a strategy that
        decides where to stop (how many configs it measured of how many, and why); [] by default."""
        return []

    def within_budget(self, trials: list[Trial]) -> list[Trial]:
        return trials if self.budget is None else trials[: self.budget]


def load_strategy(conf, trials: list[Trial]) -> Strategy:
    """The Strategy `search._target_` names ("pkg.module.Class"), made with `conf`'s settings (a
    composed `search` node). The strategy's module is imported here, so only the chosen one's imports
    (Optuna) are paid."""
    from omegaconf import OmegaConf

    target = conf["_target_"]
    module, _, name = target.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as error:
        raise ConfigError(f"search._target_: {target!r} cannot be imported ({error})") from None
    if not (isinstance(found, type) and issubclass(found, Strategy)):
        raise ConfigError(f"search._target_: {target!r} is not a Strategy (runners/model/search)")
    return found(trials, budget_trials=conf.budget_trials, seed=conf.seed, batch=conf.batch,
                 settings=OmegaConf.to_container(conf.settings, resolve=True))
