"""triton-sweep-compare's report, byte for byte: seeded synthetic store pairs (no kernel run) compared as
the command prints them, against the files under tests/fixtures/golden/ (the store paths aside). The
pairs hold finalists re-timed in repetitions, a status change, trials on one side only, an environment
difference, a clock too coarse for a row, baselines, two GPUs, sides on different GPU models and an
export. A change of the report is a change of these files, made on purpose (regenerate them with
`python -m tests.compare.test_compare_golden`)."""
import contextlib
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from triton_sweep import export
from triton_sweep.compare import command
from triton_sweep.store.result_store import ResultStore
from tests.fixtures.synthetic_store import SHAPES, noisy_run, row, softmax_sweep

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"
MORE_SHAPES = SHAPES + ((4096, 2048),)


def _runs(tmp: Path) -> Path:
    """base, new (slower at one shape, another torch, one more shape, a config that broke, one finalist
    whose samples read one value) and three calibration runs, in one store."""
    path = tmp / "runs.sqlite"
    store = ResultStore(path)
    rng = np.random.default_rng(76)
    for sweep in ("cal0", "cal1", "cal2"):
        noisy_run(store, sweep, rng)
    noisy_run(store, "base", rng)
    broken = {"BLOCK_SIZE": 4096, "num_warps": 2, "num_stages": 1}
    store.append(row("base", "triton", SHAPES[0], broken, 9.0, rng, phase="screen"))
    scratch = ResultStore(tmp / "scratch.sqlite")
    for r in noisy_run(scratch, "new", rng, shapes=MORE_SHAPES, slower=1.2, slowed_shapes={SHAPES[1]},
                       torch_version="3.0"):
        if r["provider"] == "triton" and r["phase"] == "final" and r["rank"] == 2 and r["shape"][1] == 1024:
            value = float(r["p50_us"])
            r = {**r, "samples_us": np.full(20, value, dtype=np.float32), "rep_p50s_us": [value] * 5,
                 "rep_noise": 0.0}
        store.append(r)
    scratch.close()
    store.append(row("new", "triton", SHAPES[0], broken, None, rng, status="incorrect", torch_version="3.0"))
    store.close()
    return path


def _gpus(tmp: Path) -> Path:
    """base and new on two GPUs (new slower on one, with one more shape there), and a sweep on a third."""
    path = tmp / "gpus.sqlite"
    store = ResultStore(path)
    for sweep, seed, slower in (("base", 1, 1.0), ("new", 2, 1.1)):
        softmax_sweep(store, sweep, seed=seed)
        softmax_sweep(store, sweep, seed=seed + 10, slower=slower, gpu_name="Second GPU",
                      shapes=SHAPES if sweep == "base" else MORE_SHAPES)
    softmax_sweep(store, "other", seed=3, gpu_name="Other GPU", finalists=False)
    store.close()
    return path


def _exported(tmp: Path, runs: Path) -> Path:
    store = ResultStore(runs)
    frame = store.load(sweep_id="base")
    store.close()
    export.export_kernel(frame, "softmax", tmp / "exported", tolerance=0.03, key={"n_cols": "cols"})
    return tmp / "exported" / "softmax_configs.json"


def _cases(tmp: Path) -> dict[str, list[str]]:
    """golden file name -> the command line compared."""
    runs, gpus = _runs(tmp), _gpus(tmp)
    exported = _exported(tmp, runs)
    calibration = f"--calibration={runs}:cal0,cal1,cal2"
    return {
        "compare_runs.txt": [f"--store={runs}", "base", "new"],
        "compare_runs_gate.txt": [f"--store={runs}", "base", "new", "--fail-on-slow", "2%", calibration],
        "compare_runs_all.txt": [f"--store={runs}", "base", "new", "--gate", "all", "--changed-only",
                                 "--fail-on-slow", "2%", "--machine-spread", "0.5%"],
        "compare_gpus_gate.txt": [f"--store={gpus}", "base", "new", "--fail-on-slow", "2%",
                                  "--machine-spread", "0.5%", "--all"],
        "compare_gpus_models.txt": [f"--store={gpus}", "base", "other", "--fail-on-slow", "2%"],
        "compare_gpus_across.txt": [f"--store={gpus}", "new", "other", "--fail-on-slow", "2%",
                                    "--across-gpus"],
        "compare_export.txt": [str(exported), f"{runs}:new", "--fail-on-slow", "2%", calibration],
    }


def printed(tmp: Path) -> dict[str, str]:
    """golden file name -> the report printed and the exit status, the scratch folder's path made TMP."""
    reports = {}
    for name, argv in _cases(tmp).items():
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = command.main(argv)
        reports[name] = out.getvalue().replace(str(tmp), "TMP") + f"exit status: {status}\n"
    return reports


def test_the_reports_are_what_they_were(tmp_path):
    for name, text in printed(tmp_path).items():
        assert text == (GOLDEN / name).read_text(), f"{name} differs from tests/fixtures/golden/{name}"


if __name__ == "__main__":  # regenerate the golden files
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        for name, text in printed(Path(scratch)).items():
            (GOLDEN / name).write_text(text)
            print(f"wrote tests/fixtures/golden/{name}", file=sys.stderr)
