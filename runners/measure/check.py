"""The correctness gate and the classification of failures.

Every trial passes the gate before it is timed: fresh seeded random inputs, the output poisoned with a
marked NaN before the launch (poison), and the result compared with the kernel's reference computed in
float64 on the same inputs. A trial that fails is `incorrect` and is never timed or exported.
"""
from __future__ import annotations

from typing import Optional

# One tolerance per output dtype: |out - ref| <= ATOL + RTOL * |ref| elementwise.
# fp16 and bf16: RTOL is about two units of rounding of the output, since storing the result costs up
# to half an ulp (fp16: 2**-11 = 4.9e-4, bf16: 2**-8 = 3.9e-3) and the fp32 math inside adds far less.
# fp32: storing costs 6e-8, but the kernel's own fp32 arithmetic dominates: a sum over a 64K-element
# row in a different order than the reference, and tl.exp's approximate exp2, cost up to ~1e-6
# relative; 1e-5 leaves a margin of 10 and still fails any real indexing or math error.
# ATOL covers results near zero, where a relative bound means nothing; 1e-5 is far under any value
# these kernels produce at unit-scale inputs.
TOLERANCES = {
    "float32": (1e-5, 1e-5),  # (rtol, atol)
    "float16": (1e-3, 1e-5),
    "bfloat16": (8e-3, 1e-5),
    "float64": (1e-12, 1e-12),  # a kernel in float64 (a replayed one): its arithmetic's order only
    # fp8 (a replayed kernel's quantized tensors, compared with the program's own config): one unit of
    # rounding of the format (3 and 2 mantissa bits), atol its smallest subnormal.
    "float8_e4m3fn": (2**-3, 2**-9),
    "float8_e5m2": (2**-2, 2**-16),
}

# A reference in the kernel's own arithmetic (KernelSpec.reference_in_float64 False: a replayed kernel's
# is the program's own config) sums in one order of many, and a config summing in another is as right:
# where a sum cancels, the two differ by units of roundoff at the scale of the terms, not of the result.
# Each output is then allowed REORDER_UNITS units of roundoff of fp32 (the precision kernels accumulate
# in; float64's for float64 kernels) at the largest finite |value| of that output and of the floating
# inputs (reorder_bounds), on top of its dtype's tolerance. Two blockings of fp32 sums of up to 2**18
# terms differ by up to 40 such units (BENCHMARKS.md R8); a config that drops a term, misindexes or
# leaves an element unwritten errs by O(the values) and still fails.
REORDER_UNITS = 64

# Baselines (the user's eager or native code, not ours) round after every op of a chain, so where an
# intermediate cancels (gelu(x) + bias near 0) their absolute error is an ulp of the intermediate, far
# beyond an elementwise bound on the result: seen on the CPU for fp16 F.gelu + bias and eager fp16
# layernorm. They are checked normwise instead, ||out - ref|| / ||ref|| <= RTOL of the dtype, which
# rounding passes and a wrong result does not.

STATUS_OK = "ok"
STATUS_PRUNED = "pruned"
STATUS_INCORRECT = "incorrect"
STATUS_COMPILE_ERROR = "compile_error"
STATUS_OUT_OF_RESOURCES = "out_of_resources"
STATUS_OOM = "oom"
STATUS_TIMEOUT = "timeout"
STATUS_CRASHED = "crashed"
STATUS_LAUNCH_ERROR = "launch_error"  # the launcher (or a baseline) called with what it does not take
STATUS_REFERENCE_ERROR = "reference_error"  # the kernel's reference raised: nothing could be checked
STATUSES = (STATUS_OK, STATUS_PRUNED, STATUS_COMPILE_ERROR, STATUS_OUT_OF_RESOURCES, STATUS_TIMEOUT,
            STATUS_CRASHED, STATUS_INCORRECT, STATUS_OOM, STATUS_LAUNCH_ERROR,
            STATUS_REFERENCE_ERROR)  # every trial ends in exactly one

# CUDA errors after which the context is unusable: the worker process must be replaced.
STICKY_CUDA_ERRORS = (
    "illegal memory access",
    "illegal address",
    "unspecified launch failure",
    "misaligned address",
    "illegal instruction",
    "device-side assert",
)


# The poison: a quiet NaN with a payload no arithmetic makes (an operation that makes a NaN makes the
# canonical one, or passes on its NaN operand's), so an element still holding these bits was never
# written, and any other NaN there the kernel wrote. fp8 has no such mark (e4m3fn has one NaN): plain NaN.
POISON_BITS = {"float16": 0x7E5A, "bfloat16": 0x7FDA, "float32": 0x7FC0_5A5A,
               "float64": 0x7FF8_0000_0000_5A5A}
_BITS_OF = {"float16": "int16", "bfloat16": "int16", "float32": "int32", "float64": "int64"}


