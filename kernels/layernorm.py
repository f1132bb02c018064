"""LayerNorm forward with weight and bias; statistics in fp32; mean and rstd stored for a backward pass.

A row that fits in one block (SINGLE_PASS) is read once (2·M·N elements moved in all). A longer row
(up to 64K columns and beyond) is read twice: one pass for the shifted sum and sum of squares, then one
to normalize that walks the blocks last to first, so that its first reads are the likeliest to hit L2.
HBM traffic for the looped path then lies between 2·M·N elements and 3·M·N (a second read that always
misses); the byte model counts the 2·M·N the op must move.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from triton_sweep.kernels.spec import KernelSpec, compiled, element_size, looped_row_reason, seeded_randn

EPS = 1e-5


@triton.jit
def _layernorm_kernel(
    out_ptr, mean_ptr, rstd_ptr, x_ptr, weight_ptr, bias_ptr,
    n_cols,
    x_row_stride, out_row_stride,
    eps,
    BLOCK_SIZE: tl.constexpr, SINGLE_PASS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    out_row = out_ptr + row * out_row_stride
    cols = tl.arange(0, BLOCK_SIZE)
    if SINGLE_PASS:  # the whole row in registers: read once
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / n_cols
        centered = tl.where(mask, x - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / n_cols + eps)
        weight = tl.load(weight_ptr + cols, mask=mask).to(tl.float32)
        bias = tl.load(bias_ptr + cols, mask=mask).to(tl.float32)
        tl.store(out_row + cols, (centered * rstd * weight + bias).to(out_ptr.dtype.element_ty), mask=mask)
    else:  # sums over blocks, then a second read to normalize
        # Sums of x - shift, shift = the row's first value: E[d^2] - E[d]^2 then cancels only as much as
        # the spread around that value, not around 0 (plain sums lost the fp32 gate at mean 30, std 1).
        shift = tl.load(x_row).to(tl.float32)
        total = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        total_sq = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_SIZE):
            mask = start + cols < n_cols
            x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            d = tl.where(mask, x - shift, 0.0)
            total += d
            total_sq += d * d
        mean_shifted = tl.sum(total, axis=0) / n_cols
        mean = shift + mean_shifted
        variance = tl.maximum(tl.sum(total_sq, axis=0) / n_cols - mean_shifted * mean_shifted, 0.0)
        rstd = 1.0 / tl.sqrt(variance + eps)
        # Last block first, for L2 reuse: the blocks the sums read last are the likeliest still in L2, while
        # in order each miss on the oldest block would evict the next one needed. In order, this path
        # reached 65% of copy at 2048x65536 fp16 on an H200 (89.5% in one block), under the 67% of a second
        # read that always misses; the gain of the reversal is still to be measured on the GPU.
        n_blocks = tl.cdiv(n_cols, BLOCK_SIZE)
        for block in range(n_blocks):
            start = (n_blocks - 1 - block) * BLOCK_SIZE  # the first block seen is the ragged last one
            mask = start + cols < n_cols
            x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            weight = tl.load(weight_ptr + start + cols, mask=mask).to(tl.float32)
            bias = tl.load(bias_ptr + start + cols, mask=mask).to(tl.float32)
            y = (x - mean) * rstd * weight + bias
            tl.store(out_row + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


def layernorm(x, weight, bias, *, eps=EPS, BLOCK_SIZE=1024, num_warps=4, num_stages=1, out=None):
    """Returns (out, mean, rstd); mean and rstd are fp32, one per row."""
    if x.ndim != 2 or weight.shape != (x.shape[1],) or bias.shape != (x.shape[1],):
        raise ValueError(f"expects x (M, N), weight and bias (N,); got {tuple(x.shape)}, "
                         f"{tuple(weight.shape)}, {tuple(bias.shape)}")
    if x.stride(1) != 1 or not (weight.is_contiguous() and bias.is_contiguous()):
        raise ValueError("layernorm needs unit stride along the rows of x, contiguous weight and bias")
    n_rows, n_cols = x.shape
    if out is None:
        out = (torch.empty_like(x), torch.empty(n_rows, device=x.device, dtype=torch.float32),
               torch.empty(n_rows, device=x.device, dtype=torch.float32))
    y, mean, rstd = out
    grid = lambda meta: (n_rows,)
    _layernorm_kernel[grid](
        y, mean, rstd, x, weight, bias, n_cols, x.stride(0), y.stride(0), eps,
        BLOCK_SIZE=BLOCK_SIZE, SINGLE_PASS=BLOCK_SIZE >= n_cols, num_warps=num_warps, num_stages=num_stages,
    )
    return out


def layernorm_ref(x, weight, bias, eps=EPS):
    """LayerNorm as a student writes it, with the statistics it returns; traffic in elements (M x N)."""
    mean = x.mean(dim=1)  # read MN, write M
    centered = x - mean[:, None]  # read MN + M, write MN
    variance = (centered * centered).mean(dim=1)  # read 2MN, write MN + M
    rstd = torch.rsqrt(variance + eps)  # read M, write M
    return centered * rstd[:, None] * weight + bias, mean, rstd  # read 3MN, write 3MN


def _output_like(inputs):
    x = inputs[0]
    stats = lambda: torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    return torch.empty_like(x), stats(), stats()


def _make_inputs(shape, dtype, seed, device):
    n_rows, n_cols = shape
    x = seeded_randn(shape, torch.float32, seed, device).mul_(2.0).add_(0.5).to(dtype)  # nonzero mean
    weight = seeded_randn((n_cols,), dtype, seed + 1, device)
    bias = seeded_randn((n_cols,), dtype, seed + 2, device)
    return x, weight, bias


def _bytes_moved(shape, dtype):
    n_rows, n_cols = shape
    # x read once, y written once, weight and bias read once, mean and rstd written (fp32).
    return (2 * n_rows * n_cols + 2 * n_cols) * element_size(dtype) + 2 * n_rows * 4


SPEC = KernelSpec(
    name="layernorm",
    dims=("rows", "cols"),
    dtypes=("float16", "bfloat16", "float32"),
    make_inputs=_make_inputs,
    output_like=_output_like,
    launch=lambda inputs, out, config: layernorm(*inputs, out=out, **config),
    reference=layernorm_ref,
    flops=lambda shape: 8 * shape[0] * shape[1],
    bytes_moved=_bytes_moved,
    # 32768 with up to 32 warps lets rows up to 32K columns take the single pass. num_stages 2 on the
    # looped path tied 1 within the noise at 2048x65536 fp16 on an H200 (180.5 and 180.9 us), so the
    # default space leaves it out.
    space={"BLOCK_SIZE": [512, 1024, 2048, 4096, 8192, 16384, 32768], "num_warps": [2, 4, 8, 16, 32],
           "num_stages": [1]},
    constraints=lambda shape, dtype, config: looped_row_reason(config, shape[1]),
    # Baselines return the normalized tensor only (F.layer_norm keeps no statistics); the gate compares
    # a baseline with the reference's first output.
    baselines={
        "eager": lambda inputs: layernorm_ref(*inputs)[0],
        "torch": lambda inputs: torch.nn.functional.layer_norm(inputs[0], inputs[0].shape[1:], *inputs[1:],
                                                               eps=EPS),
        "compile": compiled(lambda x, weight, bias: layernorm_ref(x, weight, bias)[0]),
    },
    export_key={"n_cols": "cols"},
    launch_shape=lambda args: tuple(args["x_ptr"][1]),  # rows, cols: one program a row
    default_shapes=((16384, 4096), (8192, 8192), (2048, 65536)),
)
