"""The stopping rule, the statistics, CUPTI record parsing and the flush, on synthetic data (no GPU)."""
import math
import random
import time
from typing import Optional

import numpy as np
import pytest
import torch

from triton_sweep.measure.stop_rule import (STOP_CONVERGED, STOP_RESOLUTION, STOP_TIMEOUT, StopRule,
                                            at_resolution, median_interval, median_precision,
                                            quantization_note)
from triton_sweep.measure.cuda_timer import hold_seconds
from triton_sweep.measure.cupti_records import (CallRecord, GpuRecord, RecordMismatch, busy_ns,
                                                calls_from_records, fastest_call_s, host_late)
from triton_sweep.measure.l2_flush import (FLUSH_BLOCK, FLUSH_KERNEL_NAME, FLUSH_MIN_BYTES,
                                           _l2_flush_read_kernel, flush_elements)
from triton_sweep.measure.timing import (METHOD_WALL, InterpreterTimer, next_batch_rounds, relative_noise,
                                         summarize)
from triton_sweep.model.trial import Trial
from triton_sweep.measure.metrics import NoGpuWork, measured_fields, timers_disagree
from triton_sweep.measure.timing import METHOD_CUPTI, Measurement

RULE = StopRule(min_samples=20, min_time_s=0.01, rel_precision=0.005, max_time_s=1.0)


def _run(rule: StopRule, stream, overhead_s: float = 0.0):
    """Feed samples in the batches the CUDA timer takes (next_batch_rounds), the wall clock advancing by
    each sample plus a fixed overhead (the flush, the launch); returns (stop reason, samples)."""
    samples, elapsed = [], 0.0
    stream = iter(stream)
    while True:
        for _ in range(next_batch_rounds(rule, [samples], elapsed)):
            sample = next(stream)
            samples.append(sample)
            elapsed += sample + overhead_s
        reason = rule.check(samples, elapsed)
        if reason:
            return reason, samples


def test_rare_outliers_do_not_delay_a_known_median():
    # 30 us samples with 0.2% jitter and 3% of them 10x slower (a neighbour, a clock dip): the spread
    # of single samples is huge, the median is known to 0.1% at once.
    rng = random.Random(0)
    stream = (30e-6 * (10 if rng.random() < 0.03 else 1) * (1 + rng.gauss(0, 0.002)) for _ in range(100_000))
    reason, samples = _run(RULE, stream, overhead_s=40e-6)
    assert reason == STOP_CONVERGED
    assert relative_noise(samples) > 0.5  # the old rule (stdev / mean <= 0.5%) would have run to the cap
    assert median_precision(samples) <= 0.005
    assert len(samples) < 300  # min_time 10 ms at 70 us a sample: ~143 samples


def test_quiet_long_kernels_stop_at_min_samples():
    rng = random.Random(1)
    reason, samples = _run(RULE, (0.002 * (1 + rng.gauss(0, 0.001)) for _ in range(1000)))
    assert reason == STOP_CONVERGED and len(samples) == RULE.min_samples  # 2 ms each: min_time met after 5


def test_samples_grow_until_the_median_is_known():
    # 5% spread: the median's 95% interval is about +-1.96 * 1.25 * 5% / sqrt(n), under 0.5% from
    # n ~ 600 on; the batches double at most, so it stops between that and twice that.
    rng = random.Random(2)
    reason, samples = _run(RULE, (1e-4 * (1 + rng.gauss(0, 0.05)) for _ in range(100_000)))
    assert reason == STOP_CONVERGED
    assert median_precision(samples) <= 0.005
    assert 400 <= len(samples) <= 2000


def test_an_imprecise_stream_stops_at_the_time_cap():
    rng = random.Random(3)
    rule = StopRule(min_samples=20, min_time_s=0.0, rel_precision=0.0005, max_time_s=0.5)
    reason, samples = _run(rule, (1e-4 * (1 + rng.gauss(0, 0.3)) for _ in range(1_000_000)), overhead_s=1e-4)
    assert reason == STOP_TIMEOUT
    elapsed = sum(samples) + 1e-4 * len(samples)
    assert 0.5 <= elapsed <= 0.5 * 1.01  # batches are sized to end at the cap, not to overshoot it


