"""Benchmark (GPU): our timer's p50 next to triton.testing.do_bench's median, same kernel, same inputs.

    python -m runners.bench_timer [--kernel softmax] [--shape 8192 4096] [--config BLOCK_SIZE=4096 num_warps=8]

Alternates the two timers several rounds so that clock drift hits both alike, then prints a table.
"""
from __future__ import annotations

import argparse
import statistics

from runners.timing import StopRule, summarize
from runners.trials import load_spec


def main(argv=None) -> None:
    import torch
    import triton.testing

    from runners.device import cuda_timer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernel", default="softmax")
    parser.add_argument("--shape", type=int, nargs="+", default=[8192, 4096])
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--config", nargs="+", default=["BLOCK_SIZE=4096", "num_warps=8", "num_stages=1"])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    spec = load_spec(args.kernel, None)
    config = {k: int(v) for k, v in (item.split("=") for item in args.config)}
    device = torch.device("cuda", 0)
    inputs = spec.make_inputs(tuple(args.shape), getattr(torch, args.dtype), 0, device)
    out = spec.output_like(inputs)
    run = lambda: spec.launch(inputs, out, config)
    timer = cuda_timer(0, StopRule(10, 0.25, 0.005, 2.0), 0.05)

    ours, theirs = [], []
    for _ in range(args.rounds):
        ours.append(summarize(timer.measure(run).samples_s)["p50_us"])
        # do_bench: warmup and rep in ms; it flushes a 256 MB buffer before each call, as we flush 2x L2.
        theirs.append(triton.testing.do_bench(run, warmup=25, rep=250, return_mode="median") * 1e3)
    label = f"{args.kernel} {'x'.join(map(str, args.shape))} {args.dtype} {config}"
    print(f"\n{label} on {torch.cuda.get_device_name(0)}, {args.rounds} alternating rounds")
    print(f"{'timer':<28} {'median of rounds (us)':>22} {'min round':>10} {'max round':>10}")
    for name, values in (("runners.timing p50", ours), ("triton do_bench median", theirs)):
        print(f"{name:<28} {statistics.median(values):>22.2f} {min(values):>10.2f} {max(values):>10.2f}")
    print(f"ratio ours / do_bench: {statistics.median(ours) / statistics.median(theirs):.3f}")


if __name__ == "__main__":
    main()
