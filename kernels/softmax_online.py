"""Row softmax for rows longer than one block (up to 256K columns and beyond): the online recurrence.

Pass 1 walks the row block by block keeping a running max m and a running sum l of exp(x - m),
rescaling l whenever m grows; pass 2 reads the row again and writes exp(x - m) / l. The second read
often hits L2 (a 128K-column fp16 row is 256 KB), so traffic from HBM lies between 2·M·N and 3·M·N
elements; the byte model counts the 2·M·N the op must move.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.softmax import SPEC as SINGLE_BLOCK_SOFTMAX
from kernels.softmax import softmax_ref
from kernels.spec import KernelSpec, compiled, element_size, looped_row_block_reason


@triton.jit
def _softmax_online_kernel(
    out_ptr, in_ptr,
    n_cols,
    in_row_stride, out_row_stride,
    BLOCK_SIZE: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    in_row = in_ptr + row * in_row_stride
    out_row = out_ptr + row * out_row_stride
    cols = tl.arange(0, BLOCK_SIZE)
    # Per-lane running max and sum: one rescale per block per lane, reduced across lanes once at the end.
    running_max = tl.full([BLOCK_SIZE], -float("inf"), dtype=tl.float32)
    running_sum = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(in_row + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        new_max = tl.maximum(running_max, x)
        # A lane that has seen only -inf keeps max -inf; exp(-inf - -inf) would be NaN, so guard it.
        safe_max = tl.where(new_max == -float("inf"), 0.0, new_max)
        running_sum = running_sum * tl.exp(running_max - safe_max) + tl.exp(x - safe_max)
        running_max = new_max
    row_max = tl.max(running_max, axis=0)
    row_sum = tl.sum(running_sum * tl.exp(running_max - row_max), axis=0)
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(in_row + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        y = tl.exp(x - row_max) / row_sum
        tl.store(out_row + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax_online(x, *, BLOCK_SIZE=4096, num_warps=8, num_stages=2, out=None):
    if x.ndim != 2 or x.stride(1) != 1:
        raise ValueError(f"softmax_online expects a 2-D tensor with unit stride along rows, got {tuple(x.shape)}")
    out = torch.empty_like(x) if out is None else out
    n_rows, n_cols = x.shape
    grid = lambda meta: (n_rows,)
    _softmax_online_kernel[grid](
        out, x, n_cols, x.stride(0), out.stride(0),
        BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps, num_stages=num_stages,
    )
    return out


SPEC = KernelSpec(
    name="softmax_online",
    dims=("rows", "cols"),
    dtypes=("float16", "bfloat16", "float32"),
    make_inputs=SINGLE_BLOCK_SOFTMAX.make_inputs,  # the same logits as the one-block softmax
    output_like=lambda inputs: torch.empty_like(inputs[0]),
    launch=lambda inputs, out, config: softmax_online(*inputs, out=out, **config),
    reference=softmax_ref,
    flops=lambda shape: 5 * shape[0] * shape[1],
    bytes_moved=lambda shape, dtype: 2 * shape[0] * shape[1] * element_size(dtype),
    space={"BLOCK_SIZE": [1024, 2048, 4096, 8192], "num_warps": [4, 8, 16], "num_stages": [1, 2, 3]},
    constraints=lambda shape, dtype, config: looped_row_block_reason(config["BLOCK_SIZE"], shape[1]),
    baselines={"eager": lambda inputs: softmax_ref(*inputs), "torch": lambda inputs: torch.softmax(inputs[0], dim=-1),
               "compile": compiled(softmax_ref)},
)
