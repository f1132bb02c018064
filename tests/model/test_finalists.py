"""The finalists' cost rules (runners/model/finalists.py): who is re-timed (the screen margin) and when a
block of rounds stops (settled), against the full-precision rule they replace, on draws with more noise
than the paired interval assumes: heavy tails, a clock shared by each round, a placement offset per
repetition."""
import json

import numpy as np
import pandas as pd
import pytest

from triton_sweep.model.finalists import decide, finalist_groups, group_rule, settled, winner, winners
from triton_sweep.model.trial import TRITON_PROVIDER, Trial
from triton_sweep.measure.stop_rule import STOP_SETTLED, StopRule
from triton_sweep.measure.timing import stop_reasons, next_batch_rounds

FLOOR = 0.005  # the default tie floor


def _rounds(rng, differences, count, noise=0.005, tail=0.0, base=10.0):
    """`count` rounds of round-paired samples (us) of a `base` us kernel's configs slower than the first by
    `differences`."""
    clock = np.exp(rng.normal(0, noise, count))  # shared by the round: cancels in the pairs
    own = np.exp(rng.normal(0, noise, (len(differences), count)))
    slow = np.where(rng.random((len(differences), count)) < tail, 1.3, 1.0)  # a heavy tail
    return [list(base * (1 + d) * clock * own[i] * slow[i]) for i, d in enumerate(differences)]


def test_settled_says_when_every_verdict_is_clear():
    rng = np.random.default_rng(0)
    assert settled(_rounds(rng, [0.0, 0.05, 0.2], 40), FLOOR)  # both clearly slower
    assert settled(_rounds(rng, [0.0, 0.0], 400, noise=0.001), FLOOR)  # clearly within the floor
    assert not settled(_rounds(rng, [0.0, 0.05, FLOOR], 40), FLOOR)  # one sits on the floor
    assert not settled(_rounds(rng, [0.0, 0.05], 5), FLOOR)  # too few rounds for an interval


def _read(values, rng, step):
    """Values (us) as a clock of `step` us reads them, 1 ns off now and then as CUPTI's are; unchanged
    where step is 0."""
    if not step:
        return list(values)
    read = np.round(np.asarray(values) / step) * step
    return list(read + rng.choice([-0.001, 0.0, 0.0, 0.001], len(read)))


def _finalists(rng, differences, noise, tail, sequential, repetitions=5, base=10.0, step=0.0):
    """The finalists' blocks as the worker takes them (batches of next_batch_rounds, the default rule's
    block, a placement offset per block and config), stopping on the rule or, if `sequential`, once
    settled; a kernel of `base` us, read by a clock of `step` us (_read). Returns (tie verdicts of the
    slower configs, rounds taken)."""
    block = StopRule(min_samples=20, min_time_s=0.02, rel_precision=0.005, max_time_s=0.5,
                     repetitions=repetitions).per_repetition()
    taken = [[] for _ in differences]
    for _ in range(repetitions):
        placed = np.exp(rng.normal(0, 0.003, len(differences)))
        samples, elapsed = [[] for _ in differences], 0.0
        while True:
            rounds = next_batch_rounds(block, samples, elapsed)
            for i, new in enumerate(_rounds(rng, differences, rounds, noise, tail, base)):
                samples[i] += _read(placed[i] * np.asarray(new), rng, step)
            elapsed += rounds * len(differences) * 40e-6  # a flush and a 10 us kernel a call
            test = (lambda s: settled([a + b for a, b in zip(taken, s)], FLOOR)) if sequential else None
            if stop_reasons(block, samples, elapsed, test):
                break
        taken = [a + b for a, b in zip(taken, samples)]
    decisions = decide([{"num_warps": 2 ** i} for i in range(len(differences))], taken, FLOOR)
    return [d["tie"] for d in decisions[1:]], len(taken[0])


@pytest.mark.parametrize("difference", [0.0, FLOOR / 2, 4 * FLOOR])
def test_a_settled_stop_gives_the_verdicts_of_the_full_rule_in_fewer_rounds(difference):
    """Noise 2% a sample with 5% of samples 30% slow: the full rule mostly runs to its cap. The tie rates
    of the two stops agree within 0.1 (200 draws each), and the settled stop takes fewer rounds where
    the verdict is clear."""
    rng = np.random.default_rng(7)
    runs = {sequential: [_finalists(rng, [0.0, difference, 0.1], 0.02, 0.05, sequential) for _ in range(200)]
            for sequential in (False, True)}
    tie_rate = {s: np.mean([ties[0] for ties, _ in r]) for s, r in runs.items()}
    rounds = {s: np.mean([n for _, n in r]) for s, r in runs.items()}
    assert abs(tie_rate[True] - tie_rate[False]) <= 0.1
    assert (tie_rate[True] >= 0.9) if difference <= FLOOR / 2 else (tie_rate[True] <= 0.05)
    assert all(not ties[1] for r in runs.values() for ties, _ in r)  # 10% slower: never tied
    if difference == 4 * FLOOR:
        assert rounds[True] < 0.8 * rounds[False]


