"""The correctness gate and the failure classes: every bad trial is recorded with its cause, and the
sweep goes on."""
import json

import pytest
import torch

from triton_sweep.measure.check import compare, poison
from triton_sweep.store.result_store import ResultStore
from tests.conftest import run_sweep


def test_compare_reports_unwritten_elements_and_wrong_values():
    generator = torch.Generator().manual_seed(0)
    reference = torch.rand(1000, dtype=torch.float64, generator=generator) + 0.5  # values in [0.5, 1.5)
    unwritten = reference.float().clone()
    poison(unwritten[990:])  # as the gate poisons an output before the launch
    assert compare(unwritten, reference) == ("10 of 1000 output elements never written (still the poison), "
                                             "first at [990]")
    # A NaN the kernel wrote is not the poison: said apart, beside the elements left alone.
    unwritten[3] = float("nan")
    assert compare(unwritten, reference) == (
        "10 of 1000 output elements never written (still the poison), first at [990]; 1 of 1000 output "
        "elements NaN where the reference is not (the kernel wrote NaN), first at [3]")
    assert compare(torch.full((4,), float("nan")), reference[:4]).startswith(
        "4 of 4 output elements NaN where the reference is not")  # a baseline's own NaN: never poisoned
    wrong = reference.half().clone()
    wrong[3] += 0.01  # > rtol * 1.5 + atol: outside elementwise; 0.01 / ||ref|| ~ 3e-4: inside normwise
    message = compare(wrong, reference)
    assert message.startswith("1 of 1000 elements outside rtol=0.001") and "flat index 3" in message
    assert compare(reference.half(), reference) is None  # rounding alone passes
    assert compare(reference.bfloat16(), reference) is None
    assert compare(wrong, reference, normwise=True) is None  # one element off: within norm tolerance
    assert "||out - ref|| / ||ref||" in compare(reference.half() * 1.01, reference, normwise=True)


def _rows(tmp_path):
    store = ResultStore(tmp_path / "results.sqlite")
    frame = store.load()
    store.close()
    return frame


@pytest.mark.parametrize("spec, status, message", [
    ("WRONG_VALUES", "incorrect", "elements outside rtol"),
    ("UNWRITTEN", "incorrect", "232 of 1000 output elements never written (still the poison), first at "
                               "[768]"),
    ("WRITES_NAN", "incorrect", "10 of 1000 output elements NaN where the reference is not (the kernel wrote "
                                "NaN), first at [7]"),
    ("BROKEN", "compile_error", "undefined_function"),
    ("MISSING_ARGUMENT", "launch_error", "TypeError: "),
    ("REFERENCE_RAISES", "reference_error", "the kernel's reference raised RuntimeError: shape '[3, -1]' is "
                                            "invalid for input of size 1000"),
])
def test_bad_kernels_are_caught_never_timed(tmp_path, spec, status, message):
    result = run_sweep(tmp_path, "kernel=external", f"kernel.spec=tests.fixtures.bad_kernels:{spec}",
                       "kernel.shapes=[1000]", "kernel.dtypes=[float32]", "+kernel.space.BLOCK_SIZE=[256]",
                       "+kernel.space.num_warps=[4]")
    rows = _rows(tmp_path)
    assert list(rows["status"]) == [status]
    assert message in rows["message"][0]
    assert rows["p50_us"].isna().all() and rows["samples_us"].isna().all()  # never timed
    assert "no ok trials" in result.stdout


def test_sticky_errors_hangs_and_dying_workers_do_not_stop_the_sweep(tmp_path):
    workers = 2  # each replaced as one alone would be, while the other goes on
    run_sweep(tmp_path, "kernel=external", "kernel.spec=tests.fixtures.bad_kernels:HANG_OR_DIE",
              "kernel.shapes=[1000]", "kernel.dtypes=[float32]",
              "+kernel.space.BLOCK_SIZE=[32,64,128,256,512]", "+kernel.space.num_warps=[4]",
              "trial_timeout_s=8", f"gpu_workers={workers}")
    rows = _rows(tmp_path)
    assert len(rows) == 5  # each trial recorded once, whichever worker ran it and however it ended
    by_block = {json.loads(c)["BLOCK_SIZE"]: (s, m)
                for c, s, m in zip(rows["config"], rows["status"], rows["message"])}
    assert by_block[32][0] == "crashed" and "illegal memory access" in by_block[32][1]
    # The worker that hit the sticky error is replaced before the next trial: this one times out on
    # its own, not "worker died" on the way out of the old one.
    assert by_block[64][0] == "timeout" and "no answer within 8 s" in by_block[64][1]
    assert by_block[128][0] == "crashed" and "exit code 7" in by_block[128][1]
    assert by_block[256][0] == "ok" and by_block[512][0] == "ok"  # fresh workers after each failure
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # A lost worker is replaced while trials remain: after the first two failures at least (with two
    # workers, the hang may be the last trial still running).
    assert summary["gpu_workers"] == workers and summary["worker_restarts"] >= 2
