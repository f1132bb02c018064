"""optuna: one study per (shape, dtype) with a seeded TPE sampler over the space's keys; it asks `batch`
configs at a time (one compile and timing wave), is told each one's p50, and stops at budget_trials.
A proposal the constraints prune is told "pruned" and not counted; a repeat is told its earlier
value and not measured again.

Optuna's ask-and-tell is used rather than Hydra's Optuna sweeper: the sweeper makes every trial
a Hydra job, which would start a GPU worker and a compile pool per config and could not compile the
next configs while the GPU times the current ones. Optuna is imported when this strategy is made, never
by a sweep that does not use it.
"""
from __future__ import annotations

from typing import Optional

from triton_sweep.model.search import Strategy
from triton_sweep.model.trial import ConfigError, Trial

MAX_PROPOSALS_PER_TRIAL = 50  # proposals (pruned or repeated) allowed per trial of the budget


class Optuna(Strategy):
    def __init__(self, trials: list[Trial], **common):
        super().__init__(trials, **common)
        try:
            import optuna
        except ImportError as error:
            raise ConfigError(f"search._target_: optuna is not installed ({error}); "
                              "pip install optuna") from error
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._studies = {}
        for index, (key, group) in enumerate(self.groups.items()):
            sampler = optuna.samplers.TPESampler(seed=self.seed + index, constant_liar=True)
            self._studies[key] = {
                "study": optuna.create_study(direction="minimize", sampler=sampler),
                "by_config": {_config_key(t.config): t for t in group},
                "space": {name: sorted({t.config[name] for t in group}) for name in group[0].config},
                "measured": 0, "proposals": 0,
            }
        self._asked: dict[str, tuple] = {}  # trial key -> (group, optuna trial) awaiting its result
        self._values: dict[str, Optional[float]] = {}  # trial key -> p50 (None: failed) once told
        self._first = True

    def ask(self) -> list[Trial]:
        batch = list(self.baselines) if self._first else []
        self._first = False
        for key, trials in self.groups.items():
            batch += self._ask_group(key, trials)
        return batch

    def _ask_group(self, key: tuple, trials: list[Trial]) -> list[Trial]:
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
            trial = state["by_config"][_config_key(config)]
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


def _config_key(config: dict) -> tuple:
    return tuple(sorted(config.items()))
