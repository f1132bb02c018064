"""Which configs a job measures: the whole grid, a seeded random sample of it, or Optuna, under budgets.

Search runs inside the job, on the trials runners/engine/trials.py planned (constraints already applied, so a
pruned config never reaches a compiler), and feeds the same scheduler, store, W&B runs and export as
a grid. Optuna's ask-and-tell is used rather than Hydra's Optuna sweeper: the sweeper makes every trial
a Hydra job, which would start a GPU worker and a compile pool per config and could not compile the
next configs while the GPU times the current ones.

- grid: every config in plan order (pruned ones are recorded as pruned, with their reason).
- random: a random order of the configs that pass the constraints, seeded; the first budget_trials.
- optuna: one study per (shape, dtype) with a seeded TPE sampler over the space's keys; it asks `batch`
  configs at a time (one compile and timing wave), is told each one's p50, and stops at budget_trials.
  A proposal the constraints prune is told "pruned" and not counted; a repeat is told its earlier
  value and not measured again.
- budget_trials counts the kernel's configs measured per (shape, dtype); baselines always run.
  budget_s stops handing out new trials once the job's search has run that long (the scheduler's
  deadline); trials not started by then are not run and the job says how many.
The same seed and budget give the same configs (for optuna: as long as the measured values repeat).
"""
from __future__ import annotations

import random
from collections import defaultdict
from typing import Optional

from runners.engine.trial import TRITON_PROVIDER, ConfigError, Trial

METHODS = ("grid", "random", "optuna")
MAX_PROPOSALS_PER_TRIAL = 50  # optuna: proposals (pruned or repeated) allowed per trial of the budget


def _group_key(trial: Trial) -> tuple:
    return trial.shape, trial.dtype


class Search:
    """next_batch() -> the trials to run next ([] when done); tell(trial, result) after each."""

    def __init__(self, method: str, trials: list[Trial], budget_trials: Optional[int], seed: int, batch: int):
        if method not in METHODS:
            raise ConfigError(f"search.method: {method!r} is not one of {METHODS}")
        if budget_trials is not None and budget_trials < 1:
            raise ConfigError(f"search.budget_trials: {budget_trials} must be >= 1 (or null: no limit)")
        if batch < 1:
            raise ConfigError(f"search.batch: {batch} must be >= 1")
        self.method, self.budget, self.seed, self.batch = method, budget_trials, seed, batch
        self.baselines = [t for t in trials if t.provider != TRITON_PROVIDER]
        self.groups: dict[tuple, list[Trial]] = defaultdict(list)
        for trial in trials:
            if trial.provider == TRITON_PROVIDER:
                self.groups[_group_key(trial)].append(trial)
        self._first = True
        self._studies = {}
        self._asked: dict[str, tuple] = {}  # trial key -> (group, optuna trial) awaiting its result
        self._values: dict[str, Optional[float]] = {}  # trial key -> p50 (None: failed) once told
        if method == "optuna":
            self._start_optuna()

    def next_batch(self) -> list[Trial]:
        if self.method != "optuna":
            if not self._first:
                return []
            self._first = False
            return self._whole_plan() + self.baselines
        batch = self.baselines if self._first else []
        self._first = False
        for key, trials in self.groups.items():
            batch += self._ask(key, trials)
        return batch

    def _whole_plan(self) -> list[Trial]:
        chosen = []
        for index, trials in enumerate(self.groups.values()):
            valid = [t for t in trials if not t.pruned_reason]
            if self.method == "grid":
                chosen += [t for t in trials if t.pruned_reason]  # recorded with their reasons
            else:
                random.Random(f"{self.seed}:{index}").shuffle(valid)
            chosen += valid if self.budget is None else valid[: self.budget]
        return chosen

    # --- optuna ---------------------------------------------------------------------------------
    def _start_optuna(self) -> None:
        try:
            import optuna
        except ImportError as error:
            raise ConfigError(f"search.method: optuna is not installed ({error}); "
                              "pip install optuna") from error
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        for index, (key, trials) in enumerate(self.groups.items()):
            sampler = optuna.samplers.TPESampler(seed=self.seed + index, constant_liar=True)
            self._studies[key] = {
                "study": optuna.create_study(direction="minimize", sampler=sampler),
                "by_config": {self._config_key(t.config): t for t in trials},
                "space": {name: sorted({t.config[name] for t in trials}) for name in trials[0].config},
                "measured": 0, "proposals": 0,
            }

    @staticmethod
    def _config_key(config: dict) -> tuple:
        return tuple(sorted(config.items()))

    def _ask(self, key: tuple, trials: list[Trial]) -> list[Trial]:
        from optuna.trial import TrialState

        state = self._studies[key]
        limit = len(trials) if self.budget is None else min(self.budget, len(trials))
        wanted = min(self.batch, limit - state["measured"])
        batch = []
        while len(batch) < wanted and state["proposals"] < MAX_PROPOSALS_PER_TRIAL * limit:
            state["proposals"] += 1
            asked = state["study"].ask()
            config = {name: asked.suggest_categorical(name, values)
                      for name, values in state["space"].items()}
            trial = state["by_config"][self._config_key(config)]
            if trial.pruned_reason:
                state["study"].tell(asked, state=TrialState.PRUNED)
            elif trial.key in self._values or trial.key in self._asked:
                if trial.key in self._values and self._values[trial.key] is not None:
                    state["study"].tell(asked, self._values[trial.key])
                else:
                    state["study"].tell(asked, state=TrialState.FAIL)
            else:
                self._asked[trial.key] = (key, asked)
                batch.append(trial)
        state["measured"] += len(batch)
        return batch

    def tell(self, trial: Trial, result: dict) -> None:
        """The outcome of a trial this search handed out (any method; only optuna learns from it)."""
        from_optuna = self._asked.pop(trial.key, None)
        value = result.get("p50_us") if result.get("status") == "ok" else None
        self._values[trial.key] = value
        if from_optuna is None:
            return
        from optuna.trial import TrialState

        study = self._studies[from_optuna[0]]["study"]
        if value is None:
            study.tell(from_optuna[1], state=TrialState.FAIL)
        else:
            study.tell(from_optuna[1], value)
