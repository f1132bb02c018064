"""Softmax made slower by a known share, inside the kernel: the gate's test of a real regression on the
GPU (runners/benchmarks/bench_gate.py). Every program reads its SM's cycle counter when it starts and
after its store, then spins for SOFTMAX_SLOWDOWN_PERCENT (an environment variable, 0 by default) % of
the cycles it took: every program holds its SM that much longer, so the kernel takes about that much
longer. The figure is only what is asked: bench_gate measures what each setting gives, the slowed and
the unslowed kernels interleaved in one process. Its name, space and baselines are softmax's, so its
trials match softmax's trial by trial:

    SOFTMAX_SLOWDOWN_PERCENT=5 python -m runners.sweep kernel=external kernel.spec=tests.softmax_slowed:SPEC

At 0 the spin is not compiled in (a constexpr branch), and the kernel is softmax's, which the
interpreter runs (tests/test_compare.py); the cycle counter exists on the GPU only.
"""

import dataclasses
import os

import triton
import triton.language as tl

from kernels import softmax

SLOWDOWN_VARIABLE = "SOFTMAX_SLOWDOWN_PERCENT"


@triton.jit
def _cycles():
    return tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False,
                                     pack=1)


@triton.jit
def _softmax_slowed_kernel(out_ptr, in_ptr, n_cols, in_row_stride, out_row_stride,
                           SLOWDOWN_PER_MILLE: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    if SLOWDOWN_PER_MILLE > 0:
        began = _cycles()
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    numerator = tl.exp(x)
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    if SLOWDOWN_PER_MILLE > 0:
        took = _cycles() - began
        until = began + took + took * SLOWDOWN_PER_MILLE // 1000
        while _cycles() < until:
            pass


def slowdown_per_mille() -> int:
    return round(10 * float(os.environ.get(SLOWDOWN_VARIABLE, "0")))


def _launch(inputs, out, config):
    (x,) = inputs
    n_rows, n_cols = x.shape
    _softmax_slowed_kernel[(n_rows,)](out, x, n_cols, x.stride(0), out.stride(0),
                                      SLOWDOWN_PER_MILLE=slowdown_per_mille(), **config)


SPEC = dataclasses.replace(softmax.SPEC, launch=_launch)

