"""The gate's elementwise test in one pass over the GPU's memory, for large outputs.

check.compare builds its verdict from float64 temporaries: the output upcast, the error, the allowance,
the masks. For layernorm's 8192x65528 fp16 output that is ~80 GB of memory traffic, 17.7 ms on an H100
against a 2 ms kernel, and it ran once for every config of the export sweeps' largest shapes. This
kernel reads the output and a float64 reference once and counts the elements that fail either test of
check.compare (never written: still NaN where the reference is not; outside atol + rtol * |ref| +
bound), in float64 as check.compare computes them; check.compare then says nothing more when both
counts are 0 and builds its message the usual way otherwise (or where the kernel cannot run), so the
message, and the verdict wherever the two differ, stay its own. (The only difference there can be: the
compiler may fuse the allowance's multiply-add, one float64 rounding fewer, at an error within 1e-16
relative of the allowance.)"""
from __future__ import annotations

import triton
import triton.language as tl

# Below this many elements the float64 temporaries cost well under a millisecond: not worth a kernel
# (nor its compile, on a cold Triton cache, once per output dtype).
MIN_ELEMENTS = 1 << 22
BLOCK = 2048


@triton.jit
def _mismatch_kernel(out_ptr, ref_ptr, bound_ptr, tolerance_ptr, counts_ptr, n_elements,
                     HAS_BOUND: tl.constexpr, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK  # int64: outputs of more than 2^31 elements
    offsets = start + tl.arange(0, BLOCK)
    inside = offsets < n_elements
    out = tl.load(out_ptr + offsets, mask=inside, other=0).to(tl.float64)
    ref = tl.load(ref_ptr + offsets, mask=inside, other=0).to(tl.float64)
    rtol = tl.load(tolerance_ptr)
    atol = tl.load(tolerance_ptr + 1)
    allowed = atol + rtol * tl.abs(ref)
    if HAS_BOUND:
        allowed += tl.load(bound_ptr + offsets, mask=inside, other=0).to(tl.float64)
    unwritten = inside & (out != out) & (ref == ref)
    # `not (error <= allowed)`: a NaN error fails, as in check.compare
    bad = inside & ~(tl.abs(out - ref) <= allowed)
    tl.atomic_add(counts_ptr, tl.sum(unwritten.to(tl.int64), axis=0))
    tl.atomic_add(counts_ptr + 1, tl.sum(bad.to(tl.int64), axis=0))


def applies(out, ref, bound) -> bool:
    """Whether the kernel judges this pair as check.compare would: a large floating-point output and a
    float64 reference (and bound) of its shape on its CUDA device, laid out densely in row-major order."""
    import torch

    tensors = [out, ref] + ([] if bound is None else [bound])
    return (out.is_cuda and _large_float(out)
            and all(t is out or t.dtype == torch.float64 for t in tensors)
            and all(t.device == out.device and t.shape == out.shape and t.is_contiguous() for t in tensors))


def _large_float(out) -> bool:
    return out.numel() >= MIN_ELEMENTS and out.is_floating_point()


def mismatches(out, ref, rtol: float, atol: float, bound=None) -> tuple[int, int]:
    """(elements never written, elements outside the tolerance) of `out` against `ref`."""
    unwritten, bad = _launch(out, ref, rtol, atol, bound).tolist()
    return unwritten, bad


def build_like(out, with_bound: bool) -> None:
    """The kernel's launch for an output like `out` (its shape and dtype), with a float64 reference and
    bound as the check passes them, all on meta tensors (aligned as fresh allocations are), where it
    applies: where launches are compiles (the compile pool, runners/engine/compile_pool.py), this builds
    the binary a GPU worker's first check of such an output would otherwise build under the GPU's lock."""
    import torch

    if not _large_float(out):
        return
    meta = torch.device("meta")
    out = torch.empty(out.shape, dtype=out.dtype, device=meta)
    ref = torch.empty(out.shape, dtype=torch.float64, device=meta)
    _launch(out, ref, 0.0, 0.0, torch.empty_like(ref) if with_bound else None)


def _launch(out, ref, rtol: float, atol: float, bound):
    """Enqueue the kernel; returns the counts it adds to: [unwritten, bad]."""
    import torch

    counts = torch.zeros(2, dtype=torch.int64, device=out.device)
    # float64 tolerances: passed as plain floats Triton would round them to float32
    tolerance = torch.tensor([rtol, atol], dtype=torch.float64, device=out.device)
    n_elements = out.numel()
    _mismatch_kernel[(triton.cdiv(n_elements, BLOCK),)](
        out, ref, bound if bound is not None else tolerance, tolerance, counts, n_elements,
        HAS_BOUND=bound is not None, BLOCK=BLOCK, num_warps=8)
    return counts