STEP_US = 0.032  # CUPTI's step on H100s and H200s


@pytest.mark.parametrize("steps", [0, 0.5, 2])
def test_on_a_clock_coarser_than_the_floor_ties_settle_and_the_verdicts_hold(steps):
    """A 1.3 us kernel read in 32 ns steps: the 0.5% floor (6.5 ns) is a fifth of a step, which widens
    each end of the paired interval. Noise 3% a sample, 5% of samples 30% slow; configs slower than the
    fastest by 0, half a step (a difference the clock cannot tell from none: a tie) and 2 steps (slower).
    The settled stop gives the full rule's tie verdicts (rates within 0.1, 100 draws each) in under half
    its rounds: before the clock's widening was counted, a tie there never settled and every block ran
    to its cap (this test's 0 steps: 2529 rounds against the cap's 4250).
    Where the promise ends, as at the floor of a fine clock: a difference on the verdict's edge, 1.5
    steps, tied in 48-50% of the full rule's draws and 25-30% of the settled stop's (seeds 5 and 6)."""
    rng = np.random.default_rng(5)
    difference = steps * STEP_US / 1.3
    runs = {sequential: [_finalists(rng, [0.0, difference], 0.03, 0.05, sequential, base=1.3, step=STEP_US)
                         for _ in range(100)] for sequential in (False, True)}
    tie_rate = {s: np.mean([ties[0] for ties, _ in r]) for s, r in runs.items()}
    rounds = {s: np.mean([n for _, n in r]) for s, r in runs.items()}
    assert abs(tie_rate[True] - tie_rate[False]) <= 0.1, tie_rate
    assert tie_rate[True] >= 0.9 if steps < 1 else tie_rate[True] <= 0.05, tie_rate
    assert rounds[True] < 0.5 * rounds[False], rounds


def _screened(p50s: dict) -> tuple[pd.DataFrame, list]:
    trials = [Trial("k", TRITON_PROVIDER, (64,), "float16", {"num_warps": w}) for w in p50s]
    frame = pd.DataFrame([{"id": i, "trial_key": t.key, "status": "ok", "provider": TRITON_PROVIDER,
                           "shape": json.dumps([64]), "dtype": "float16", "phase": "screen", "measure_s": 0.1,
                           "p50_us": p50s[t.config["num_warps"]]} for i, t in enumerate(trials)])
    return frame, trials


def test_the_winners_of_all_shapes_at_once_are_each_shapes_winner():
    """The winner of each shape: the chosen finalist of the newest round where one was chosen, else the
    first of the lowest p50s; by shape at once (the export) as one shape at a time. Rows drawn to break
    the easy cases: tied p50s, several chosen rows a shape, chosen as None, NaN, 0/1 and booleans,
    index labels out of order."""
    rng = np.random.default_rng(11)
    flags = [None, float("nan"), 0.0, 1.0, False, True]
    shapes = rng.integers(8, size=400)  # finalists chosen at shapes 0-3 only
    rows = pd.DataFrame([{"id": i, "shape": json.dumps([int(shape)]), "p50_us": float(rng.integers(3)),
                          "chosen": flags[rng.integers(6)] if shape < 4 else flags[rng.integers(3)]}
                         for i, shape in enumerate(shapes)], index=rng.permutation(400) * 7)
    expected = {}
    for shape, group in rows.groupby("shape"):
        chosen = [(row.id, index) for index, row in group.iterrows() if row.chosen == 1]
        fastest = [index for index, row in group.iterrows() if row.p50_us == group["p50_us"].min()]
        expected[shape] = max(chosen)[1] if chosen else fastest[0]
    assert any(rows[rows["shape"] == shape]["chosen"].eq(1).sum() > 1 for shape in expected)
    assert any(not rows[rows["shape"] == shape]["chosen"].eq(1).any() for shape in expected)
    assert winners(rows).to_dict() == expected
    assert {shape: winner(group) for shape, group in rows.groupby("shape")} == expected