def test_min_time_counts_wall_time():
    # 5 us kernels with 45 us of flush and launch around each: 10 ms of sampling is 200 samples, though
    # the median was known long before.
    rng = random.Random(4)
    reason, samples = _run(RULE, (5e-6 * (1 + rng.gauss(0, 0.001)) for _ in range(100_000)), overhead_s=45e-6)
    assert reason == STOP_CONVERGED
    assert len(samples) == pytest.approx(200, abs=2)


def test_next_batch_at_most_doubles_and_fits_the_cap():
    rule = StopRule(min_samples=10, min_time_s=0.0, rel_precision=0.001, max_time_s=1.0)
    noisy = [1.0 + 0.1 * math.sin(i) for i in range(40)]
    assert next_batch_rounds(rule, [[]], 0.0) == 10
    assert next_batch_rounds(rule, [noisy], 0.04) == 40  # needs far more; doubles
    assert next_batch_rounds(rule, [noisy], 0.99) == 1  # 10 ms left at 1 ms a round: what still fits
    # Interleaved functions: the least precise one decides.
    assert next_batch_rounds(rule, [[1.0] * 40, noisy], 0.04) == 40


def test_median_interval_covers_the_median():
    rng = np.random.default_rng(0)
    low, high = median_interval(rng.normal(1.0, 0.1, size=400))
    assert low < 1.0 < high and high - low < 0.04  # ~ +-1.96 * 1.25 * 0.1 / 20
    assert median_interval([1.0, 2.0, 3.0]) == (-math.inf, math.inf)  # too few values: no conclusion
    assert median_precision([1.0, 2.0, 3.0]) == math.inf


def test_the_median_interval_covers_95_percent_at_every_n_exactly():
    """[x_(i), x_(n-1-i)] holds the median unless i+1 or more of the n values fall on one side of it:
    its coverage is 1 - 2 P(Binomial(n, 1/2) <= i), computed here for every n, not sampled. The normal
    approximation's rank (floor((n - 1.96 sqrt(n)) / 2)) fell short at 191 of these n."""
    from scipy.stats import binom

    short = []
    for n in range(4, 401):
        values = np.arange(n, dtype=np.float64)  # distinct: the interval's ends are order statistics
        low, high = median_interval(values)
        if not math.isfinite(low):
            assert n < 6  # min to max covers 1 - 2 / 2^n: 93.8% at n = 5
            continue
        rank = int(low)  # the value x_(i) is i here
        assert high == n - 1 - rank
        coverage = 1 - 2 * binom.cdf(rank, n, 0.5)
        if coverage < 0.95:
            short.append(n)
        assert 1 - 2 * binom.cdf(rank + 1, n, 0.5) < 0.95  # one rank narrower falls short: the widest rank
        old_rank = math.floor((n - 1.959964 * math.sqrt(n)) / 2)
        if old_rank > rank:
            assert 1 - 2 * binom.cdf(old_rank, n, 0.5) < 0.95
    assert short == []


def test_the_median_interval_rank_is_the_widest_that_covers_at_large_n():
    """The rank (scipy.stats' binom) against exact integer sums (the largest i with
    40 * sum C(n, k) <= 2^n) up to 2,000 values, and the widest that covers where a timer's sample counts
    reach beyond (up to millions of samples of a microsecond kernel)."""
    from scipy.stats import binom

    from triton_sweep.measure.stop_rule import _interval_rank

    for n in range(2001):
        total, term, exact = 0, 1, -1
        while exact < n and 40 * (total + term) <= 2**n:
            total, exact = total + term, exact + 1
            term = term * (n - exact) // (exact + 1)
        assert _interval_rank(n) == exact, n
    counts = np.unique(np.geomspace(20_001, 20_000_000, 40).astype(int))
    ranks = np.array([_interval_rank(int(n)) for n in counts])
    assert np.all(binom.cdf(ranks, counts, 0.5) <= 0.025)
    assert np.all(binom.cdf(ranks + 1, counts, 0.5) > 0.025)
    assert np.all(binom.cdf(ranks + 1, counts, 0.5) > 0.025)


