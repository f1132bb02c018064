"""A program with Triton kernels no spec describes, for `python -m runners.capture --replay`: one that
writes in place (x += alpha * y, a callable grid), one that reads an index tensor (rows gathered, a
fixed grid), one under @triton.autotune (a scaled row sum), and one defined inside a function (it
cannot be replayed: a replay imports a kernel from its module). It checks its own results, so a capture
of a program that computes wrongly fails too.

    TRITON_INTERPRET=1 python tests/replay_program.py
"""
import time

import torch
import triton
import triton.language as tl


def _wall_clock(kernel_call, quantiles=None):
    """The interpreter has no GPU driver for autotune's do_bench: configs timed by wall clock."""
    began = time.perf_counter()
    kernel_call()
    return [time.perf_counter() - began] * 3


@triton.jit
def axpy_inplace(x_ptr, y_ptr, alpha, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(x_ptr + offsets, x + alpha * y, mask=mask)


@triton.jit
def gather_rows(out_ptr, table_ptr, index_ptr, n_cols, BLOCK_COLS: tl.constexpr):
    row = tl.program_id(0)
    source = tl.load(index_ptr + row)
    cols = tl.arange(0, BLOCK_COLS)
    mask = cols < n_cols
    values = tl.load(table_ptr + source * n_cols + cols, mask=mask)
    tl.store(out_ptr + row * n_cols + cols, values, mask=mask)


@triton.autotune(configs=[triton.Config({"BLOCK": 32}, num_warps=1),
                          triton.Config({"BLOCK": 64}, num_warps=2),
                          triton.Config({"BLOCK": 128}, num_warps=4)],
                 key=["n_cols"],
                 do_bench=None if torch.cuda.is_available() else _wall_clock)
@triton.jit
def scaled_row_sum(out_ptr, x_ptr, scale, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        total += tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(total, axis=0) * scale)


def axpy(x, y, alpha):
    n = x.numel()
    axpy_inplace[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, alpha, n, BLOCK=64)


def gather(table, index):
    out = torch.empty(index.numel(), table.shape[1], dtype=table.dtype)
    block = triton.next_power_of_2(table.shape[1])
    gather_rows[(index.numel(),)](out, table, index, table.shape[1], BLOCK_COLS=block)
    return out


def row_sum(x, scale):
    out = torch.empty(x.shape[0], dtype=torch.float32)
    scaled_row_sum[(x.shape[0],)](out, x, scale, x.shape[1])
    return out


def negate(x):
    @triton.jit
    def negate_local(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(x_ptr + offsets, -tl.load(x_ptr + offsets, mask=mask), mask=mask)

    negate_local[(triton.cdiv(x.numel(), 64),)](x, x.numel(), BLOCK=64)


def main():
    generator = torch.Generator().manual_seed(0)
    for n in (100, 300, 300):
        x, y = torch.randn(n, generator=generator), torch.randn(n, generator=generator)
        expected = x + 0.5 * y
        axpy(x, y, 0.5)
        torch.testing.assert_close(x, expected)
    table = torch.randn(20, 24, generator=generator)
    for rows in (5, 9):
        index = torch.randint(0, 20, (rows,), generator=generator)
        torch.testing.assert_close(gather(table, index), table[index])
    for cols in (40, 200):
        x = torch.randn(6, cols, generator=generator)
        torch.testing.assert_close(row_sum(x, 2.0), 2.0 * x.sum(1), rtol=1e-5, atol=1e-5)
    x = torch.randn(50, generator=generator)
    expected = -x
    negate(x)
    torch.testing.assert_close(x, expected)


if __name__ == "__main__":
    main()
