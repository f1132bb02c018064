"""The workload a capture prints: calls per kernel, shape and dtype, and on a GPU each one's share of
kernel time, timed at the config the program launched most there (the sweep's CUPTI timer)."""
from __future__ import annotations

import importlib
import json


def kernel_seconds(specs: dict, mapped: dict) -> dict:
    """(kernel, shape, dtype) -> seconds of GPU time per call, at the config the program launched most
    there (timed with the sweep's CUPTI timer; the spec's launch); {} without a GPU."""
    import torch

    if not torch.cuda.is_available():
        return {}
    import numpy as np
    importlib.import_module("scipy.stats")  # the stop rule's ranks: here, not in the first timer loop

    from triton_sweep.measure.device import cuda_timer
    from triton_sweep.measure.stop_rule import StopRule

    rule = StopRule(min_samples=10, min_time_s=0.01, rel_precision=0.02, max_time_s=0.2)
    timer = cuda_timer(torch.cuda.current_device(), rule, warmup_s=0.01)
    seconds = {}
    for kernel, entries in mapped.items():
        spec = specs[kernel]
        for (shape, dtype), entry in entries.items():
            config = json.loads(max(entry["configs"], key=entry["configs"].get))
            try:
                inputs = spec.make_inputs(shape, getattr(torch, dtype), 0, torch.device("cuda"))
                out = spec.output_like(inputs)
                (measured,) = timer.measure_interleaved([lambda: spec.launch(inputs, out, config)], rule)
                seconds[(kernel, shape, dtype)] = float(np.median(measured.samples_s))
            except Exception as error:  # a shape the spec cannot launch: its share is left blank
                print(f"note: {kernel} {list(shape)} {dtype} not timed ({type(error).__name__}: {error})")
    return seconds


def workload_table(mapped: dict, seconds: dict) -> list[str]:
    total_calls = sum(e["calls"] for entries in mapped.values() for e in entries.values())
    total_time = sum(seconds.get((k, s, d), 0) * e["calls"] for k, entries in mapped.items()
                     for (s, d), e in entries.items())
    lines = [f"{'kernel':<22} {'shape':<22} {'dtype':<9} {'calls':>9} {'of kernel':>9} {'of all':>7}"
             + (f" {'of kernel time':>14}" if seconds else "")]
    for kernel, entries in sorted(mapped.items()):
        kernel_calls = sum(e["calls"] for e in entries.values())
        for (shape, dtype), entry in sorted(entries.items(), key=lambda item: -item[1]["calls"]):
            line = (f"{kernel:<22} {'x'.join(map(str, shape)):<22} {dtype:<9} {entry['calls']:>9} "
                    f"{100 * entry['calls'] / kernel_calls:>8.1f}% "
                    f"{100 * entry['calls'] / total_calls:>6.1f}%")
            if seconds:
                time_s = seconds.get((kernel, shape, dtype))
                line += f" {100 * time_s * entry['calls'] / total_time:>13.1f}%" if time_s else f" {'-':>14}"
            lines.append(line)
    return lines