def test_quantized_samples_are_not_a_median_known_to_zero():
    """17 samples of 5.0 and 3 of 5.5, as a timer of 0.5 us resolution reads them: the interval is
    widened by the quantum, the precision is 10%, not 0%, and a rule of 0.5% never converges on them:
    it stops at the resolution (the interval is 5.0 +- one quantum, as narrow as that clock allows)."""
    samples = [5.0] * 17 + [5.5] * 3
    assert median_interval(samples) == (4.5, 5.5)
    assert median_precision(samples) == pytest.approx(0.1)
    rule = StopRule(min_samples=10, min_time_s=0.0, rel_precision=0.005, max_time_s=1.0)
    assert rule.check(samples, 0.1) == STOP_RESOLUTION and rule.check(samples, 1.0) == STOP_TIMEOUT
    assert rule.check(samples[:9], 0.1) is None  # min_samples first
    assert "quantized to 0.5" in quantization_note(samples)
    assert median_interval([5.0] * 20) == (-math.inf, math.inf)  # all equal: the resolution is unknown
    assert "all 20 samples are equal" in quantization_note([5.0] * 20)
    # A clock far finer than the interval (1 ns on a 5 us kernel, as CUPTI's): ties, and no note.
    fine = np.round(np.random.default_rng(0).normal(5.0, 0.1, 400), 3)
    assert len(np.unique(fine)) < len(fine) and quantization_note(fine) is None
    assert median_precision(fine) < 0.01


def _quantized(rng, center_s: float, spread_s: float, quantum_s: float = 32e-9, jitter_share: float = 0.0):
    """Kernel times read off a clock of `quantum_s` (an H100's CUPTI: 32 ns), a share of them 1 ns off
    their reading (as that CUPTI's are), endlessly."""
    while True:
        reading = quantum_s * round((center_s + rng.gauss(0, spread_s)) / quantum_s)
        yield reading + (1e-9 if rng.random() < jitter_share else 0.0)


def test_a_median_known_to_the_timer_s_resolution_stops_there_not_at_the_cap():
    """Kernels of 5.4 and 7.1 us read at 32 ns (0.59% and 0.45% of them; the same with 25 and 40 ns
    clocks, and with readings 1 ns off as an H100's CUPTI gives them), a rule of 0.5%: once the
    interval's ends are one reading or two adjacent ones the rule stops, at hundreds of samples, not at
    the 1 s cap; its precision is then within two quanta of the median, and 20x the samples would have
    narrowed it by one quantum at most."""
    cases = [(32e-9, 170, 0.0), (25e-9, 170, 0.0), (40e-9, 170, 0.0), (32e-9, 170, 0.2), (32e-9, 222, 0.2),
             (32e-9, 222.5, 0.0)]  # the last: a median halfway between two readings
    for seed, (quantum_s, readings, jitter_share) in enumerate(cases):
        rng = random.Random(seed)
        center = quantum_s * readings
        stream = _quantized(rng, center, 0.6 * quantum_s, quantum_s, jitter_share)
        reason, samples = _run(RULE, stream, overhead_s=40e-6)
        assert reason in (STOP_RESOLUTION, STOP_CONVERGED) and len(samples) < 1500, (readings, len(samples))
        q = quantum_s / center
        if reason == STOP_RESOLUTION:
            assert q - 0.1 * q <= median_precision(samples) <= 2 * q + 0.1 * q
            assert "quantized to" in quantization_note(samples)
        more = samples + [next(stream) for _ in range(20 * len(samples))]
        assert median_precision(more) >= median_precision(samples) - q - 0.1 * q, readings


