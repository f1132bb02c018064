"""guided: a search that learns across the (shape, dtype)s of one sweep. A (shape, dtype) with few configs
(exhaustive_below) is measured whole. Elsewhere, each round asks of every (shape, dtype) still searching
with fewer than `batch` configs in flight (the job asks again as each result comes: `pipelined`):
1. the neighbours of its best (each meta-parameter one step up or down) not yet measured: the polish;
2. at its start, the best configs of the (shape, dtype)s measured so far, nearest shape first;
3. the configs a surrogate predicts fastest, optimistically: scikit-learn's extra trees over the
   meta-parameters and the shape (log2), fitted on every row of the sweep, target the log of how much
   slower than its (shape, dtype)'s best a config ran; optimism: the mean over trees less `optimism`
   standard deviations. The first (shape, dtype) of a sweep starts from a seeded sample of `initial`.
A (shape, dtype) stops when its best's neighbours are measured and no unmeasured config is predicted
faster than its best, optimism included, and none is in flight; the reason is kept (`stop_reasons`)
and printed by the job. Every (shape, dtype) asks in the same round: the compile pool gets many configs.
"""
from __future__ import annotations

import math
import random
from typing import Optional

import numpy as np

from triton_sweep.model.search import Strategy
from triton_sweep.model.trial import TRITON_PROVIDER, Trial

REFIT = 0.05  # the share of new rows that makes the surrogate fitted again
FAILED_SLOWDOWN = 4.0  # a config that failed is taught as this many times slower than the best