def poison(tensor) -> None:
    """Fill an output with the poison (POISON_BITS): an element the kernel leaves alone keeps it."""
    import torch

    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype in POISON_BITS:
        tensor.view(getattr(torch, _BITS_OF[dtype])).fill_(POISON_BITS[dtype])
    else:
        tensor.fill_(float("nan"))


def _not_a_number(out, ref) -> Optional[str]:
    """Where `out` is NaN and the reference is not: the elements still holding the poison (never
    written) and those the kernel wrote NaN, each counted with its first index; None where there is none."""
    import torch

    nan = torch.isnan(out) & ~torch.isnan(ref)
    if not nan.any():
        return None
    dtype = str(out.dtype).removeprefix("torch.")

    def said(mask, what: str) -> str:
        first = mask.nonzero()[0].tolist()
        return f"{int(mask.sum())} of {out.numel()} output elements {what}, first at {first}"

    if dtype not in POISON_BITS:
        return said(nan, f"NaN: never written, or written NaN (a {dtype} NaN holds no poison's mark)")
    left = nan & (out.view(getattr(torch, _BITS_OF[dtype])) == POISON_BITS[dtype])
    parts = [said(left, "never written (still the poison)")] if left.any() else []
    if (nan & ~left).any():
        parts.append(said(nan & ~left, "NaN where the reference is not (the kernel wrote NaN)"))
    return "; ".join(parts)


def as_tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def upcast(inputs: tuple) -> tuple:
    """The inputs for the reference: floating-point tensors in float64, everything else as is."""
    import torch

    return tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs)


def copy_storage(target, source) -> None:
    """source's elements into target, two tensors of one layout, through the memory they span: a view
    whose elements overlap (expanded, stride 0) cannot be copied into element by element."""
    import torch

    if source.numel() == 0:
        return
    span = 1 + sum((size - 1) * stride for size, stride in zip(source.shape, source.stride()))
    flat = [torch.as_strided(t, (span,), (1,), t.storage_offset()) for t in (target, source)]
    flat[0].copy_(flat[1])


class ReferenceFailed(Exception):
    """The kernel's reference raised (its cause): the trial is a reference_error, whatever its config."""


def references(spec, inputs: tuple) -> tuple:
    """The kernel's reference outputs on these inputs: computed in float64 (the inputs upcast), unless
    the spec's reference runs in the inputs' own dtypes (kernels/spec.py). ReferenceFailed where it
    raises, but for running out of memory or a sticky CUDA error (oom and crashed, as anywhere else)."""
    import torch

    try:
        return as_tuple(spec.reference(*(upcast(inputs) if spec.reference_in_float64 else inputs)))
    except torch.OutOfMemoryError:
        raise
    except Exception as error:
        if is_sticky_cuda_error(error):
            raise
        raise ReferenceFailed() from error


def compare_outputs(outputs: tuple, references: tuple, normwise: bool = False, bound=None) -> Optional[str]:
    """compare() for each output of a kernel (e.g. layernorm's y, mean, rstd); None when all match."""
    if len(outputs) != len(references):
        return f"{len(outputs)} outputs, but the reference returns {len(references)}"
    for index, (out, ref) in enumerate(zip(outputs, references)):
        problem = compare(out, ref, normwise, bound[index] if isinstance(bound, tuple)
                          else bound if index == 0 else None)
        if problem:
            return problem if len(outputs) == 1 else f"output {index}: {problem}"
    return None


def compare(out, ref, normwise: bool = False, bound=None) -> Optional[str]:
    """None when `out` matches the float64 reference within its dtype's tolerance, else why not:
    elementwise for our kernels, normwise for baselines (see above).

    `bound` (float64, out's shape; or a number: reorder_bounds) widens the absolute tolerance
    elementwise for kernels that sum long products: where a dot product of K terms cancels to near zero,
    fp32 accumulation in another order than the reference's leaves an error that grows like sqrt(K) fp32
    ulps of sum|a*b| (the kernel gives sqrt(K) * 2**-23 * sum|a*b|). Seen on an H200: 1 element in 16.7M
    of a fp16 4096^3 matmul off by more than the 1e-5 atol. Partial sums kept in fp16 still fail (tested),
    and so does a wrong index, off by O(|ref|).
    """
    import torch

    if out.shape != ref.shape:
        return f"output shape {tuple(out.shape)} != reference shape {tuple(ref.shape)}"
    if not out.is_floating_point():  # integers and bools (indices, counts, masks): exactly
        bad = out != ref
        if bad.any():
            first = [int(i) for i in bad.nonzero()[0]]
            dtype = str(out.dtype).replace("torch.", "")
            return f"{int(bad.sum())} of {out.numel()} {dtype} elements differ, first at {first}"
        return None
    dtype = str(out.dtype).removeprefix("torch.")
    reordered = bound if isinstance(bound, float) else 0.0
    bound = None if isinstance(bound, float) else bound
    if not normwise and dtype in TOLERANCES and _one_pass(out, ref, TOLERANCES[dtype][0],
                                                          TOLERANCES[dtype][1] + reordered, bound) == (0, 0):
        return None  # one pass over the memory said it; a mismatch is described below
    not_a_number = _not_a_number(out, ref)
    if not_a_number:
        return not_a_number
    out64 = out.double()
    if dtype not in TOLERANCES:
        return f"no tolerance for {dtype} outputs (runners/measure/check.py TOLERANCES)"
    rtol, atol = TOLERANCES[dtype]
    if normwise:
        relative = float(torch.linalg.vector_norm(out64 - ref) / torch.linalg.vector_norm(ref))
        return None if relative <= rtol else f"||out - ref|| / ||ref|| = {relative:.3g} > {rtol}"
    error = (out64 - ref).abs()
    allowed = atol + reordered + rtol * ref.abs() + (0 if bound is None else bound)
    bad = ~(error <= allowed)
    if bad.any():
        worst = int((error / allowed).flatten().argmax())  # the element furthest outside its allowance
        said = f"atol={atol} + {reordered:.3g} (sums in another order)" if reordered else f"atol={atol}"
        return (
            f"{int(bad.sum())} of {out.numel()} elements outside rtol={rtol} {said}; "
            f"worst |out-ref| = {float(error.flatten()[worst]):.3g} (allowed "
            f"{float(allowed.flatten()[worst]):.3g}) at flat index {worst} "
            f"(out {float(out64.flatten()[worst]):.6g}, ref {float(ref.flatten()[worst]):.6g})"
        )
    return None


