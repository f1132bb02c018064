"""Vector add, out = x + y: the smallest memory-bound kernel, one element per lane."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from triton_sweep.kernels.spec import KernelSpec, compiled, element_size, is_power_of_two, seeded_randn


@triton.jit
def _vector_add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid.to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def vector_add(x, y, *, BLOCK_SIZE=1024, num_warps=4, num_stages=1, out=None):
    if x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:
        raise ValueError(f"x and y must match: {tuple(x.shape)} {x.dtype} vs {tuple(y.shape)} {y.dtype}")
    if not (x.is_contiguous() and y.is_contiguous()):
        raise ValueError("vector_add needs contiguous inputs")
    if not is_power_of_two(BLOCK_SIZE):
        raise ValueError(f"BLOCK_SIZE must be a power of 2, got {BLOCK_SIZE}")
    out = torch.empty_like(x) if out is None else out
    n_elements = x.numel()
    grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
    _vector_add_kernel[grid](
        x, y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps, num_stages=num_stages
    )
    return out


def vector_add_ref(x, y):
    return x + y  # reads 2n, writes n


def _make_inputs(shape, dtype, seed, device):
    return seeded_randn(shape, dtype, seed, device), seeded_randn(shape, dtype, seed + 1, device)


def _bytes_moved(shape, dtype):
    (n,) = shape
    return 3 * n * element_size(dtype)  # x and y read once, out written once


def _constraints(shape, dtype, config):
    (n,) = shape
    if config["BLOCK_SIZE"] > 4 * triton.next_power_of_2(n):
        return f"BLOCK_SIZE {config['BLOCK_SIZE']} > 4x the {n} elements: most lanes would be masked off"
    return None


SPEC = KernelSpec(
    name="vector_add",
    dims=("n",),
    dtypes=("float16", "bfloat16", "float32"),
    make_inputs=_make_inputs,
    output_like=lambda inputs: torch.empty_like(inputs[0]),
    launch=lambda inputs, out, config: vector_add(*inputs, out=out, **config),
    reference=vector_add_ref,
    flops=lambda shape: shape[0],
    bytes_moved=_bytes_moved,
    space={"BLOCK_SIZE": [256, 512, 1024, 2048, 4096], "num_warps": [2, 4, 8], "num_stages": [1]},
    constraints=_constraints,
    # x + y is both the eager code and the native op: one baseline, plus torch.compile of it.
    baselines={"torch": lambda inputs: vector_add_ref(*inputs), "compile": compiled(vector_add_ref)},
    export_key={"n_elements": "n"},
    default_shapes=((1 << 20,), (1 << 24,), (1 << 28,)),
)