def test_a_clock_s_rounding_is_not_its_resolution():
    """Readings 32 ns apart, a fifth of them 1 ns off (an H100's CUPTI): the resolution is ~31 ns, not
    1 ns, so a 5.5 us median is known to about 0.6% at best, not to 0.02%; a clock whose every step is
    that small (1 ns) is read as such."""
    from triton_sweep.measure.stop_rule import quantum

    rng = random.Random(4)
    stream = _quantized(rng, 5.472e-6, 40e-9, 32e-9, jitter_share=0.2)
    samples = sorted(next(stream) for _ in range(3000))
    assert quantum(samples) == pytest.approx(31e-9, abs=1e-12)
    assert median_precision(samples) > 0.005
    fine = sorted(round(rng.gauss(5.5e-6, 3e-9), 9) for _ in range(3000))  # a 1 ns clock, ties
    assert quantum(fine) == pytest.approx(1e-9, abs=1e-13)


def test_a_wide_spread_a_fine_clock_or_equal_values_never_stop_at_the_resolution():
    """Where the rule goes on: samples spread over many readings (the interval's ends several apart)
    are sampled until the median is known, as before; a clock finer than the spread (no ties) and a
    sample of equal values (resolution unknown) never stop at the resolution either."""
    rng = random.Random(3)
    wide = _quantized(rng, 32e-9 * 170, 40 * 32e-9, 32e-9)
    reason, samples = _run(RULE, wide, overhead_s=40e-6)
    assert reason in (STOP_CONVERGED, STOP_TIMEOUT)
    assert not at_resolution(samples[:200])
    fine = [6.2e-6 + rng.gauss(0, 1e-7) for _ in range(2000)]
    assert not at_resolution(fine) and RULE.check(fine, 0.5) == STOP_CONVERGED
    assert not at_resolution([6.2e-6] * 100)


def test_summary_percentiles_noise_and_precision():
    stats = summarize([i * 1e-6 for i in range(1, 101)])  # 1..100 us
    assert stats["min_us"] == pytest.approx(1.0)
    assert stats["p50_us"] == pytest.approx(50.5)
    assert stats["p20_us"] == pytest.approx(20.8)
    assert stats["p80_us"] == pytest.approx(80.2)
    assert stats["n_samples"] == 100
    assert stats["noise"] == pytest.approx(29.011 / 50.5, rel=1e-3)
    # The exact rank: P(Binomial(100, 1/2) <= 39) = 1.8% <= 2.5% < P(<= 40) = 2.8%, so the interval is
    # [x_(39), x_(60)] (0-based) = [40, 61] us around 50.5
    assert stats["p50_precision"] == pytest.approx(10.5 / 50.5)


def _record(name, start_us, end_us):
    return GpuRecord(name, int(start_us * 1000), int(end_us * 1000))


def test_cupti_records_become_one_sample_per_call():
    records = [
        _record("spin_kernel", 0, 500),  # the hold before the batch: no call's
        _record(FLUSH_KERNEL_NAME, 500, 530), _record("_softmax_kernel", 531, 561),
        _record(FLUSH_KERNEL_NAME, 570, 600),  # an eager call: three kernels and a memset
        _record("reduce_kernel", 601, 611), _record("Memset (Device)", 612, 613),
        _record("elementwise", 615, 625), _record("exp_kernel", 626, 636),
        _record(FLUSH_KERNEL_NAME, 640, 670), _record("_softmax_kernel", 671, 702),
    ]
    calls = calls_from_records(list(reversed(records)), calls=3)  # records arrive in any order
    assert [(round(c.gpu_s * 1e6, 3), c.activities) for c in calls] == [(30.0, 1), (31.0, 4), (31.0, 1)]
    # The GPU idle from each flush's end to the next flush's start, the last call's unknown.
    assert [c.idle_s and round(c.idle_s * 1e6, 3) for c in calls] == [10.0, 9.0, None]


