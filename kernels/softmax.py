"""Fused row softmax, one program per row: the whole row sits in one block, read once, written once.

The eager version (softmax_ref) moves about 8·M·N elements (5 reads, 3 writes); this kernel moves
2·M·N. Rows longer than one block need the online recurrence (issue: softmax_online).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from triton_sweep.kernels.spec import (KernelSpec, compiled, element_size, is_power_of_two, seeded_randn,
                                       spilled_block_reason)

# Triton caps a block at 2**20 elements; past 64K fp32 values a single program spills heavily anyway.
MAX_BLOCK_SIZE = 65536


@triton.jit
def _softmax_kernel(
    out_ptr, in_ptr,
    n_cols,
    in_row_stride, out_row_stride,
    BLOCK_SIZE: tl.constexpr,
):
    # int64 row offset: 65536 rows x 65536 cols overflows int32.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    # -inf in the masked lanes leaves max and sum unchanged; fp32 math whatever the storage dtype.
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    numerator = tl.exp(x)
    denominator = tl.sum(numerator, axis=0)
    y = numerator / denominator
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x, *, BLOCK_SIZE=None, num_warps=4, num_stages=1, out=None):
    if x.ndim != 2:
        raise ValueError(f"softmax expects a 2-D tensor, got shape {tuple(x.shape)}")
    if x.stride(1) != 1:
        raise ValueError("softmax needs unit stride along the rows (x.stride(1) == 1)")
    n_rows, n_cols = x.shape
    BLOCK_SIZE = triton.next_power_of_2(n_cols) if BLOCK_SIZE is None else BLOCK_SIZE
    if not is_power_of_two(BLOCK_SIZE) or BLOCK_SIZE < n_cols:
        raise ValueError(f"BLOCK_SIZE must be a power of 2 >= the row length {n_cols}, got {BLOCK_SIZE}")
    out = torch.empty_like(x) if out is None else out
    if out.stride(1) != 1:
        raise ValueError("softmax needs an output with unit stride along the rows")
    grid = lambda meta: (n_rows,)
    _softmax_kernel[grid](
        out, x, n_cols, x.stride(0), out.stride(0),
        BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps, num_stages=num_stages,
    )
    return out


def softmax_ref(x):
    """The eager softmax a student writes; per-line traffic in elements for an M x N input."""
    x_max = x.max(dim=1, keepdim=True).values  # read MN, write M
    z = x - x_max  # read MN + M, write MN
    numerator = torch.exp(z)  # read MN, write MN
    denominator = numerator.sum(dim=1, keepdim=True)  # read MN, write M
    return numerator / denominator  # read MN + M, write MN


def _bytes_moved(shape, dtype):
    n_rows, n_cols = shape
    return 2 * n_rows * n_cols * element_size(dtype)  # the input read once, the output written once


def _flops(shape):
    n_rows, n_cols = shape
    return 5 * n_rows * n_cols  # max, subtract, exp, sum, divide per element


def _constraints(shape, dtype, config):
    n_rows, n_cols = shape
    block = config["BLOCK_SIZE"]
    if block < n_cols:
        return f"BLOCK_SIZE {block} < row length {n_cols}: one program must hold a whole row"
    if block >= 4 * n_cols:
        return f"BLOCK_SIZE {block} >= 4x row length {n_cols}: three quarters of every load masked off"
    if block > MAX_BLOCK_SIZE:
        return f"BLOCK_SIZE {block} > {MAX_BLOCK_SIZE}: beyond what one program holds"
    warps = config.get("num_warps", 4)  # the launcher's default
    if block < 32 * warps:
        return f"BLOCK_SIZE {block} < the {32 * warps} threads of {warps} warps: threads left idle"
    return spilled_block_reason(config)


def _make_inputs(shape, dtype, seed, device):
    # Scaled so that exp() sees a realistic spread (logits of a few units), never all equal.
    return (seeded_randn(shape, torch.float32, seed, device).mul_(3.0).to(dtype),)


SPEC = KernelSpec(
    name="softmax",
    dims=("rows", "cols"),
    dtypes=("float16", "bfloat16", "float32"),
    make_inputs=_make_inputs,
    output_like=lambda inputs: torch.empty_like(inputs[0]),
    launch=lambda inputs, out, config: softmax(*inputs, out=out, **config),
    reference=softmax_ref,
    flops=_flops,
    bytes_moved=_bytes_moved,
    space={
        # from 128: the short rows of decode-time attention scores have a config too
        "BLOCK_SIZE": [128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768],
        "num_warps": [1, 2, 4, 8, 16, 32],
        "num_stages": [1],
    },
    constraints=_constraints,
    baselines={"eager": lambda inputs: softmax_ref(*inputs),
               "torch": lambda inputs: torch.softmax(inputs[0], dim=-1),
               "compile": compiled(softmax_ref)},
    export_key={"n_cols": "cols"},
    launch_shape=lambda args: tuple(args["in_ptr"][1]),  # rows, cols: one program a row
    default_shapes=((4096, 1024), (4096, 4096), (2048, 16384)),
)