def reorder_bounds(inputs: tuple, references: tuple) -> tuple:
    """Per output, what a config summing in another order than a reference in the kernel's own
    arithmetic may differ by (REORDER_UNITS above): a number, or None for an integer output."""
    import torch

    def largest(x) -> float:
        finite = x[torch.isfinite(x)]
        return float(finite.abs().max()) if finite.numel() else 0.0

    tensors = [x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
    scale = max(map(largest, tensors), default=0.0)
    unit = torch.finfo(torch.float64 if any(x.dtype == torch.float64 for x in tensors) else torch.float32).eps
    return tuple(REORDER_UNITS * unit * max(scale, largest(ref)) if ref.is_floating_point() else None
                 for ref in references)


def _one_pass(out, ref, rtol: float, atol: float, bound) -> Optional[tuple[int, int]]:
    """mismatch.mismatches where it applies; None where it does not, or where its kernel cannot build
    or run here (an fp8 output on a GPU without fp8, say): the float64 temporaries then judge alone."""
    from triton_sweep.measure import mismatch

    if not mismatch.applies(out, ref, bound):
        return None
    try:
        return mismatch.mismatches(out, ref, rtol, atol, bound)
    except Exception:
        return None


def build_one_pass(outputs: tuple, with_bound: bool) -> None:
    """The one-pass check's kernel launched for outputs like these (meta tensors), wherever
    compare_outputs would run it on a kernel's outputs (the first with the accumulation bound where the
    kernel has one): the compile pool calls it with launches turned into compiles (mismatch.build_like)."""
    from triton_sweep.measure import mismatch

    for index, out in enumerate(outputs):
        if str(out.dtype).removeprefix("torch.") in TOLERANCES:
            mismatch.build_like(out, with_bound and index == 0)


def classify(error: BaseException, first_launch_done: bool) -> str:
    """The status of a trial that raised `error`.

    The reference raising (ReferenceFailed): reference_error. Before the first launch has completed, a
    TypeError is a call with arguments the launcher or the @triton.jit kernel does not take (Triton's
    compiler wraps the errors of a kernel's body in its own): launch_error; any other error means the
    config could not be built or launched (a CompilationError on the GPU, an InterpreterError on the
    CPU, a launcher's ValueError): compile_error. After it, or on a sticky CUDA error, the run itself
    failed: crashed.
    """
    import torch
    from triton.runtime.errors import OutOfResources

    if isinstance(error, ReferenceFailed):
        return STATUS_REFERENCE_ERROR
    if isinstance(error, OutOfResources) or "too many resources requested for launch" in str(error):
        return STATUS_OUT_OF_RESOURCES
    if isinstance(error, torch.OutOfMemoryError):
        return STATUS_OOM
    if is_sticky_cuda_error(error) or first_launch_done:
        return STATUS_CRASHED
    return STATUS_LAUNCH_ERROR if isinstance(error, TypeError) else STATUS_COMPILE_ERROR


def described(error: BaseException) -> str:
    """A failed trial's message: the error's type and text (for a reference that raised, its cause's)."""
    if isinstance(error, ReferenceFailed) and error.__cause__ is not None:
        cause = error.__cause__
        return f"the kernel's reference raised {type(cause).__name__}: {cause}"
    return f"{type(error).__name__}: {error}"


def is_sticky_cuda_error(error: BaseException) -> bool:
    message = str(error).lower()
    return any(pattern in message for pattern in STICKY_CUDA_ERRORS)
