"""What the trial worker does with a request: gate then time a trial (run_trial), re-time the finalists
of one (shape, dtype) (run_finalists), compile a torch.compile baseline ahead (prepare_baseline); every
outcome a row fragment with a status, never an exception. The measurement itself: runners/measure/."""
from __future__ import annotations

import time
from typing import Optional

from triton_sweep.measure import check
from triton_sweep.measure.inputs import ShapeCache
from triton_sweep.measure.metrics import measured_fields
from triton_sweep.measure.repetitions import Placements, measure_repetitions
from triton_sweep.model.trial import TRITON_PROVIDER, Trial


def compiles(spec, trial: Trial) -> bool:
    """Whether the trial is a baseline whose first call compiles (kernels/spec.py: compiled)."""
    baseline = spec.baselines.get(trial.provider) if trial.provider != TRITON_PROVIDER else None
    return getattr(baseline, "compiles", False)


def run_trial(spec, trial: Trial, cache: ShapeCache, timer, device, peaks: dict) -> dict:
    """Gate then time one trial; every outcome is a row fragment with a status, never an exception."""
    import torch

    first_launch_done = False
    try:
        inputs, references, bound = cache.get(trial, with_bound=trial.provider == TRITON_PROVIDER)
        normwise = False
        began = time.perf_counter()
        run, out = timed_call(spec, trial, inputs)
        if out is not None:
            if not spec.prepare_output:  # (a kernel that reads its outputs had them prepared by timed_call)
                for tensor in check.as_tuple(out):
                    check.poison(tensor)  # an element the kernel never writes keeps the poison
            run()
        else:
            out = run()
            references = references[:1]  # a baseline returns the main output only (see kernels/spec.py)
            normwise = True  # the user's code: rounding after every op (runners/measure/check.py)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        first_call_s = time.perf_counter() - began  # load (and compile, unless the pool did) + one run
        first_launch_done = True
        problem = check.compare_outputs(check.as_tuple(out), references, normwise, bound)
        if problem:
            return {"status": check.STATUS_INCORRECT, "message": problem, "first_call_s": first_call_s}
        placements = Placements(device)

        def calls_at(repetition: int) -> list:
            if repetition == 0:
                return [run]
            return [timed_call(spec, trial, tuple(placements.place(x) for x in inputs), placements)[0]]

        (measurement,) = measure_repetitions(timer, calls_at, timer.rule, placements)
        fields = measured_fields(spec, trial, measurement, peaks)
    except Exception as error:  # classified and recorded: a failing trial never stops the sweep
        return _failure(error, first_launch_done)
    return {**fields, "first_call_s": first_call_s}


def prepare_baseline(spec, trial: Trial, device) -> dict:
    """Compile a torch.compile baseline ahead for the trial's inputs (kernels/spec.py: compiled), from
    inputs made on the meta device and allocated empty on this one: nothing is launched, so it needs no
    lock. What fails here is left to the trial's first call, which compiles again and reports it."""
    import torch

    baseline = spec.baselines[trial.provider]
    if not hasattr(baseline, "prepare"):
        return {"compile_s": None}
    began = time.perf_counter()
    try:
        made = spec.make_inputs(trial.shape, getattr(torch, trial.dtype), 0, torch.device("meta"))
        baseline.prepare(tuple(torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=device)
                               if isinstance(x, torch.Tensor) else x for x in made))
    except Exception as error:
        return {"compile_s": None, "message": f"{type(error).__name__}: {error}"[:2000]}
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the empty inputs' memory back to the device
    return {"compile_s": time.perf_counter() - began}


def timed_call(spec, trial: Trial, inputs: tuple, placements: Optional[Placements] = None):
    """(the zero-argument call that is timed, the output it writes into): our kernel launches into an
    output allocated here (placed anew by `placements`, if given); a baseline returns its output (None
    here)."""
    if trial.provider == TRITON_PROVIDER:
        out = spec.output_like(inputs)
        if placements is not None:
            out = (tuple(placements.place(o, copy=False) for o in out) if isinstance(out, tuple)
                   else placements.place(out, copy=False))
        if spec.prepare_output:  # outputs it also reads hold their inputs, not what the memory held
            spec.prepare_output(inputs, out)
        return (lambda: spec.launch(inputs, out, trial.config)), out
    baseline = spec.baselines[trial.provider]
    return (lambda: baseline(inputs)), None


def run_finalists(spec, trials: list[Trial], cache: ShapeCache, timer, peaks: dict, rule,
                  tie_floor: float) -> list[dict]:
    """Re-time trials of one (shape, dtype) that already passed the gate (configs of ours, and the
    baselines beside them), interleaved round-robin with the L2 flush before every call, until `rule`
    holds or the ties of ours at tie_floor are settled (runners/model/finalists.py); one row fragment
    per trial (or one failure for all)."""
    from triton_sweep.model.finalists import settled

    ours = [i for i, trial in enumerate(trials) if trial.provider == TRITON_PROVIDER]
    try:
        inputs, _, _ = cache.get(trials[0], with_bound=False)
        placements = Placements(cache.device)

        def calls_at(repetition: int) -> list:
            if repetition == 0:
                return [timed_call(spec, trial, inputs)[0] for trial in trials]
            placed = tuple(placements.place(x) for x in inputs)  # one placement for the whole round
            return [timed_call(spec, trial, placed, placements)[0] for trial in trials]

        measurements = measure_repetitions(timer, calls_at, rule, placements,
                                           lambda samples: settled([samples[i] for i in ours], tie_floor))
        return [measured_fields(spec, trial, m, peaks) for trial, m in zip(trials, measurements)]
    except Exception as error:
        return [_failure(error, first_launch_done=True)]


def _failure(error: Exception, first_launch_done: bool) -> dict:
    return {"status": check.classify(error, first_launch_done), "message": check.described(error)[:4000],
            "sticky": check.is_sticky_cuda_error(error)}
