"""The measured fields of a row: each metric one function that declares its row Column(s) (`@metric`) and
computes its value from the trial's Measurement; measured_fields runs them in the order declared.

Adding a metric is one function here: runners/model/columns.py adds METRIC_COLUMNS to the row record in
this order (the store gains the column, old stores too; a W&B run shows it where its `wandb` says).
Column is declared here, not in the model, because the measurement imports nothing of the project."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional

from triton_sweep.measure import check

CONFIG, SUMMARY = "config", "summary"  # where a trial's W&B run shows a column


@dataclass(frozen=True)
class Column:
    name: str
    sql: str  # SQLite type; NOT NULL where every row has the field
    wandb: Optional[str] = None  # CONFIG (what the trial is, where it ran) | SUMMARY (what it measured)
    resume: bool = False  # part of the resume key: rows measured under another value are not reused
    named: bool = False  # compare names it where matched rows differ in it
    device: bool = False  # from the trial worker's description of its GPU (or the interpreter)
    samples: bool = False  # a float32 array, stored as bytes
    boolean: bool = False  # stored as 0 / 1


class Measured(NamedTuple):
    """What a metric is computed from: the kernel's spec, the trial, its Measurement (timing.py), the
    device's measured ceilings (`peaks`), and the fields of the metrics declared before it."""
    spec: object
    trial: object
    measurement: object
    peaks: dict
    fields: dict


# (the columns a metric declares, the function that computes them), in the row's order
METRICS: list[tuple[tuple[Column, ...], Callable[[Measured], object]]] = []


def metric(*columns: Column):
    """Declares a metric: the decorated function returns its column's value, or a dict by column name
    where it declares several."""
    def register(compute: Callable[[Measured], object]):
        METRICS.append((columns, compute))
        return compute
    return register


class NoGpuWork(ValueError):
    """The timed call did no GPU work at all (its CUPTI time is 0): nothing to report a throughput of."""


# A CUDA-event pair around one launch adds about 3 us to the kernel's own time (2.7-3.6 us on an
# H200 from 4 us to 0.7 ms kernels), and each further kernel of a call about 2 us of gap (eager softmax,
# 5 kernels: 10.4 us over their sum). Beyond this allowance per kernel, and 2% for clock changes between
# the two medians, the two timers disagree by more than launch overhead explains: the row is flagged.
LAUNCH_ALLOWANCE_US = 5.0
TIMER_DISAGREE_RELATIVE = 0.02


def timers_disagree(p50_us: float, event_p50_us: Optional[float],
                    kernels_per_call: Optional[float]) -> Optional[bool]:
    """Whether the CUDA-event time contradicts the kernel time of record: the window around the call
    shorter than the GPU work inside it, or longer by more than launch overhead explains. None when
    there is nothing to cross-check (one timer only)."""
    if event_p50_us is None or kernels_per_call is None:
        return None
    slack = TIMER_DISAGREE_RELATIVE * p50_us
    allowance = LAUNCH_ALLOWANCE_US * max(kernels_per_call, 1)
    return event_p50_us < p50_us - slack or event_p50_us > p50_us + allowance + slack


def measured_fields(spec, trial, measurement, peaks: dict) -> dict:
    """Statistics, throughput from the kernel's FLOP and byte models, and % of the measured ceilings.

    p50_us, the figure of record, is the GPU time per call (CUPTI: the kernels, memsets and memcpys
    of one call, one after another); event_p50_us is the CUDA-event time of the same calls, launch
    gaps and the event pair included, of the calls the GPU ran back to back (those the host enqueued
    late are late_event_samples_us: cupti_records.host_late)."""
    from triton_sweep.measure.stop_rule import STOP_CONVERGED, quantization_note

    measured = Measured(spec, trial, measurement, peaks, {})
    for columns, compute in METRICS:
        value = compute(measured)
        measured.fields.update({c.name: value[c.name] for c in columns} if len(columns) > 1
                               else {columns[0].name: value})
    return {
        "status": check.STATUS_OK,
        # Not converged because the timer's resolution bounds the precision: say so (stop_rule.py).
        "message": (quantization_note(measurement.samples_s)
                    if measurement.stop_reason != STOP_CONVERGED else None),
        "stop_reason": measurement.stop_reason,
        **measured.fields,
    }