class Guided(Strategy):
    pipelined = True
    defaults = {"exhaustive_below": 200, "initial": 16, "transfer": 8, "optimism": 1.0, "trees": 64}

    def __init__(self, trials: list[Trial], **common):
        super().__init__(trials, **common)
        self.names = sorted({name for group in self.groups.values() for t in group for name in t.config})
        self.steps = {name: sorted({t.config[name] for g in self.groups.values() for t in g})
                      for name in self.names}
        self.dtypes = sorted({dtype for _, dtype in self.groups})
        self.valid = {key: [t for t in group if not t.pruned_reason] for key, group in self.groups.items()}
        self.index = {key: {_frozen(t.config): i for i, t in enumerate(valid)}
                      for key, valid in self.valid.items()}
        self.features = {key: self._features(valid) for key, valid in self.valid.items()}
        self.asked = {key: np.zeros(len(valid), bool) for key, valid in self.valid.items()}
        self.measured: dict[tuple, dict[int, Optional[float]]] = {key: {} for key in self.groups}  # -> p50
        self.stop_reasons: dict[tuple, str] = {}
        self._first = True
        self._model, self._fitted_on = None, 0  # the last model fitted, and on how many rows
        self._predicted: dict[tuple, tuple] = {}  # (shape, dtype) -> (model, its configs' predictions)

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
                batch += self._hand_out(key, range(len(self.within_budget(self.valid[key]))))
                self.stop_reasons[key] = f"all {len(self.valid[key])} configs measured (exhaustive_below)"
        lead = [] if self.stop_reasons else searching[:1]  # the first leads alone until one has stopped
        batch += self._round(lead)
        if self.stop_reasons:
            batch += self._round([key for key in searching if key not in lead])
        return batch

    def _round(self, keys: list[tuple]) -> list[Trial]:
        """The next configs of each of `keys` with fewer than `batch` in flight (asked, not told yet: the
        job asks again as results come: `pipelined`), from one model fitted for them all, its predictions
        made at once."""
        keys = [key for key in keys if self._in_flight(key) < self.batch]
        if not keys:
            return []  # no fit for nothing
        model = self._fit()
        predicted = self._predict(model, keys)
        batch = []
        for index, key in enumerate(keys):
            unmeasured = np.flatnonzero(~self.asked[key])
            chosen = self._choose(index, key, unmeasured,
                                  predicted[key][unmeasured] if key in predicted else None)
            batch += self._hand_out(key, chosen)
        return batch

    def _in_flight(self, key: tuple) -> int:
        """How many configs of `key` were handed out and not told yet (the job asks again as the compile
        pool runs dry: `pipelined`)."""
        return int(self.asked[key].sum()) - len(self.measured[key])

    def _choose(self, index: int, key: tuple, unmeasured: np.ndarray, optimistic) -> list[int]:
        """The next configs (indices into self.valid[key]) of one (shape, dtype) still searching, or []
        with its stop reason kept. index: its place in the round (the first starts blind where nothing
        is known); optimistic: the model's prediction for each of `unmeasured`, None without a model."""
        measured, flying = self.measured[key], self._in_flight(key)
        left = self.batch - flying if self.budget is None else min(self.batch - flying,
                                                                   self.budget - len(measured) - flying)
        if left <= 0 or not len(unmeasured):
            if not flying:
                self.stop_reasons[key] = (f"budget_trials={self.budget} measured" if len(unmeasured)
                                          else f"all {len(self.valid[key])} configs measured")
            return []
        ok = {i: p50 for i, p50 in measured.items() if p50 is not None}
        best = min(ok, key=ok.get) if ok else None
        chosen = self._polish(key, best) if best is not None else []
        if not measured and optimistic is not None and not flying:
            chosen += self._transferred(key)
        if optimistic is None:
            count = left if measured else max(left, min(self.settings["initial"], self.budget or math.inf))
            return chosen + (self._sample(unmeasured, count) if index == 0 and not flying else [])
        if best is not None and not chosen and optimistic.min() >= 0:  # the polish is done, too
            if not flying:  # what is in flight may move the best
                self.stop_reasons[key] = ("no unmeasured config predicted faster than the best "
                                          f"({ok[best]:.4g} us)")
            return []
        chosen = list(dict.fromkeys(chosen))[:left]
        ranked = (int(i) for i in unmeasured[np.argsort(optimistic, kind="stable")])
        return chosen + [i for i in ranked if i not in chosen][: left - len(chosen)]

    def _hand_out(self, key: tuple, chosen) -> list[Trial]:
        fresh = [i for i in chosen if not self.asked[key][i]]
        self.asked[key][fresh] = True
        return [self.valid[key][i] for i in fresh]

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
            i = self.index[key][_frozen(trial.config)]
            self.asked[key][i] = True  # told of a row the store held, too
            self.measured[key][i] = result.get("p50_us") if result.get("status") == "ok" else None

    # --- where candidates come from ------------------------------------------------------------------
    def _sample(self, unmeasured: np.ndarray, count: int) -> list[int]:
        """A seeded sample: how the first (shape, dtype) of a sweep starts, with nothing known."""
        pool = [int(i) for i in unmeasured]
        random.Random(f"{self.seed}:{int(sum(a.sum() for a in self.asked.values()))}").shuffle(pool)
        return pool[:count]

    def _polish(self, key: tuple, best: int) -> list[int]:
        """The configs one meta-parameter one step from `best`, not yet asked, that pass the constraints."""
        config, near = self.valid[key][best].config, []
        for name in self.names:
            steps = self.steps[name]
            at = steps.index(config[name])
            for other in steps[max(at - 1, 0): at + 2]:
                i = self.index[key].get(_frozen({**config, name: other}))
                if i is not None and not self.asked[key][i]:
                    near.append(i)
        return near

    def _transferred(self, key: tuple) -> list[int]:
        """The best configs of the (shape, dtype)s measured so far, nearest first, that run at `key`."""
        ranked = []
        for other, rows in self.measured.items():
            done = sorted((p50, i) for i, p50 in rows.items() if p50 is not None and other != key)
            distance = _distance(key, other)
            ranked += [(rank + distance, self.valid[other][i].config)
                       for rank, (_, i) in enumerate(done[: self.settings["transfer"]])]
        chosen = []
        for _, config in sorted(ranked, key=lambda item: item[0]):
            i = self.index[key].get(_frozen(config))
            if i is not None and not self.asked[key][i] and i not in chosen:
                chosen.append(i)
        return chosen[: self.settings["transfer"]]

    # --- the surrogate -------------------------------------------------------------------------------
    def _features(self, trials: list[Trial]) -> np.ndarray:
        rows = [[_log2(t.config[name]) for name in self.names] + [_log2(size) for size in t.shape]
                + [self.dtypes.index(t.dtype)] for t in trials]
        return np.array(rows, dtype=float).reshape(len(trials), -1)

    def _fit(self):
        """The surrogate, fitted again once the rows told have grown by REFIT since the last fit: asked
        as each result comes, a sweep of thousands of rows would otherwise fit once a result."""
        from sklearn.ensemble import ExtraTreesRegressor

        told = sum(len(measured) for measured in self.measured.values())
        if self._model is not None and told < self._fitted_on * (1 + REFIT):
            return self._model
        rows, targets = [], []
        for key, measured in self.measured.items():
            best = min((p50 for p50 in measured.values() if p50 is not None), default=None)
            for i, p50 in measured.items() if best is not None else ():
                rows.append(self.features[key][i])
                targets.append(math.log(p50 / best) if p50 is not None else math.log(FAILED_SLOWDOWN))
        if not rows:
            return None
        model = ExtraTreesRegressor(n_estimators=self.settings["trees"], random_state=self.seed)
        self._model, self._fitted_on = model.fit(np.array(rows), np.array(targets)), told
        return self._model

    def _predict(self, model, keys: list[tuple]) -> dict:
        """Per (shape, dtype) of `keys`, every config's optimistic log slowdown against its best: the
        trees' mean less `optimism` standard deviations, predicted once a model (kept: _predicted), one
        prediction a tree for all the keys new to it. {} without a model."""
        if model is None:
            return {}
        new = [key for key in keys if self._predicted.get(key, (None,))[0] is not model]
        if new:
            every = np.concatenate([self.features[key] for key in new]).astype(np.float32)  # as trees read
            each = np.stack([tree.predict(every, check_input=False) for tree in model.estimators_])
            optimistic = each.mean(axis=0) - self.settings["optimism"] * each.std(axis=0)
            ends = np.cumsum([len(self.features[key]) for key in new])[:-1]
            self._predicted.update((key, (model, part)) for key, part in zip(new, np.split(optimistic, ends)))
        return {key: self._predicted[key][1] for key in keys}


def _frozen(config: dict) -> tuple:
    return tuple(sorted(config.items()))


def _log2(value) -> float:
    return math.log2(value) if value > 0 else float(value)


def _distance(key: tuple, other: tuple) -> float:
    """How far two (shape, dtype)s lie: log2 steps of their sizes, plus one for another dtype."""
    (shape, dtype), (other_shape, other_dtype) = key, other
    steps = sum(abs(_log2(max(a, 1)) - _log2(max(b, 1))) for a, b in zip(shape, other_shape))
    return steps + (dtype != other_dtype)
