"""How much of the copy ceiling a copy itself reaches at smaller sizes (a benchmark, not a test).

    python -m triton_sweep.benchmarks.bench_copy [--mib 8 32 64 128 256 1024]

The ceiling (runners/measure/device.py) is a 1 GiB device-to-device copy. A kernel that moves 64 MB each way
cannot reach it, even at copy speed: launching, filling the GPU and draining the last wave cost a few
microseconds whatever the size. This times torch's copy at each size (MiB each way), with the same
timer and L2 flush as every trial, and prints its share of the 1 GiB figure: the reachable share at
that size, to read a row kernel's "% of copy" against.
"""
from __future__ import annotations

import argparse

from triton_sweep.measure.device import COPY_BYTES, PEAK_RULE, cuda_timer, measure_copy
from triton_sweep.measure.stop_rule import StopRule


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256, 512])
    args = parser.parse_args(argv)
    rule = StopRule(**PEAK_RULE)
    timer = cuda_timer(0, rule, warmup_s=0.05)
    _, ceiling = measure_copy(timer, timer.device, COPY_BYTES, rule)
    print(f"copy ceiling, {COPY_BYTES >> 20} MiB each way: {ceiling:.0f} GB/s")
    print("| MiB each way | p50 us | GB/s | % of the ceiling |\n|---|---|---|---|")
    for mib in args.mib:
        p50_us, gbps = measure_copy(timer, timer.device, mib << 20, rule)
        print(f"| {mib} | {p50_us:.2f} | {gbps:.0f} | {100 * gbps / ceiling:.1f} |", flush=True)


if __name__ == "__main__":
    main()
