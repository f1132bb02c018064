"""Softmax made slower inside the kernel: the gate's test of a real regression on the GPU
(runners/benchmarks/bench_gate.py). Every program reads its SM's cycle counter when it starts and after
its store, then spins for a share of the cycles it took: it holds its SM that much longer, so the
kernel takes longer. The share, in per mille, comes from SOFTMAX_SPIN_PER_MILLE (an environment variable,
read at each launch): one number for every row length, or `n_cols:per_mille` pairs (`1024:72,4096:310`),
0 where a row length is not named. How much slower a share makes a kernel depends on its shape and
config (waves, occupancy), so bench_gate measures it and picks the share that gives the slowdown asked.
Its name, space and baselines are softmax's, so its trials match softmax's trial by trial:

    SOFTMAX_SPIN_PER_MILLE=50 python -m runners.sweep kernel=external kernel.spec=tests.softmax_slowed:SPEC

With the variable unset, neither the counter reads nor the spin are compiled in (a constexpr branch):
the kernel is softmax's, which the interpreter runs (tests/test_compare.py); the cycle counter exists on
the GPU only. Set to 0, the reads are there and the spin is empty: the base a slowed run compares with.
"""

import dataclasses
import os

import triton
import triton.language as tl

from kernels import softmax

SPIN_VARIABLE = "SOFTMAX_SPIN_PER_MILLE"


@triton.jit
def _cycles():
    return tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False,
                                     pack=1)


@triton.jit
def _softmax_slowed_kernel(out_ptr, in_ptr, n_cols, in_row_stride, out_row_stride,
                           SLOWDOWN_PER_MILLE: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    # -1: no cycle counter read at all (softmax as it is). 0 and up: the counter read twice and a spin of
    # that share, so that the base and the slowed kernels differ by the spin alone: the two reads cost
    # 8% at 2048x16384 with 32 warps on an H200, more than the slowdowns asked.
    if SLOWDOWN_PER_MILLE >= 0:
        began = _cycles()
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    numerator = tl.exp(x)
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    if SLOWDOWN_PER_MILLE >= 0:
        took = _cycles() - began
        until = began + took + took * SLOWDOWN_PER_MILLE // 1000
        while _cycles() < until:
            pass


def spin_per_mille(n_cols: int) -> int:
    """The share of its own cycles every program spins at this row length (SOFTMAX_SPIN_PER_MILLE); -1
    where the variable is not set: no spin and no counter read."""
    setting = os.environ.get(SPIN_VARIABLE, "").strip()
    if not setting:
        return -1
    if ":" not in setting:
        return int(setting)
    shares = dict(item.split(":") for item in setting.split(","))
    return int(shares.get(str(n_cols), 0))


def _launch(inputs, out, config):
    (x,) = inputs
    n_rows, n_cols = x.shape
    _softmax_slowed_kernel[(n_rows,)](out, x, n_cols, x.stride(0), out.stride(0),
                                      SLOWDOWN_PER_MILLE=spin_per_mille(n_cols), **config)


SPEC = dataclasses.replace(softmax.SPEC, launch=_launch)

