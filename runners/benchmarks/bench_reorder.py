"""Benchmark (CPU): how far fp32 sums in two orders differ, in the units of the gate's rule for a reference
in the kernel's own arithmetic (runners/measure/check.py REORDER_UNITS: units of fp32 roundoff at the
largest |value| of the result), against what dropping one term costs. Rows of n terms are summed as a
kernel whose block loops over the row does: blocks of B summed, then the partial sums added one by one.

    python -m triton_sweep.benchmarks.bench_reorder [--rows 64] [--n 1024,16384,262144]
"""
from __future__ import annotations

import argparse

import torch

BLOCKS = (16, 64, 256, 1024)
DATA = {"zero-mean": lambda r, n: torch.randn(r, n),
        "mean 1000": lambda r, n: 1000 + torch.randn(r, n),
        "products x300": lambda r, n: torch.randn(r, n) * torch.randn(r, n) * 300}


def blocked_sum(x: torch.Tensor, block: int) -> torch.Tensor:
    """Each row summed in blocks of `block`, the partial sums added in order, all in fp32."""
    parts = x.view(x.shape[0], -1, block).sum(-1)
    total = torch.zeros(x.shape[0])
    for k in range(parts.shape[1]):
        total = total + parts[:, k]
    return total


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--n", default="1024,16384,262144")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    unit = torch.finfo(torch.float32).eps
    print(f"{'n':>8} {'data':<14} {'max|sum|':>10} {'two orders differ':>18} {'one term dropped':>17}")
    for n in map(int, args.n.split(",")):
        for name, make in DATA.items():
            x = make(args.rows, n)
            sums = [blocked_sum(x, block) for block in BLOCKS if block <= n]
            scale = float(sums[0].abs().max()) * unit
            apart = max(float((a - b).abs().max()) for a in sums for b in sums)
            dropped = float(x[:, -1].abs().median())  # a config that leaves out the row's last term
            print(f"{n:>8} {name:<14} {float(sums[0].abs().max()):>10.3g} {apart / scale:>12.1f} units "
                  f"{dropped / scale:>11.0f} units")


if __name__ == "__main__":
    main()
