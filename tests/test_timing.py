"""The stopping rule and the statistics, on synthetic sample streams (no GPU involved)."""
import random

import pytest

from runners.timing import STOP_CONVERGED, STOP_TIMEOUT, InterpreterTimer, StopRule, relative_noise, summarize

RULE = StopRule(min_samples=10, min_time_s=0.5, max_noise=0.005, max_time_s=15.0)


def _run(rule: StopRule, stream, overhead_s: float = 0.0, batch: int = 10):
    """Feed samples in batches, as the CUDA timer does, the wall clock advancing by each sample plus a
    fixed overhead."""
    samples, elapsed = [], 0.0
    for sample in stream:
        samples.append(sample)
        elapsed += sample + overhead_s
        if len(samples) % batch:
            continue
        reason = rule.check(samples, elapsed)
        if reason:
            return reason, samples
    raise AssertionError("the stream ran out before the rule stopped")


def test_quiet_stream_stops_once_min_time_is_measured():
    rng = random.Random(0)
    reason, samples = _run(RULE, (0.01 * (1 + rng.gauss(0, 0.001)) for _ in range(10_000)))
    assert reason == STOP_CONVERGED
    assert len(samples) == 50  # 50 x 10 ms = min_time 0.5 s; noise 0.1% was under 0.5% all along


def test_never_fewer_than_min_samples_even_for_long_kernels():
    reason, samples = _run(RULE, (0.2 for _ in range(100)))  # 200 ms kernels: min_time met after 3
    assert reason == STOP_CONVERGED and len(samples) == 10


def test_noisy_stream_runs_to_the_time_cap():
    rng = random.Random(1)
    reason, samples = _run(RULE, (0.001 * (1 + rng.gauss(0, 0.05)) for _ in range(100_000)))
    assert reason == STOP_TIMEOUT
    assert sum(samples) == pytest.approx(15.0, abs=0.011)  # checked every batch of 10 x 1 ms


def test_the_cap_counts_wall_time_not_only_measured_time():
    rng = random.Random(2)
    rule = StopRule(min_samples=10, min_time_s=0.5, max_noise=0.005, max_time_s=1.5)
    # 10 us kernels with 90 us of flush and launch around each: stop at 1.5 s of wall time, when only
    # 0.15 s has been measured, short of min_time.
    reason, samples = _run(rule, (1e-5 * (1 + rng.gauss(0, 0.001)) for _ in range(1_000_000)), overhead_s=9e-5)
    assert reason == STOP_TIMEOUT
    assert len(samples) == pytest.approx(15_000, rel=0.001)


def test_a_burst_of_outliers_delays_convergence_until_diluted():
    # 3 samples at twice the time among N: relative noise ~ sqrt(3 / N), under 10% once N >= 300.
    stream = [0.002] * 3 + [0.001] * 10_000  # a slow start, e.g. clocks still ramping up
    reason, samples = _run(StopRule(min_samples=10, min_time_s=0.0, max_noise=0.1, max_time_s=15.0), stream)
    assert reason == STOP_CONVERGED
    assert relative_noise(samples) <= 0.1
    assert 290 <= len(samples) <= 310


def test_summary_percentiles_and_noise():
    stats = summarize([i * 1e-6 for i in range(1, 101)])  # 1..100 us
    assert stats["min_us"] == pytest.approx(1.0)
    assert stats["p50_us"] == pytest.approx(50.5)
    assert stats["p20_us"] == pytest.approx(20.8)
    assert stats["p80_us"] == pytest.approx(80.2)
    assert stats["n_samples"] == 100
    assert stats["noise"] == pytest.approx(29.011 / 50.5, rel=1e-3)


def test_interpreter_timer_keeps_every_sample():
    calls = []
    measurement = InterpreterTimer(StopRule(10, 0.0, 1.0, 5.0), warmup_s=0).measure(lambda: calls.append(1))
    assert measurement.stop_reason == STOP_CONVERGED
    assert len(measurement.samples_s) == 10
    assert len(calls) == 11  # one warm-up call, never a sample