def test_a_hold_between_two_calls_of_a_batch_is_no_calls():
    # Past MAX_CALLS_PER_HOLD calls the timer holds the GPU again, after the last call's kernels and
    # before the next flush: without its name, 500 us of spin would be the softmax's.
    records = [
        _record(FLUSH_KERNEL_NAME, 0, 30), _record("_softmax_kernel", 31, 33),
        _record("spin_kernel", 34, 534),
        _record(FLUSH_KERNEL_NAME, 534, 564), _record("_softmax_kernel", 565, 567),
    ]
    calls = calls_from_records(records, calls=2, hold_name="spin_kernel")
    assert [(round(c.gpu_s * 1e6, 3), c.activities) for c in calls] == [(2.0, 1), (2.0, 1)]
    assert calls[0].idle_s == pytest.approx(2e-6)  # up to the hold's start
    first_without = calls_from_records(records, calls=2)[0]  # what it was without
    assert (first_without.gpu_s, first_without.activities) == (pytest.approx(502e-6), 2)


def _calls_the_gpu_reached_first(hold_s: float, host_s: list[float], gpu_s: list[float]) -> int:
    """Of calls the host enqueues host_s[i] apart after a hold of hold_s, which the GPU runs in gpu_s[i]
    each from the hold's start on (an idle GPU: the worst case), how many it reached before they were."""
    enqueued, reached, early = 0.0, hold_s, 0
    for host, gpu in zip(host_s, gpu_s):
        enqueued += host
        early += reached < enqueued
        reached = max(reached, enqueued) + gpu
    return early


def test_a_hold_is_sized_by_the_fastest_call_where_the_calls_differ():
    # A finalists group round-robin: two configs of 8 us and a 120 us baseline, a 30 us flush before each
    # call, the host 60 us a call. Sized by the calls' average GPU time, a hold lets the GPU reach a fast
    # call that follows another before the host has enqueued it (the review of 1142b9f found 1-2 of 64);
    # sized by the fastest call's, as the timer now reads it from the batch's records, never.
    kernels_us = [8, 8, 120]
    order = [(r + k) % 3 for r in range(21) for k in range(3)]  # rotated every round, as the timer does
    records, start = [], 0
    for index in order:
        records += [_record(FLUSH_KERNEL_NAME, start, start + 30),
                    _record(f"call_{index}", start + 31, start + 31 + kernels_us[index])]
        start += 32 + kernels_us[index]
    calls = calls_from_records(records, len(order))
    busy_s = busy_ns([(r.start_ns, r.end_ns) for r in records]) * 1e-9
    fastest = fastest_call_s(busy_s, calls)
    assert fastest == pytest.approx(38e-6)  # a flush and an 8 us config
    gpu_s = [(30 + kernels_us[index]) * 1e-6 for index in order]
    host_s, rng = 60e-6, random.Random(7)
    by_fastest = hold_seconds(len(order), host_s, fastest)
    by_average = hold_seconds(len(order), host_s, busy_s / len(order))
    early = {"fastest": 0, "average": 0}
    for _ in range(200):
        noisy_host = [host_s * rng.uniform(0.75, 1.25) for _ in order]
        early["fastest"] += _calls_the_gpu_reached_first(by_fastest, noisy_host, gpu_s)
        early["average"] += _calls_the_gpu_reached_first(by_average, noisy_host, gpu_s)
    assert early["fastest"] == 0 and early["average"] > 0, early


@pytest.mark.parametrize("host_us, gpu_us", [(60, 37), (90, 5), (60, 58), (60, 300), (60, 0)])
def test_a_hold_covers_the_enqueue_less_what_the_gpu_runs_meanwhile(host_us, gpu_us):
    # The hold lets the host stay ahead of the GPU through a chunk whose calls each take the host up to
    # 25% longer than measured (as its noise does), whichever of the two is the slower, while holding
    # the GPU no longer than that needs: sized as if the GPU ran nothing, it also spanned the calls' own
    # GPU time (~115 us a 1.2 us vector add's sample against the host's 60 us on an H200).
    rng = random.Random(5)
    calls, host_s, gpu_s = 64, host_us * 1e-6, gpu_us * 1e-6
    hold = hold_seconds(calls, host_s, gpu_s)
    for _ in range(200):
        noisy_host = [host_s * rng.uniform(0.75, 1.25) for _ in range(calls)]
        noisy_gpu = [gpu_s * rng.uniform(1.0, 1.1) for _ in range(calls)]  # launch gaps: never faster
        assert _calls_the_gpu_reached_first(hold, noisy_host, noisy_gpu) == 0
    assert hold <= max(1.25 * host_s, calls * (1.25 * host_s - gpu_s) + gpu_s) + 1e-12
    if gpu_s < host_s:  # where the promise ends: a host 40% slower than measured is caught up with
        assert _calls_the_gpu_reached_first(hold, [1.4 * host_s] * calls, [gpu_s] * calls) > 0


