"""A program of the kernels a replay gets wrong most easily, for tests/test_replay.py: one reversing an
array in place through two arguments that are one tensor (not replayable: a replay would give each its
own memory), one whose block is left at its default, one adding an expanded (stride 0) bias, one whose
optional tensor is None at some launches, and one counting into an integer tensor it also reads (atomic
adds: restored before every call, or the count drifts). It checks its own results.

    TRITON_INTERPRET=1 python tests/replay_edges.py
"""
import torch
import triton
import triton.language as tl


@triton.jit
def reverse(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n // 2
    front = tl.load(src_ptr + offsets, mask=mask)
    back = tl.load(src_ptr + n - 1 - offsets, mask=mask)
    tl.store(dst_ptr + offsets, back, mask=mask)
    tl.store(dst_ptr + n - 1 - offsets, front, mask=mask)


@triton.jit
def double(x_ptr, out_ptr, n, BLOCK: tl.constexpr = 64):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def add_bias(x_ptr, bias_ptr, out_ptr, n_cols, bias_stride, BLOCK_COLS: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_COLS)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask)
    bias = tl.load(bias_ptr + row * bias_stride + cols, mask=mask)
    tl.store(out_ptr + row * n_cols + cols, x + bias, mask=mask)


@triton.jit
def maybe_add(x_ptr, y_ptr, out_ptr, n, HAS_Y: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    value = tl.load(x_ptr + offsets, mask=mask)
    if HAS_Y:
        value += tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, value, mask=mask)


@triton.jit
def count_positive(x_ptr, count_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    positive = (tl.load(x_ptr + offsets, mask=offsets < n, other=0.0) > 0).to(tl.int32)
    tl.atomic_add(count_ptr, tl.sum(positive, axis=0))


def main():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(100, generator=generator)
    expected = x.flip(0)
    reverse[(1,)](x, x, 100, BLOCK=64)
    torch.testing.assert_close(x, expected)
    for n in (100, 200):
        x, out = torch.randn(n, generator=generator), torch.empty(n)
        double[(triton.cdiv(n, 64),)](x, out, n)
        torch.testing.assert_close(out, 2 * x)
    x, bias = torch.randn(6, 40, generator=generator), torch.randn(40, generator=generator)
    out = torch.empty(6, 40)
    wide = bias.expand(6, 40)
    add_bias[(6,)](x, wide, out, 40, wide.stride(0), BLOCK_COLS=64)
    torch.testing.assert_close(out, x + bias)
    for n, with_y in ((100, True), (300, False)):
        x, y, out = torch.randn(n, generator=generator), torch.randn(n, generator=generator), torch.empty(n)
        maybe_add[(triton.cdiv(n, 64),)](x, y if with_y else None, out, n, HAS_Y=with_y, BLOCK=64)
        torch.testing.assert_close(out, x + y if with_y else x)
    x, count = torch.randn(500, generator=generator), torch.zeros(1, dtype=torch.int32)
    count_positive[lambda meta: (triton.cdiv(500, meta["BLOCK"]),)](x, count, 500, BLOCK=128)
    assert int(count) == int((x > 0).sum())


if __name__ == "__main__":
    main()
