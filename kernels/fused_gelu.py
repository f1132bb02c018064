"""Fused GELU chain, y = (gelu_tanh(x) + bias) * scale, in one pass; bias broadcast over rows.

The eager chain (fused_gelu_ref in the input dtype) makes one pass over the tensor per op, 11 ops:
it reads 15·M·N and writes 11·M·N elements as counted below, 26·M·N against 2·M·N here: 13x.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from triton_sweep.kernels.spec import KernelSpec, compiled, element_size, seeded_randn

SQRT_2_OVER_PI = 0.7978845608  # the tanh approximation's constants
GELU_CUBIC = 0.044715


@triton.jit
def _fused_gelu_kernel(
    out_ptr, x_ptr, bias_ptr,
    n_rows, n_cols,
    x_row_stride, out_row_stride,
    scale,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < n_rows
    col_mask = cols < n_cols
    mask = row_mask[:, None] & col_mask[None, :]
    rows64 = rows.to(tl.int64)  # int64 offsets: 65536 x 65536 elements overflow int32
    x = tl.load(x_ptr + rows64[:, None] * x_row_stride + cols[None, :], mask=mask).to(tl.float32)
    bias = tl.load(bias_ptr + cols, mask=col_mask).to(tl.float32)  # once per tile, reused by BLOCK_M rows
    inner = 0.7978845608 * (x + 0.044715 * x * x * x)
    tanh_inner = 2.0 * tl.sigmoid(2.0 * inner) - 1.0  # tanh(u) = 2*sigmoid(2u) - 1, exact in fp32 range
    y = (0.5 * x * (1.0 + tanh_inner) + bias[None, :]) * scale
    tl.store(out_ptr + rows64[:, None] * out_row_stride + cols[None, :], y.to(out_ptr.dtype.element_ty),
             mask=mask)


def fused_gelu(x, bias, scale, *, BLOCK_M=4, BLOCK_N=1024, num_warps=4, num_stages=1, out=None):
    if x.ndim != 2 or bias.shape != (x.shape[1],):
        raise ValueError(f"expects x (M, N) and bias (N,), got {tuple(x.shape)} and {tuple(bias.shape)}")
    if x.stride(1) != 1 or not bias.is_contiguous():
        raise ValueError("fused_gelu needs unit stride along the rows of x and a contiguous bias")
    out = torch.empty_like(x) if out is None else out
    n_rows, n_cols = x.shape
    grid = lambda meta: (triton.cdiv(n_rows, meta["BLOCK_M"]), triton.cdiv(n_cols, meta["BLOCK_N"]))
    _fused_gelu_kernel[grid](
        out, x, bias, n_rows, n_cols, x.stride(0), out.stride(0), float(scale),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=num_warps, num_stages=num_stages,
    )
    return out


def fused_gelu_ref(x, bias, scale):
    """The chain as a student writes it; per-line traffic in elements for an M x N input."""
    cube = x * x * x  # two multiplies: read 4MN, write 2MN
    inner = SQRT_2_OVER_PI * (x + GELU_CUBIC * cube)  # three ops: read 4MN, write 3MN
    gelu = 0.5 * x * (1 + torch.tanh(inner))  # four ops: read 5MN, write 4MN
    return (gelu + bias) * scale  # two ops: read 2MN + N, write 2MN


def _native(inputs):
    x, bias, scale = inputs
    return (torch.nn.functional.gelu(x, approximate="tanh") + bias) * scale


def _make_inputs(shape, dtype, seed, device):
    n_rows, n_cols = shape
    x = seeded_randn(shape, dtype, seed, device)
    bias = seeded_randn((n_cols,), dtype, seed + 1, device)
    return x, bias, 1.7  # scale: a plain Python float, as a model passes it


def _constraints(shape, dtype, config):
    n_rows, n_cols = shape
    if config["BLOCK_N"] >= 4 * triton.next_power_of_2(n_cols):
        return f"BLOCK_N {config['BLOCK_N']} >= 4x the {n_cols} columns: most lanes masked off"
    if config["BLOCK_M"] >= 4 * triton.next_power_of_2(n_rows):
        return f"BLOCK_M {config['BLOCK_M']} >= 4x the {n_rows} rows: most lanes masked off"
    if config["BLOCK_M"] * config["BLOCK_N"] > 16384:
        return f"tile {config['BLOCK_M']}x{config['BLOCK_N']} > 16384 elements: registers spill"
    return None


SPEC = KernelSpec(
    name="fused_gelu",
    dims=("rows", "cols"),
    dtypes=("float16", "bfloat16", "float32"),
    make_inputs=_make_inputs,
    output_like=lambda inputs: torch.empty_like(inputs[0]),
    launch=lambda inputs, out, config: fused_gelu(*inputs, out=out, **config),
    reference=fused_gelu_ref,
    flops=lambda shape: 11 * shape[0] * shape[1],  # the ops of the chain per element, tanh counted once
    bytes_moved=lambda shape, dtype: (2 * shape[0] * shape[1] + shape[1]) * element_size(dtype),
    space={"BLOCK_M": [1, 2, 4, 8, 16], "BLOCK_N": [256, 512, 1024, 2048, 4096], "num_warps": [4, 8],
           "num_stages": [1]},
    constraints=_constraints,
    baselines={"eager": lambda inputs: fused_gelu_ref(*inputs), "torch": _native,
               "compile": compiled(fused_gelu_ref)},
    export_key={"n_rows": "rows", "n_cols": "cols"},
    default_shapes=((4096, 4096), (8192, 8192), (16384, 11008)),
)