def _calls(idle_us: list[Optional[float]], activities: int = 1) -> list[CallRecord]:
    return [CallRecord(10e-6, activities, None if idle is None else idle * 1e-6) for idle in idle_us]


def test_calls_the_host_enqueued_late_are_found_against_their_own_function_s_gaps():
    # Two functions in turn (0, 1, 0, 1, ...), as measure_interleaved rotates them: a Triton kernel
    # idling 3 us in its two gaps when fed, an eager call of four kernels (five gaps) idling 9 us.
    softmax = [3.0, 3.4, 4.8, 5.2, 45.0, 3.2, 2100.0, 3.1]  # up to 2 us above the least kept
    eager = [9.0, 12.5, 13.9, 9.6, 60.0, 9.2, 14.2, None]  # up to 5 us kept; the batch's last unjudged
    calls = [call for pair in zip(_calls(softmax), _calls(eager, activities=4)) for call in pair]
    functions = [0, 1] * len(softmax)
    late = host_late(calls, functions)
    assert sorted((functions[p], round(calls[p].idle_s * 1e6, 3)) for p in late) == [
        (0, 5.2), (0, 45.0), (0, 2100.0), (1, 14.2), (1, 60.0)]


def test_a_batch_whose_every_call_was_late_is_judged_against_its_least_late_call():
    # Where the promise ends: the least idle of a function's calls is taken as its fed gaps, so in a
    # batch where the host was late to every one of them (the hold too short from its first call) only
    # the later ones are found. The hold is sized from the host's measured enqueue time, which makes it
    # the rare case.
    assert host_late(_calls([40.0, 45.0, 41.2, 60.0]), [0, 0, 0, 0]) == {1, 3}
    assert host_late(_calls([40.0, 41.5, 40.2]), [0, 0, 0]) == set()


def test_overlapping_work_is_counted_once():
    assert busy_ns([(0, 10), (20, 30)]) == 20  # one after another: the sum
    assert busy_ns([(0, 10), (5, 15), (12, 14)]) == 15  # two streams at once: the union
    assert busy_ns([]) == 0


def test_a_missing_flush_record_is_an_error_not_a_shifted_sample():
    records = [_record(FLUSH_KERNEL_NAME, 0, 30), _record("k", 31, 40), _record("k", 41, 50)]
    with pytest.raises(RecordMismatch, match="expected 2 flush records"):
        calls_from_records(records, calls=2)


def test_flush_buffer_is_twice_the_l2_in_whole_blocks():
    l2 = 50 * 2**20 + 123  # an H100's 50 MiB, plus an odd remainder
    elements = flush_elements(l2)
    assert elements % FLUSH_BLOCK == 0
    assert 2 * l2 <= 4 * elements < 2 * l2 + 4 * FLUSH_BLOCK
    assert 4 * flush_elements(None) >= FLUSH_MIN_BYTES  # an unreported L2 still gets a real flush
    assert 4 * flush_elements(1 << 20) >= FLUSH_MIN_BYTES


def test_flush_kernel_reads_every_element():
    # Interpreter: a buffer of 3 blocks and a ragged tail read by 2 programs; the partial sums cover it.
    generator = torch.Generator().manual_seed(0)
    buffer = torch.randint(-1000, 1000, (3 * FLUSH_BLOCK + 77,), generator=generator, dtype=torch.int32)
    partials = torch.full((2,), 12345, dtype=torch.int32)
    _l2_flush_read_kernel[(2,)](buffer, partials, buffer.numel(), BLOCK=FLUSH_BLOCK)
    assert int(partials.sum()) == int(buffer.sum())


