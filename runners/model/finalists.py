"""Finalists: the top-K configs of each (shape, dtype) re-timed together, and the tie rule.

Screening times each config alone, seconds or minutes after the others, on whichever GPU was free: a
clock change or a neighbour between two configs shows up as a difference between them. The finalists
are timed again on one GPU, round-robin (one sample of each per round, the L2 flushed before every
call, the order rotated every round), so every finalist sees the same conditions.

Who: the top_k by screened p50 within screen_margin of the screened best (at least two). The tie rule
(stated in every finalist row's message): B ties the fastest A when the 95% interval of the median of the
paired differences B_r - A_r reaches down to tie_floor x p50(A); of A and its ties, the one chosen uses
the fewest resources (num_stages, then num_warps, then BLOCK product, then p50). How long they run
(`settled`, `group_rule`) and why the margin and the rule are so: CONTRIBUTING.md, "Design notes"."""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, NamedTuple, Optional, Sequence

import numpy as np

from triton_sweep.model.trial import TRITON_PROVIDER
from triton_sweep.measure.stop_rule import CLOCK_JITTER_S, StopRule, median_interval_and_step

if TYPE_CHECKING:  # pandas is heavy, and every spawned worker imports this module through triton_sweep.sweep
    import pandas as pd

def resource_key(config: dict) -> tuple:
    blocks = math.prod(v for k, v in config.items() if k.startswith("BLOCK"))
    return config.get("num_stages", 0), config.get("num_warps", 0), blocks


def decide(configs: list[dict], samples_us: list[Sequence[float]], tie_floor: float) -> list[dict]:
    """Rank, tie and choice for finalists measured round-robin (equal-length, round-paired samples).

    Returns one dict per finalist, in input order: rank (1 = lowest p50), tie (with the fastest),
    chosen, and a message saying why.
    """
    p50s, fastest, intervals = _against_fastest(samples_us)
    order = sorted(range(len(configs)), key=lambda i: p50s[i])
    floor_us = tie_floor * p50s[fastest]
    decisions = []
    for index in range(len(configs)):
        low, high, _ = intervals.get(index, (0.0, 0.0, 0.0))
        decisions.append({"rank": order.index(index) + 1, "tie": low <= floor_us, "low": low, "high": high})
    tied = [i for i in range(len(configs)) if decisions[i]["tie"]]
    chosen = min(tied, key=lambda i: (resource_key(configs[i]), p50s[i]))
    for index, decision in enumerate(decisions):
        decision["chosen"] = index == chosen
        low, high = (100 * decision.pop(k) / p50s[fastest] for k in ("low", "high"))
        relation = ("the fastest" if index == fastest else
                    f"{'ties' if decision['tie'] else 'slower than'} the fastest: median paired difference "
                    f"95% CI [{low:+.2f}%, {high:+.2f}%], tie floor {100 * tie_floor:.2f}%")
        decision["message"] = (f"finalist {decision['rank']} of {len(configs)} by p50, {relation}; "
                               f"{len(tied)} tied, {'chosen' if decision['chosen'] else 'not chosen'} "
                               "(fewest num_stages, num_warps, BLOCK product among the tied)")
    return decisions


def _against_fastest(samples_us: list[Sequence[float]]) -> tuple[list[float], int, dict]:
    """Each finalist's p50, the fastest's index (the first lowest p50), and for every other finalist the
    95% interval of the median of its round-paired differences from the fastest (the shorter list's
    rounds), widened at each end by the differences' clock step, and that step: (low, high, step)."""
    p50s = [float(np.median(s)) for s in samples_us]
    fastest = min(range(len(p50s)), key=lambda i: p50s[i])
    intervals = {}
    for index, samples in enumerate(samples_us):
        if index != fastest:
            n = min(len(samples), len(samples_us[fastest]))
            intervals[index] = median_interval_and_step(
                np.asarray(samples[:n]) - np.asarray(samples_us[fastest][:n]), jitter=CLOCK_JITTER_S * 1e6)
    return p50s, fastest, intervals


def settled(samples_us: list[Sequence[float]], tie_floor: float) -> bool:
    """Whether more rounds would leave every tie verdict as it is: for each finalist other than the
    fastest, the 95% interval of its paired differences from the fastest lies wholly above tie_floor x
    p50(fastest) (slower), or its upper end less the clock's widening of both ends is within it (tied:
    the lower end decide() reads cannot rise past it). Round-paired samples, as decide() takes them.

    Each block of rounds (a repetition) stops once every median is known to the rule's precision, or
    earlier, after its min_samples and min_time_s, once this holds on all the rounds so far. The test is
    repeated as the rounds come in, so a finalist whose true difference sits near the floor can be
    settled either way on a lucky stretch more often than 5% of the time: the rule's promise is the
    floor's, not the interval's level. The widening (the differences' clock step at each end; CUPTI
    reads 32 ns steps) is one more rounds never take away, hence its subtraction from the upper end."""
    p50s, fastest, intervals = _against_fastest(samples_us)
    floor_us = tie_floor * p50s[fastest]
    return all(low > floor_us or high - 2 * step <= floor_us for low, high, step in intervals.values())


def winners(rows: pd.DataFrame) -> pd.Series:
    """Index of the winning row of each shape of one (kernel, dtype)'s rows, by shape: the finalist
    chosen in the newest round of finalists where there was one, else the lowest p50 (the first row of
    it in the rows' order)."""
    chosen = rows[rows["chosen"].fillna(False).astype(bool)]
    winning = rows.groupby("shape", sort=False)["p50_us"].idxmin()
    winning.update(chosen.groupby("shape", sort=False)["id"].idxmax())  # a chosen finalist wins its shape
    return winning