# Timing: p50_us is the figure of record (GPU time per call under timing_method "cupti/...");
# p50_precision the half-width of its 95% interval, relative; event_* the CUDA-event cross-check.
@metric(Column("p20_us", "REAL", SUMMARY), Column("p50_us", "REAL", SUMMARY),
        Column("p80_us", "REAL", SUMMARY), Column("min_us", "REAL", SUMMARY), Column("mean_us", "REAL"),
        Column("noise", "REAL", SUMMARY),
        Column("p50_precision", "REAL", SUMMARY), Column("n_samples", "INTEGER", SUMMARY))
def statistics(m: Measured) -> dict:
    """The samples' statistics (timing.summarize); a call without GPU time has none to report."""
    from triton_sweep.measure.timing import summarize

    stats = summarize(m.measurement.samples_s)
    if stats["p50_us"] <= 0:
        raise NoGpuWork(f"no GPU activity was recorded for this call ({m.measurement.method}): a call "
                        "that launches no kernel, memset or memcpy has no GPU time to report")
    return stats


@metric(Column("samples_us", "BLOB", samples=True))
def samples_us(m: Measured):
    return [s * 1e6 for s in m.measurement.samples_s]


@metric(Column("event_p50_us", "REAL", SUMMARY))
def event_p50_us(m: Measured):
    from triton_sweep.measure.timing import summarize

    events = m.measurement.event_samples_s
    return summarize(events)["p50_us"] if events else None


@metric(Column("event_samples_us", "BLOB", samples=True))
def event_samples_us(m: Measured):
    events = m.measurement.event_samples_s
    return [s * 1e6 for s in events] if events else None


@metric(Column("late_event_samples_us", "BLOB", samples=True))
def late_event_samples_us(m: Measured):
    return [s * 1e6 for s in m.measurement.late_event_samples_s or []] or None


@metric(Column("kernels_per_call", "REAL", SUMMARY))
def kernels_per_call(m: Measured):
    return m.measurement.kernels_per_call


@metric(Column("timers_disagree", "INTEGER", SUMMARY, boolean=True))
def timers_cross_check(m: Measured):
    return timers_disagree(m.fields["p50_us"], m.fields["event_p50_us"], m.measurement.kernels_per_call)


@metric(Column("measure_s", "REAL", SUMMARY))
def measure_s(m: Measured):
    return m.measurement.measure_s


# Repetitions: blocks of samples on buffers placed anew (runners/measure/repetitions.py), the median of
# each, and the standard deviation of their logs (what compare judges a change by).
@metric(Column("repetitions", "INTEGER", SUMMARY))
def repetitions(m: Measured):
    return max(len(m.measurement.repetition_p50s_s or []), 1)


@metric(Column("rep_p50s_us", "BLOB", samples=True))
def rep_p50s_us(m: Measured):
    return [s * 1e6 for s in m.measurement.repetition_p50s_s or []] or None


@metric(Column("rep_noise", "REAL", SUMMARY))
def rep_noise(m: Measured):
    from triton_sweep.measure.timing import repetition_noise

    return repetition_noise(m.measurement.repetition_p50s_s or [])


# Throughput from the kernel's FLOP and byte models, and as a share of the measured ceilings.
@metric(Column("gbps", "REAL", SUMMARY))
def gbps(m: Measured):
    import torch

    p50_s = m.fields["p50_us"] * 1e-6
    return m.spec.bytes_moved(m.trial.shape, getattr(torch, m.trial.dtype)) / p50_s / 1e9


@metric(Column("tflops", "REAL", SUMMARY))
def tflops(m: Measured):
    p50_s = m.fields["p50_us"] * 1e-6
    return m.spec.flops(m.trial.shape) / p50_s / 1e12


@metric(Column("pct_copy_bw", "REAL", SUMMARY))
def pct_copy_bw(m: Measured):
    copy_gbps = m.peaks.get("copy_gbps")
    return 100 * m.fields["gbps"] / copy_gbps if copy_gbps else None


@metric(Column("pct_matmul", "REAL", SUMMARY))
def pct_matmul(m: Measured):
    matmul_tflops = m.peaks.get(f"matmul_tflops_{m.trial.dtype}")
    return 100 * m.fields["tflops"] / matmul_tflops if matmul_tflops else None


@metric(Column("sm_clock_start_mhz", "INTEGER"))
def sm_clock_start_mhz(m: Measured):
    return m.measurement.sm_clock_start_mhz


@metric(Column("sm_clock_end_mhz", "INTEGER"))
def sm_clock_end_mhz(m: Measured):
    return m.measurement.sm_clock_end_mhz


METRIC_COLUMNS: tuple[Column, ...] = tuple(column for columns, _ in METRICS for column in columns)