def test_timers_disagree_beyond_launch_overhead_only():
    assert timers_disagree(30.0, 33.4, 1) is False  # the event pair's ~3 us
    assert timers_disagree(267.5, 278.0, 5) is False  # eager softmax: 5 kernels and their gaps
    assert timers_disagree(30.0, 60.0, 1) is True  # 30 us unexplained
    assert timers_disagree(30.0, 25.0, 1) is True  # a window shorter than the work inside it
    assert timers_disagree(30.0, None, None) is None  # one timer only: nothing to cross-check


def test_interpreter_timer_keeps_every_sample_and_its_wall_clock():
    calls = []
    # The cap, passed within the first batch of min_samples, stops it there whatever the host's noise (a
    # rule that waited for 1 ms sleeps to converge took 17 samples once on a busy 2-core CI box).
    capped = StopRule(10, 0.0, rel_precision=0.5, max_time_s=0.001)
    measurement = InterpreterTimer(capped, warmup_s=0).measure(lambda: (calls.append(1), time.sleep(0.001)))
    assert measurement.stop_reason == STOP_TIMEOUT and measurement.method == METHOD_WALL
    assert len(measurement.samples_s) == 10 and measurement.event_samples_s is None
    assert all(sample >= 0.001 for sample in measurement.samples_s)  # wall time: each holds its sleep
    assert len(calls) == 11  # one warm-up call, never a sample


def test_a_call_without_gpu_work_is_an_error_with_its_cause():
    # CUPTI saw nothing between the flushes (a provider that launches no kernel): no GPU time to divide by.
    from triton_sweep.kernels import vector_add

    empty = Measurement([0.0] * 10, STOP_CONVERGED, METHOD_CUPTI, [3e-6] * 10, kernels_per_call=0.0)
    trial = Trial("vector_add", "torch", (1024,), "float16", {})
    with pytest.raises(NoGpuWork, match="no GPU activity was recorded"):
        measured_fields(vector_add.SPEC, trial, empty, peaks={})


def test_a_row_s_event_median_is_of_the_calls_fed_in_time_the_late_ones_kept_beside_it():
    # Two repetitions of a 5 us kernel; five of its nine calls the host launched late (their windows
    # hold 250-400 us of the GPU waiting), more than half: every call's median would be a late one.
    from triton_sweep.kernels import vector_add
    from triton_sweep.measure.timing import pooled

    fed, late = [8.0e-6, 8.2e-6, 7.9e-6, 8.1e-6], [300e-6, 250e-6, 400e-6, 280e-6, 290e-6]
    blocks = [Measurement([5e-6] * 5, STOP_CONVERGED, METHOD_CUPTI, fed[:2], late[:3], kernels_per_call=1.0),
              Measurement([5e-6] * 4, STOP_CONVERGED, METHOD_CUPTI, fed[2:], late[3:], kernels_per_call=1.0)]
    fields = measured_fields(vector_add.SPEC, Trial("vector_add", "triton", (1024,), "float16", {}),
                             pooled(blocks), peaks={})
    assert fields["event_p50_us"] == pytest.approx(8.05) and not fields["timers_disagree"]
    assert fields["late_event_samples_us"] == pytest.approx([s * 1e6 for s in late])  # nothing lost
    assert timers_disagree(fields["p50_us"], float(np.median(fed + late)) * 1e6, 1.0)  # what it was


def test_a_repetition_takes_its_share_of_the_rule():
    rule = StopRule(min_samples=20, min_time_s=0.02, rel_precision=0.005, max_time_s=0.5, repetitions=4)
    block = rule.per_repetition()
    assert block.repetitions == 1 and block.min_samples == 8  # 20 / 4 = 5, raised to the minimum
    assert block.min_time_s == pytest.approx(0.005) and block.max_time_s == pytest.approx(0.125)
    # four blocks at twice the half-width pool into a median known to the rule's precision
    assert block.rel_precision == pytest.approx(0.01)
    assert RULE.per_repetition() is RULE


