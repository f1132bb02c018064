"""Report (GPU): is the kernel fused? GPU kernels launched per call, per provider, from torch.profiler.

    python -m triton_sweep.benchmarks.fusion_report --kernel fused_gelu --shape 8192 8192 [--dtype float16]

Ours should launch exactly one kernel per call; the eager chain launches one per op; torch.compile
somewhere in between. Each provider runs once to warm up (torch.compile compiles there), then `--calls`
times under the profiler; the count is the CUDA kernels seen divided by the calls.
"""
from __future__ import annotations

import argparse

from triton_sweep.model.trial import TRITON_PROVIDER

from triton_sweep.model.spec_sources import load_spec


def kernels_per_call(run, calls: int) -> float:
    import torch
    from torch.profiler import ProfilerActivity, profile

    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
    launched = [e for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return len(launched) / calls


def main(argv=None) -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernel", required=True)
    parser.add_argument("--shape", type=int, nargs="+", required=True)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--config", nargs="*", default=[],
                        help="NAME=VALUE; default: the first of each SPEC.space list")
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args(argv)

    spec = load_spec(args.kernel, None)
    shape = tuple(args.shape)
    config = {name: values[0] for name, values in spec.space.items()}
    config.update({k: int(v) for k, v in (item.split("=") for item in args.config)})
    reason = spec.constraints(shape, args.dtype, config)
    if reason:
        raise SystemExit(f"error: --config {config} cannot run at {shape}: {reason}")
    inputs = spec.make_inputs(shape, getattr(torch, args.dtype), 0, torch.device("cuda"))
    out = spec.output_like(inputs)
    providers = {TRITON_PROVIDER: lambda: spec.launch(inputs, out, config)}
    providers.update({name: (lambda b=baseline: b(inputs)) for name, baseline in spec.baselines.items()})

    print(f"\n{args.kernel} {'x'.join(map(str, shape))} {args.dtype}, ours with {config}")
    print(f"{'provider':<10} {'GPU kernels per call':>22}")
    for name, run in providers.items():
        print(f"{name:<10} {kernels_per_call(run, args.calls):>22.1f}")


if __name__ == "__main__":
    main()
