"""Row softmax for rows of any length: one read when the row fits a block, else the online recurrence.

When BLOCK_SIZE >= the row length (SINGLE_PASS) the row is read once into registers, as in
kernels/softmax.py: 2·M·N elements moved. A longer row takes two passes. Pass 1 walks the row block by
block keeping a running max m and a running sum l of exp(x - m), rescaling l whenever m grows; pass 2
reads the row again, last block first, and writes exp(x - m) / l. HBM traffic then lies between 2·M·N
elements (the second read all from L2) and 3·M·N (all missed); the byte model counts the 2·M·N the op
must move, so a fully missed second read caps the looped kernel at 67% of copy bandwidth. How much of
it hits L2 depends on the bytes in flight: every SM works on rows of N elements at once, so at
1024x131072 fp16 (256 KB a row) the rows in flight outgrow the 50-60 MB L2.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from triton_sweep.kernels.softmax import SPEC as SINGLE_BLOCK_SOFTMAX
from triton_sweep.kernels.softmax import softmax_ref
from triton_sweep.kernels.spec import KernelSpec, compiled, element_size, looped_row_reason


@triton.jit
def _softmax_online_kernel(
    out_ptr, in_ptr,
    n_cols,
    in_row_stride, out_row_stride,
    BLOCK_SIZE: tl.constexpr, SINGLE_PASS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    in_row = in_ptr + row * in_row_stride
    out_row = out_ptr + row * out_row_stride
    cols = tl.arange(0, BLOCK_SIZE)
    if SINGLE_PASS:  # the whole row in registers: read once, written once
        mask = cols < n_cols
        # -inf in the masked lanes leaves max and sum unchanged.
        x = tl.load(in_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        numerator = tl.exp(x - tl.max(x, axis=0))
        y = numerator / tl.sum(numerator, axis=0)
        tl.store(out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    else:  # online max and sum over blocks, then a second read to normalize
        # Per-lane running max m and sum s of exp(x - m), reduced across lanes once at the end. One exp
        # per element: exp(-|x - m|) either rescales s (x is the new max) or is added to it.
        running_max = tl.full([BLOCK_SIZE], -float("inf"), dtype=tl.float32)
        running_sum = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_SIZE):
            mask = start + cols < n_cols
            # evict_last: pass 2 reads the row again; keep it in L2 over the output's lines
            x = tl.load(in_row + start + cols, mask=mask, other=-float("inf"), eviction_policy="evict_last")
            x = x.to(tl.float32)
            new_max = tl.maximum(running_max, x)
            # A lane that has seen only -inf keeps max -inf; -inf - -inf would be NaN, so subtract 0 there.
            decay = tl.exp(tl.minimum(running_max, x) - tl.where(new_max == -float("inf"), 0.0, new_max))
            running_sum = tl.where(x > running_max, running_sum * decay + 1.0, running_sum + decay)
            running_max = new_max
        row_max = tl.max(running_max, axis=0)
        inverse_sum = 1.0 / tl.sum(running_sum * tl.exp(running_max - row_max), axis=0)
        # Pass 2 walks the blocks last to first, for L2 reuse: the blocks pass 1 read last are the likeliest
        # still in L2. In order, it would first ask for the oldest blocks, the first evicted, and each miss
        # would evict the next block it needs. Its loads are the row's last use (evict_first), and its
        # stores stream past L2 (.cs), so that neither evicts the blocks still to be read. Best config on
        # an H200, fp16, % of copy at 1024x131072 / 256x262144: in order 57.6 / 53.7; reversed 62.7 / 56.0;
        # reversed with the hints and one exp per element 65.7 / 57.4 (BENCHMARKS.md, variant study).
        n_blocks = tl.cdiv(n_cols, BLOCK_SIZE)
        for block in range(n_blocks):
            start = (n_blocks - 1 - block) * BLOCK_SIZE  # the first block seen is the ragged last one
            mask = start + cols < n_cols
            x = tl.load(in_row + start + cols, mask=mask, other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
            y = tl.exp(x - row_max) * inverse_sum
            tl.store(out_row + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask, cache_modifier=".cs")


def softmax_online(x, *, BLOCK_SIZE=4096, num_warps=8, num_stages=2, out=None):
    if x.ndim != 2 or x.stride(1) != 1:
        raise ValueError("softmax_online expects a 2-D tensor with unit stride along rows, got "
                         f"{tuple(x.shape)}")
    out = torch.empty_like(x) if out is None else out
    n_rows, n_cols = x.shape
    grid = lambda meta: (n_rows,)
    _softmax_online_kernel[grid](
        out, x, n_cols, x.stride(0), out.stride(0),
        BLOCK_SIZE=BLOCK_SIZE, SINGLE_PASS=BLOCK_SIZE >= n_cols, num_warps=num_warps, num_stages=num_stages,
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
    # 16384 and 32768 let rows up to 32K columns take the single pass (kernels/softmax.py reached ~80% of
    # copy at 2048x16384 fp16 with BLOCK 16384 and 32 warps on an H200, the looped kernel 63% at 4096x16384).
    space={"BLOCK_SIZE": [1024, 2048, 4096, 8192, 16384, 32768], "num_warps": [4, 8, 16, 32],
           "num_stages": [1, 2, 3]},
    constraints=lambda shape, dtype, config: looped_row_reason(config, shape[1]),
    baselines={"eager": lambda inputs: softmax_ref(*inputs),
               "torch": lambda inputs: torch.softmax(inputs[0], dim=-1),
               "compile": compiled(softmax_ref)},
    export_key={"n_cols": "cols"},
    launch_shape=lambda args: tuple(args["in_ptr"][1]),  # rows, cols: one program a row
    default_shapes=((4096, 16384), (1024, 131072), (256, 262144)),
)