def test_repetitions_pool_their_samples_and_keep_each_median():
    from triton_sweep.measure.timing import pooled, repetition_noise

    blocks = [Measurement([1.0, 1.1, 0.9], STOP_CONVERGED, METHOD_WALL, measure_s=0.1),
              Measurement([2.0, 2.2, 1.8, 2.1], STOP_TIMEOUT, METHOD_WALL, measure_s=0.2)]
    both = pooled(blocks)
    assert both.samples_s == [1.0, 1.1, 0.9, 2.0, 2.2, 1.8, 2.1] and both.stop_reason == STOP_TIMEOUT
    assert both.repetition_p50s_s == [1.0, 2.05] and both.measure_s == pytest.approx(0.3)
    assert repetition_noise(both.repetition_p50s_s) == pytest.approx(math.log(2.05) / math.sqrt(2))
    assert repetition_noise([1.0]) is None


def test_placements_copy_the_values_elsewhere_at_allocator_aligned_offsets():
    from triton_sweep.measure.repetitions import PLACEMENT_ALIGN_BYTES, Placements

    placements = Placements(torch.device("cpu"))
    x = torch.randn(37, 53, dtype=torch.float16)[:, 3:]  # a view: strides and offset kept
    seen = set()
    for _ in range(20):
        placed = placements.place(x)
        assert torch.equal(placed, x) and placed.stride() == x.stride()
        assert (placed.data_ptr() - placed.untyped_storage().data_ptr() - 2 * x.storage_offset()) \
            % PLACEMENT_ALIGN_BYTES == 0
        seen.add(placed.data_ptr())
    assert len(seen) == 20 and len(placements.held) == 20  # each elsewhere, all held until released
    assert placements.place(2.5) == 2.5  # a plain number passes
    out = placements.place(torch.empty(4, 4), copy=False)
    assert out.shape == (4, 4)
    placements.release()
    assert not placements.held


def test_measured_in_repetitions_on_the_interpreter(monkeypatch):
    """measure_repetitions: the first block on the checked buffers, each later one on buffers placed anew;
    one pooled measurement per call with every block's median."""
    from triton_sweep.measure.repetitions import Placements, measure_repetitions

    timer = InterpreterTimer(StopRule(6, 0.0, 0.5, 0.05), warmup_s=0.0)
    rule = StopRule(min_samples=16, min_time_s=0.0, rel_precision=0.5, max_time_s=0.2, repetitions=3)
    placements = Placements(torch.device("cpu"))
    x = torch.randn(1000)
    used = []

    def calls_at(repetition):
        inputs = x if repetition == 0 else placements.place(x)
        used.append(inputs.data_ptr())
        return [lambda: inputs.sum(), lambda: inputs.max()]

    measured = measure_repetitions(timer, calls_at, rule, placements)
    assert len(measured) == 2 and len(set(used)) == 3 and used[0] == x.data_ptr()
    for m in measured:
        assert len(m.repetition_p50s_s) == 3 and len(m.samples_s) >= 3 * 8
    assert not placements.held  # released after the last block


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_the_warm_up_loop_runs_after_idle_only():
    """One call, then the warm-up loop, on a GPU that has been idle; one call only while it is busy
    (this timer sampled less than WARM_AFTER_IDLE_S ago); never a warm-up call in the samples. Beside
    them one more call, whose enqueueing is timed to size the first hold (CudaTimer._enqueue_seconds)."""
    from triton_sweep.measure.device import cuda_timer
    from triton_sweep.measure.cuda_timer import WARM_AFTER_IDLE_S

    x = torch.randn(1 << 16, device="cuda")
    calls = []
    rule = StopRule(min_samples=10, min_time_s=0.0, rel_precision=0.5, max_time_s=1.0)
    timer = cuda_timer(0, rule, warmup_s=0.05)
    counts = []
    for pause in (0.0, 0.0, 2 * WARM_AFTER_IDLE_S):
        time.sleep(pause)
        calls.clear()
        samples = timer.measure(lambda: calls.append(x.mul(2))).samples_s
        counts.append(len(calls) - len(samples))
    assert counts[0] > 2 and counts[1] == 2 and counts[2] > 2, counts