@pytest.mark.parametrize("p50s, expected", [
    ({1: 10.0, 2: 10.2, 4: 10.9, 8: 12.0, 16: 30.0}, [1, 2, 4]),  # within 10% of the best
    ({1: 10.0, 2: 15.0, 4: 30.0}, [1, 2]),  # a clear winner still meets its runner-up
    ({w: 10.0 + 0.01 * w for w in (1, 2, 4, 8, 16, 32)}, [1, 2, 4]),  # top_k caps the near ones
])
def test_finalists_are_the_top_k_within_the_screen_margin(p50s, expected):
    frame, trials = _screened(p50s)
    (group,) = finalist_groups(frame, trials, {((64,), "float16")}, top_k=3, screen_margin=0.10)
    assert [t.config["num_warps"] for t in group.trials] == expected


def _rows_frame(rows) -> pd.DataFrame:
    """A job's rows from (trial, phase, status, measure_s, p50_us), ids in order."""
    return pd.DataFrame([{"id": i, "trial_key": t.key, "status": status, "provider": t.provider,
                          "shape": json.dumps(list(t.shape)), "dtype": t.dtype, "phase": phase,
                          "measure_s": seconds, "p50_us": p50} for i, (t, phase, status, seconds, p50)
                         in enumerate(rows)])


def test_a_group_s_screening_seconds_are_its_trials_newest_screened_rows():
    # What its finalists may spend (finalists.of_screening): every trial of the (shape, dtype) that
    # screened ok, ours and the baselines, each once (its newest screened row: a re-run's replaces the
    # old); not a failed trial's seconds, nor an earlier round of finalists', nor another shape's.
    trials = [Trial("k", TRITON_PROVIDER, (64,), "float16", {"num_warps": w}) for w in (1, 2, 4)]
    trials += [Trial("k", "torch", (64,), "float16", {}), Trial("k", TRITON_PROVIDER, (128,), "float16", {})]
    rows = [(trials[0], "screen", "ok", 0.5, 10.0), (trials[0], "screen", "ok", 0.25, 10.0),
            (trials[1], "screen", "ok", 0.125, 11.0), (trials[1], "final", "ok", 4.0, 11.0),
            (trials[2], "screen", "incorrect", None, None), (trials[3], "screen", "ok", 0.0625, 9.0),
            (trials[4], "screen", "ok", 8.0, 20.0)]
    (group,) = finalist_groups(_rows_frame(rows), trials, {((64,), "float16")}, top_k=3, screen_margin=0.10)
    assert group.trials == [trials[0], trials[1], trials[3]]
    assert group.screening_s == 0.25 + 0.125 + 0.0625
    # A trial whose screening is not among the job's rows (reused from an earlier job, its newest row a
    # finalist's) or has no figure: the group's screening seconds are unknown, and its rule is not cut
    # (the others' 0.31 s would cut a group whose loop took 4 s before).
    reused = [row for row in rows if row[0] is not trials[1] or row[1] == "final"]
    no_figure = [(t, phase, status, float("nan") if t is trials[1] else seconds, p50)
                 for t, phase, status, seconds, p50 in rows]
    rule = StopRule(min_samples=20, min_time_s=0.02, rel_precision=0.005, max_time_s=0.5, repetitions=5)
    for missing in (reused, no_figure):
        (group,) = finalist_groups(_rows_frame(missing), trials, {((64,), "float16")}, top_k=3,
                                   screen_margin=0.10)
        assert group.trials == [trials[0], trials[1], trials[3]] and group.screening_s is None
        assert group_rule(rule, group.screening_s, 1.0) == rule


def test_a_group_s_rule_is_cut_to_its_screening_and_never_below_its_minimum():
    rule = StopRule(min_samples=20, min_time_s=0.02, rel_precision=0.005, max_time_s=0.5, repetitions=5)
    assert group_rule(rule, 0.3, 1.0) == StopRule(20, 0.02, 0.005, 0.3, 5)
    assert group_rule(rule, 0.3, 0.5).max_time_s == pytest.approx(0.15)
    assert group_rule(rule, 2.0, 1.0) == rule  # max_time_s stays the cap
    assert group_rule(rule, 0.001, 1.0).max_time_s == 0.02  # its min_time_s: a valid rule
    assert group_rule(rule, 0.3, None) == rule and group_rule(rule, 0.0, 1.0) == rule
    assert group_rule(rule, float("nan"), 1.0) == rule  # seconds unknown: not cut


def test_a_settled_block_says_so_and_keeps_its_minimum():
    samples = _rounds(np.random.default_rng(3), [0.0, 0.3], 20, noise=0.05)
    rule = StopRule(min_samples=20, min_time_s=0.0, rel_precision=0.001, max_time_s=10.0)
    assert stop_reasons(rule, samples, 0.01, lambda s: settled(s, FLOOR)) == [STOP_SETTLED] * 2
    assert stop_reasons(rule, [s[:19] for s in samples], 0.01, lambda s: settled(s, FLOOR)) is None
    assert stop_reasons(rule, samples, 0.01) is None  # without the test: the precision is not there
