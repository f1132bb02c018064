"""The gate's one-pass test (runners/measure/mismatch.py) against check.compare's float64 temporaries.

Small tensors, fp16 and fp32 outputs: on the CPU through the Triton interpreter, on a GPU host on the
GPU. GPU (marked): bf16 too, and outputs past the size at which check.compare takes the kernel.
"""
import pytest
import torch

from triton_sweep.measure import check, mismatch
from tests.conftest import HAS_CUDA

DEVICE = "cuda" if HAS_CUDA else "cpu"


def _damaged(n: int, dtype: torch.dtype, device: str, seed: int = 0):
    """A float64 reference, an output rounded from it, and what was done to the output: elements left
    NaN (never written), elements moved just past the tolerance, others just inside it, and an output
    NaN where the reference is NaN too (neither unwritten nor, being a NaN error, within tolerance)."""
    generator = torch.Generator().manual_seed(seed)
    ref = torch.randn(n, generator=generator, dtype=torch.float64) * 3
    ref[::97] = 0.0  # results at zero: the atol alone
    rtol, atol = check.TOLERANCES[str(dtype).removeprefix("torch.")]
    out = ref.to(dtype)
    picks = torch.randperm(n, generator=generator)
    unwritten, outside, inside = picks[:7], picks[7:20], picks[20:40]
    poisoned = torch.empty_like(out)
    check.poison(poisoned)
    out[unwritten] = poisoned[unwritten]  # the gate's poison, left alone by the kernel
    allowance = atol + rtol * ref.abs()
    out[outside] = (ref[outside] + 1.5 * allowance[outside] + 4 * ref[outside].abs() * 2**-10).to(dtype)
    out[inside] = (ref[inside] + 0.25 * allowance[inside]).to(dtype)
    ref[picks[40]] = float("nan")
    out[picks[40]] = float("nan")
    return out.to(device), ref.to(device), (rtol, atol)


def _torch_counts(out, ref, rtol, atol, bound=None):
    out64 = out.double()
    unwritten = torch.isnan(out64) & ~torch.isnan(ref)
    allowed = atol + rtol * ref.abs() + (0 if bound is None else bound)
    bad = ~((out64 - ref).abs() <= allowed)
    return int(unwritten.sum()), int(bad.sum())


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("n", [1, 5000])  # one element, and blocks with a partial last one
def test_counts_match_the_float64_temporaries(dtype, n):
    out, ref, (rtol, atol) = _damaged(max(n, 64), dtype, DEVICE)
    out, ref = out[:n].contiguous(), ref[:n].contiguous()
    assert mismatch.mismatches(out, ref, rtol, atol) == _torch_counts(out, ref, rtol, atol)
    if n == 5000:
        unwritten, bad = mismatch.mismatches(out, ref, rtol, atol)
        assert unwritten == 7 and bad >= 13 + 7  # the NaN outputs fail the tolerance too


def test_the_bound_widens_the_tolerance_elementwise():
    out, ref, (rtol, atol) = _damaged(3000, torch.float16, DEVICE, seed=1)
    bound = torch.zeros_like(ref)
    past = (out.double() - ref).abs() > atol + rtol * ref.abs()
    bound[past] = (out.double() - ref).abs()[past]  # exactly the error: allowed (<=), not NaN ones
    expected = _torch_counts(out, ref, rtol, atol, bound)
    assert mismatch.mismatches(out, ref, rtol, atol, bound) == expected
    assert expected[1] == int((torch.isnan(out) | torch.isnan(ref)).sum())


def test_compare_says_the_same_through_the_kernel(monkeypatch):
    """check.compare with the kernel taken for every pair gives the verdict and message it gives
    without it, on a correct output, an unwritten one and one outside the tolerance."""
    out, ref, _ = _damaged(4000, torch.float16, DEVICE, seed=2)
    clean_ref = ref.nan_to_num(0.0)
    good = clean_ref.to(torch.float16)
    unwritten_only = good.clone()
    check.poison(unwritten_only[5])
    outside_only = good.clone()
    outside_only[9] = outside_only[9] + 1
    cases = [(good, clean_ref), (unwritten_only, clean_ref), (outside_only, clean_ref), (out, ref)]
    without = [check.compare(o, r) for o, r in cases]
    used = []
    monkeypatch.setattr(mismatch, "applies", lambda *args: used.append(1) or True)
    assert [check.compare(o, r) for o, r in cases] == without
    assert len(used) == len(cases)
    assert without[0] is None and "never written" in without[1] and "outside" in without[2]


def test_compare_judges_alone_where_the_kernel_cannot_run(monkeypatch):
    """A kernel that fails to build or launch leaves the verdict to the float64 temporaries."""
    def cannot(*args):
        raise RuntimeError("no fp8 on this GPU")

    out, ref, _ = _damaged(2000, torch.float16, DEVICE, seed=4)
    expected = check.compare(out, ref)
    monkeypatch.setattr(mismatch, "applies", lambda *args: True)
    monkeypatch.setattr(mismatch, "mismatches", cannot)
    assert check.compare(out, ref) == expected and "never written" in expected
    assert check.compare(ref.nan_to_num(0.0).to(torch.float16), ref.nan_to_num(0.0)) is None


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gpu_large_outputs_take_the_kernel_and_match(dtype):
    n = mismatch.MIN_ELEMENTS + 4321
    out, ref, (rtol, atol) = _damaged(n, dtype, "cuda", seed=3)
    assert mismatch.applies(out, ref, None)
    assert not mismatch.applies(out, ref.float(), None)  # check.compare's arithmetic is then not float64
    assert mismatch.mismatches(out, ref, rtol, atol) == _torch_counts(out, ref, rtol, atol)
    good = ref.nan_to_num(0.0)
    assert check.compare(good.to(dtype), good) is None
    assert "never written" in check.compare(out, ref)