def winning_records(rows: pd.DataFrame) -> dict:
    """shape -> the fields of its winning row (winners), as a dict: for readers of many shapes, whom a
    pandas row a shape would cost more than the rest of their work."""
    index = winners(rows)
    return dict(zip(index.index, rows.loc[index.to_numpy()].to_dict("records")))


def winner(rows: pd.DataFrame):
    """Index of the winning row of one (kernel, dtype, shape) (winners)."""
    (index,) = winners(rows)
    return index


class FinalistGroup(NamedTuple):
    trials: list  # the finalists of one (shape, dtype), then the baselines beside them
    # the seconds its screening's timer loops took, every ok trial's of the (shape, dtype) summed; None
    # where one of them has no screened row among the job's rows (screening_seconds)
    screening_s: Optional[float]


def finalist_groups(frame: pd.DataFrame, trials: list, measured_groups: set, top_k: int,
                    screen_margin: float) -> list[FinalistGroup]:
    """The trials to re-time, one group a (shape, dtype) this job measured: the top_k configs of ours by
    screened p50 (each trial's newest ok row of the job's rows in `frame`) among those within
    screen_margin of the best, and the runner-up wherever it is, then the baselines that were ok there;
    with the seconds their screening took (screening_seconds). None where top_k < 2 or a group would have
    fewer than 2 configs."""
    if top_k < 2 or not measured_groups:
        return []
    by_key = {t.key: t for t in trials}
    ok = frame[frame["status"] == "ok"].sort_values("id")
    screened = ok[ok["phase"] == "screen"].groupby("trial_key").tail(1)
    screened_s = dict(zip(screened["trial_key"], screened["measure_s"]))
    ok = ok.groupby("trial_key").tail(1)  # a trial's newest row
    ours = ok[ok["provider"] == TRITON_PROVIDER]
    groups = []
    for (shape, dtype), rows in ours.groupby(["shape", "dtype"], sort=False):
        ranked = rows.nsmallest(top_k, "p50_us")
        near = ranked[ranked["p50_us"] <= (1 + screen_margin) * ranked["p50_us"].iloc[0]]
        finalists = [by_key[k] for k in ranked["trial_key"].iloc[:max(len(near), 2)] if k in by_key]
        if len(finalists) >= 2 and (finalists[0].shape, finalists[0].dtype) in measured_groups:
            in_group = ok[(ok["shape"] == shape) & (ok["dtype"] == dtype)]
            beside = in_group[in_group["provider"] != TRITON_PROVIDER]
            groups.append(FinalistGroup(finalists + [by_key[k] for k in beside["trial_key"] if k in by_key],
                                        screening_seconds(in_group["trial_key"], screened_s)))
    return groups


def screening_seconds(keys, screened_s: dict) -> Optional[float]:
    """The seconds the screening of these trials took: each one's newest ok screened row's measure_s
    (`screened_s`), summed. None where one has none among the job's rows, or no figure: a trial reused
    from an earlier job may have only its finalist row there, and a sum without it would cut its group
    to a part of its screening."""
    seconds = [screened_s.get(key) for key in keys]
    if any(value is None or not math.isfinite(value) for value in seconds):
        return None
    return float(sum(seconds))


def group_rule(rule: StopRule, screening_s: Optional[float], of_screening: Optional[float]) -> StopRule:
    """A group's rule: `rule`, its max_time_s cut to of_screening x the seconds the group's screening
    took (None: not cut; nor where the screening's seconds are unknown): the finalists take no longer
    than the screening did, within max_time_s, warm-ups on top. Configs that differ by about the floor,
    or by one clock step on a 1-6 us kernel, are settled by no number of rounds."""
    if of_screening is None or screening_s is None or not screening_s > 0:
        return rule
    cut = max(rule.min_time_s, of_screening * screening_s)  # (a rule's cap is never below its minimum)
    return dataclasses.replace(rule, max_time_s=min(rule.max_time_s, cut))


def on_finalists(record, tie_floor: float):
    """What to do with a group's re-timed results: rank, tie and choose ours (decide), record every row
    (phase final), and say which was chosen; a group that failed leaves the screening results standing."""
    def on_result(worker, group: list, results: list[dict]) -> None:
        where = f"{group[0].kernel} {list(group[0].shape)} {group[0].dtype}"
        if len(results) != len(group):
            print(f"warning: finalists of {where} failed ({results[0]['status']}: {results[0]['message']}); "
                  "the screening results stand")
            return
        finalists = [(t, r) for t, r in zip(group, results) if t.provider == TRITON_PROVIDER]
        decisions = decide([t.config for t, _ in finalists], [r["samples_us"] for _, r in finalists],
                           tie_floor)
        for (trial, result), decision in zip(finalists, decisions):
            record(worker, trial, {**result, **decision}, phase="final")
        for trial, result in zip(group, results):
            if trial.provider != TRITON_PROVIDER:
                message = "baseline re-timed round-robin with the finalists"
                record(worker, trial, {**result, "message": message}, phase="final")
        chosen = next(t for (t, _), d in zip(finalists, decisions) if d["chosen"])
        tied = sum(d["tie"] for d in decisions)
        print(f"finalists {where}: chosen {chosen.config} ({tied} of {len(finalists)} tied with the fastest)")

    return on_result
