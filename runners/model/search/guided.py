"""guided: a search that learns across the (shape, dtype)s of one sweep. A (shape, dtype) with few configs
(exhaustive_below) is measured whole. Elsewhere, each round asks of every (shape, dtype) still searching:
1. the neighbours of its best (each meta-parameter one step up or down) not yet measured: the polish;
2. at its start, the best configs of the (shape, dtype)s measured so far, nearest shape first;
3. the configs a surrogate predicts fastest, optimistically: scikit-learn's extra trees over the
   meta-parameters and the shape (log2), fitted on every row of the sweep, target the log of how much
   slower than its (shape, dtype)'s best a config ran; optimism: the mean over trees less `optimism`
   standard deviations. The first (shape, dtype) of a sweep starts from a seeded sample of `initial`.
A (shape, dtype) stops when its best's neighbours are measured and no unmeasured config is predicted
faster than its best, optimism included; the reason is kept (`stop_reasons`) and printed by the job.
Every (shape, dtype) asks in the same round, so one round hands the compile pool many configs.
"""
from __future__ import annotations

import math
import random

import numpy as np

from triton_sweep.model.search import Strategy
from triton_sweep.model.trial import TRITON_PROVIDER, Trial

FAILED_SLOWDOWN = 4.0  # a config that failed is taught as this many times slower than the best


