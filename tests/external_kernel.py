"""A kernel that lives outside kernels/ and plugs in by import path:
python -m runners.sweep kernel=external kernel.spec=tests.external_kernel:SPEC kernel.shapes=[[33,70]] \\
    kernel.dtypes=[float32]
"""
import torch
import triton
import triton.language as tl

from kernels.spec import KernelSpec, seeded_randn


@triton.jit
def _scale_rows_kernel(out_ptr, x_ptr, scale_ptr, n_cols, x_row_stride, out_row_stride,
                       BLOCK_COLS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    cols = block * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask).to(tl.float32)
    scale = tl.load(scale_ptr + row).to(tl.float32)
    tl.store(out_ptr + row * out_row_stride + cols, (x * scale).to(out_ptr.dtype.element_ty), mask=mask)


def scale_rows(x, scale, *, BLOCK_COLS=64, num_warps=4, num_stages=1, out=None):
    out = torch.empty_like(x) if out is None else out
    n_rows, n_cols = x.shape
    grid = lambda meta: (n_rows, triton.cdiv(n_cols, meta["BLOCK_COLS"]))
    _scale_rows_kernel[grid](out, x, scale, n_cols, x.stride(0), out.stride(0),
                             BLOCK_COLS=BLOCK_COLS, num_warps=num_warps, num_stages=num_stages)
    return out


def scale_rows_ref(x, scale):
    return x * scale[:, None]


def _make_inputs(shape, dtype, seed, device):
    return seeded_randn(shape, dtype, seed, device), seeded_randn(shape[:1], dtype, seed + 1, device)


SPEC = KernelSpec(
    name="scale_rows",
    dims=("rows", "cols"),
    dtypes=("float16", "float32"),
    make_inputs=_make_inputs,
    output_like=lambda inputs: torch.empty_like(inputs[0]),
    launch=lambda inputs, out, config: scale_rows(*inputs, out=out, **config),
    reference=scale_rows_ref,
    flops=lambda shape: shape[0] * shape[1],
    bytes_moved=lambda shape, dtype: ((2 * shape[0] * shape[1] + shape[0])
                                      * torch.empty((), dtype=dtype).element_size()),
    space={"BLOCK_COLS": [32, 64], "num_warps": [1, 2], "num_stages": [1]},
    baselines={"torch": lambda inputs: scale_rows_ref(*inputs)},
    # python -m runners.capture: rows are no argument of the kernel, x's shape gives them
    launch_shape=lambda args: tuple(args["x_ptr"][1]),
)