class Guided(Strategy):
    defaults = {"exhaustive_below": 200, "initial": 16, "transfer": 8, "optimism": 1.0, "trees": 64}

    def __init__(self, trials: list[Trial], **common):
        super().__init__(trials, **common)
        self.names = sorted({name for group in self.groups.values() for t in group for name in t.config})
        self.steps = {name: sorted({t.config[name] for g in self.groups.values() for t in g})
                      for name in self.names}
        self.dtypes = sorted({dtype for _, dtype in self.groups})
        self.valid = {key: [t for t in group if not t.pruned_reason] for key, group in self.groups.items()}
        self.by_config = {key: {_frozen(t.config): t for t in group} for key, group in self.valid.items()}
        self.measured: dict[tuple, dict[str, tuple]] = {key: {} for key in self.groups}  # -> trial, p50
        self.asked: set[str] = set()
        self.stop_reasons: dict[tuple, str] = {}
        self._first = True

    # --- the rounds ----------------------------------------------------------------------------------
    def ask(self) -> list[Trial]:
        batch = []
        if self._first:
            self._first = False
            batch += [t for group in self.groups.values() for t in group if t.pruned_reason] + self.baselines
        open_groups = [key for key in self.groups if key not in self.stop_reasons]
        searching = [key for key in open_groups if len(self.valid[key]) > self.settings["exhaustive_below"]]
        for key in open_groups:
            if key not in searching:  # small: measured whole, like grid
                batch += self._hand_out(self.within_budget(self.valid[key]))
                self.stop_reasons[key] = f"all {len(self.valid[key])} configs measured (exhaustive_below)"
        model = self._fit() if searching else None
        for index, key in enumerate(searching):
            if index and not self.stop_reasons:
                break  # the first to search leads alone until one (shape, dtype) has stopped
            batch += self._hand_out(self._choose(index, key, model))
        return batch

    @property
    def decides_up_front(self) -> bool:
        """Where every (shape, dtype) is small, the first ask is the whole plan, as grid's."""
        return all(len(valid) <= self.settings["exhaustive_below"] for valid in self.valid.values())

    def said(self) -> list[str]:
        """Per (shape, dtype) that searched (not measured whole): how many configs were measured of how
        many, and why it stopped."""
        return [f"{'x'.join(map(str, shape))} {dtype}: {len(self.measured[shape, dtype])} of "
                f"{len(self.valid[shape, dtype])} configs measured; {reason}"
                for (shape, dtype), reason in self.stop_reasons.items()
                if len(self.valid[shape, dtype]) > self.settings["exhaustive_below"]]

    def tell(self, trial: Trial, result: dict) -> None:
        key = (trial.shape, trial.dtype)
        if trial.provider == TRITON_PROVIDER and not trial.pruned_reason:
            p50 = result.get("p50_us") if result.get("status") == "ok" else None
            self.measured[key][trial.key] = (trial, p50)

    def _hand_out(self, trials: list[Trial]) -> list[Trial]:
        fresh = [t for t in trials if t.key not in self.asked]
        self.asked.update(t.key for t in fresh)
        return fresh

    def _choose(self, index: int, key: tuple, model) -> list[Trial]:
        """The next configs of one (shape, dtype) still searching, or [] with its stop reason kept.
        index: its place among those searching (the first starts blind when nothing is known)."""
        valid, measured = self.valid[key], self.measured[key]
        if any(t.key in self.asked and t.key not in measured for t in valid):
            return []  # its last round is not told yet
        left = self.batch if self.budget is None else min(self.batch, self.budget - len(measured))
        unmeasured = [t for t in valid if t.key not in self.asked]
        if left <= 0 or not unmeasured:
            self.stop_reasons[key] = (f"budget_trials={self.budget} measured" if unmeasured
                                      else f"all {len(valid)} configs measured")
            return []
        best = min(((t, p50) for t, p50 in measured.values() if p50 is not None), key=lambda r: r[1],
                   default=None)
        chosen = self._polish(key, best[0]) if best else []
        if not measured and model is not None:
            chosen += self._transferred(key)
        if model is None:
            return chosen + (self._sample(unmeasured, left if measured else max(left, self._first_count()))
                             if index == 0 else [])
        optimistic = self._predict(model, unmeasured)
        if best is not None and not chosen and optimistic.min() >= 0:
            self.stop_reasons[key] = f"no unmeasured config predicted faster than the best ({best[1]:.4g} us)"
            return []
        chosen = list({t.key: t for t in chosen}.values())[:left]
        taken = {t.key for t in chosen}
        ranked = (unmeasured[i] for i in np.argsort(optimistic, kind="stable"))
        return chosen + [t for t in ranked if t.key not in taken][: left - len(chosen)]

    # --- where candidates come from ------------------------------------------------------------------
    def _first_count(self) -> int:
        return self.settings["initial"] if self.budget is None else min(self.budget, self.settings["initial"])

    def _sample(self, unmeasured: list[Trial], count: int) -> list[Trial]:
        """A seeded sample: how the first (shape, dtype) of a sweep starts, with nothing known."""
        pool = list(unmeasured)
        random.Random(f"{self.seed}:{len(self.asked)}").shuffle(pool)
        return pool[:count]

    def _polish(self, key: tuple, best: Trial) -> list[Trial]:
        """The configs one meta-parameter one step from `best`, not yet asked, that pass the constraints."""
        near = []
        for name in self.names:
            steps = self.steps[name]
            at = steps.index(best.config[name])
            for other in steps[max(at - 1, 0): at + 2]:
                trial = self.by_config[key].get(_frozen({**best.config, name: other}))
                if trial is not None and trial.key not in self.asked:
                    near.append(trial)
        return near

    def _transferred(self, key: tuple) -> list[Trial]:
        """The best configs of the (shape, dtype)s measured so far, nearest first, that run at `key`."""
        ranked = []
        for other, rows in self.measured.items():
            done = sorted(((p50, t.config) for t, p50 in rows.values() if p50 is not None and other != key),
                          key=lambda item: item[0])
            distance = _distance(key, other)
            ranked += [(rank + distance, config)
                       for rank, (_, config) in enumerate(done[: self.settings["transfer"]])]
        chosen = {}
        for _, config in sorted(ranked, key=lambda item: item[0]):
            trial = self.by_config[key].get(_frozen(config))
            if trial is not None and trial.key not in self.asked:
                chosen.setdefault(trial.key, trial)
        return list(chosen.values())[: self.settings["transfer"]]

    # --- the surrogate -------------------------------------------------------------------------------
    def _features(self, trials: list[Trial]) -> np.ndarray:
        return np.array([[_log2(t.config[name]) for name in self.names] + [_log2(size) for size in t.shape]
                         + [self.dtypes.index(t.dtype)] for t in trials], dtype=float)

    def _fit(self):
        from sklearn.ensemble import ExtraTreesRegressor

        trials, targets = [], []
        for rows in self.measured.values():
            best = min((p50 for _, p50 in rows.values() if p50 is not None), default=None)
            for trial, p50 in rows.values() if best is not None else ():
                trials.append(trial)
                targets.append(math.log(p50 / best) if p50 is not None else math.log(FAILED_SLOWDOWN))
        if not trials:
            return None
        model = ExtraTreesRegressor(n_estimators=self.settings["trees"], min_samples_leaf=1,
                                    random_state=self.seed)
        return model.fit(self._features(trials), np.array(targets))

    def _predict(self, model, trials: list[Trial]) -> np.ndarray:
        """Each trial's optimistic log slowdown against its (shape, dtype)'s best: the trees' mean less
        `optimism` standard deviations."""
        features = self._features(trials)
        each = np.stack([tree.predict(features) for tree in model.estimators_])
        return each.mean(axis=0) - self.settings["optimism"] * each.std(axis=0)


def _frozen(config: dict) -> tuple:
    return tuple(sorted(config.items()))


def _log2(value) -> float:
    return math.log2(value) if value > 0 else float(value)


def _distance(key: tuple, other: tuple) -> float:
    """How far two (shape, dtype)s lie: log2 steps of their sizes, plus one for another dtype."""
    (shape, dtype), (other_shape, other_dtype) = key, other
    steps = sum(abs(_log2(max(a, 1)) - _log2(max(b, 1))) for a, b in zip(shape, other_shape))
    return steps + (dtype != other_dtype)
