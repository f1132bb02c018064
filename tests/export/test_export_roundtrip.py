"""The hand-off the export exists for: a kernel of another repository (tests/fixtures/consumer_repo, which
never imports kernels/ or runners/) tuned through the exported module, by @triton.autotune with the export's
prune and by config_for, at measured and unmeasured row lengths, on the interpreter.

The store rows are written as a GPU sweep writes them (ok, pruned with the constraint's reason), for
two GPUs and two dtypes, so that which config each lookup must return is known by hand:

H200 float16, p50 in us (a softmax block must hold the row and is pruned from 4x the row length):
    cols 100:  BLOCK 128 w2 2.0 | 256 w2 2.5
    cols 200:  256 w2 3.2 | 512 w2 3.0 | 512 w4 3.5
    cols 400:  512 w2 4.5 | 512 w4 4.0 | 1024 w4 4.6
    cols 1000: 1024 w4 8.0 | 2048 w4 8.1
Within 3% of each shape's best: 128w2 covers 100, 512w2 covers 200, 512w4 covers 400, 1024w4 and
2048w4 cover 1000; 256w2 covers nothing (3.2 > 1.03 x 3.0). Each covers one shape, so greedy breaks the
ties by wins (2048w4 wins nowhere), then fewest resources: the covering set is 128w2, 512w2, 512w4,
1024w4. The list adds the alternates, every other config within 3% of the best at a shape: 2048w4 (8.1 at
1000). The list: 128w2, 512w2, 512w4, 1024w4, 2048w4.
H200 float32: cols 200 only, 256 w1 5.0 | 512 w2 5.5 (10% behind): the list is 256w1.
H100 float16: cols 200 only, 256 w4 2.0 | 512 w4 2.5: the list is 256w4.
"""
import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton

from triton_sweep.export.command import main as export_main
from triton_sweep.measure.check import compare
from triton_sweep.store.result_store import ResultStore

H200 = {"backend": "cuda", "gpu_name": "NVIDIA H200", "driver_version": "580.159.04", "cuda_version": "13.0",
        "torch_version": "2.11.0", "triton_version": "3.6.0", "kernel_hash": "feedbeef0002"}
H100 = {**H200, "gpu_name": "NVIDIA H100 80GB HBM3", "driver_version": "570.86.15"}
MEASURED = {  # (gpu env, dtype, cols) -> [(BLOCK_SIZE, num_warps, p50_us)]
    (0, "float16", 100): [(128, 2, 2.0), (256, 2, 2.5)],
    (0, "float16", 200): [(256, 2, 3.2), (512, 2, 3.0), (512, 4, 3.5)],
    (0, "float16", 400): [(512, 2, 4.5), (512, 4, 4.0), (1024, 4, 4.6)],
    (0, "float16", 1000): [(1024, 4, 8.0), (2048, 4, 8.1)],
    (0, "float32", 200): [(256, 1, 5.0), (512, 2, 5.5)],
    (1, "float16", 200): [(256, 4, 2.0), (512, 4, 2.5)],
}
ROWS = 4


def write_store(path):
    """The rows of a GPU sweep of softmax: ok trials with their timings, pruned ones with the reason."""
    store = ResultStore(path)
    index = 0
    for (gpu, dtype, cols), trials in MEASURED.items():
        env = (H200, H100)[gpu]
        for block, warps, p50 in trials:
            config = {"BLOCK_SIZE": block, "num_warps": warps, "num_stages": 1}
            store.append({**env, "trial_key": f"t{index}", "sweep_id": "tune", "kernel": "softmax",
                          "provider": "triton", "shape": (ROWS, cols), "dtype": dtype, "config": config,
                          "status": "ok", "phase": "screen", "p50_us": p50, "gbps": 8 * cols / p50 / 1e3,
                          "tflops": 0.01, "seed": 0, "timestamp": "2026-11-22T00:00:00"})
            index += 1
        config = {"BLOCK_SIZE": 64, "num_warps": 4, "num_stages": 1}
        store.append({**env, "trial_key": f"t{index}", "sweep_id": "tune", "kernel": "softmax",
                      "provider": "triton", "shape": (ROWS, cols), "dtype": dtype, "config": config,
                      "status": "pruned", "message": f"BLOCK_SIZE 64 < row length {cols}", "seed": 0,
                      "timestamp": "2026-11-22T00:00:00"})
        index += 1
    store.close()


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    work = tmp_path_factory.mktemp("roundtrip")
    write_store(work / "results.sqlite")
    assert export_main(["--store", str(work / "results.sqlite"), "--kernel", "softmax",
                        "--key", "n_cols=cols", "--out-dir", str(work / "exports")]) == 0
    return work / "exports"


@pytest.fixture(scope="module")
def consumer(export_dir):
    """tests.fixtures.consumer_repo.row_softmax imported with the export directory on sys.path, as its repo
    would."""
    sys.path.insert(0, str(export_dir))
    try:
        module = importlib.import_module("tests.fixtures.consumer_repo.row_softmax")
        yield module
    finally:
        sys.path.remove(str(export_dir))
        for name in ("tests.fixtures.consumer_repo.row_softmax", "softmax_configs"):
            sys.modules.pop(name, None)


@pytest.fixture
def exported(consumer):
    return sys.modules["softmax_configs"]


@pytest.fixture
def on_h200(monkeypatch):
    monkeypatch.setenv("TRITON_EXPORT_GPU", "NVIDIA H200")  # the interpreter has no CUDA device to name


def _block_warps(config):
    return config.kwargs["BLOCK_SIZE"], config.num_warps


def _inputs(rows, cols, dtype=torch.float16):
    x = (torch.randn(rows, cols, generator=torch.Generator().manual_seed(cols)) * 3).to(dtype)
    return x, torch.full_like(x, float("nan"))  # poisoned: a column never written stays NaN


# cols -> the configs the prune keeps with check=holds_row, and config_for's pick. The prune: at a measured
# row length (100, 400), the list's fastest there that holds the row; between or beyond them, every listed
# config that holds the row and is within SPREAD (2x) of the fastest that holds it at a measured length
# around (next below and above; the nearest one beyond the range). config_for: the winner at a measured
# length; else, where the winners around share a form (a BLOCK_SIZE that is the next power of two of
# their row), the configs of that form at the call (BLOCK next_pow2(cols)); else those verified at every
# length around, by the least interpolated loss: the mean of log(p50 / fastest there) weighted by the
# call's place between the lengths in log size; else the nearest length's winner, or its configs, that
# hold the row.
# 60 -> 100 alone: 128w2 (2.0) holds 60; winner 128w2 has the form (128 = next_pow2(100)), but no config
#   of block 64; verified everywhere: 128w2.
# 150 -> 100 (none holds 150) and 200: 512w2 3.0 and 512w4 3.5 (<= 6.0); config_for: no form (512 at
#   200), none verified at both lengths: the nearest (200, log distance .29 against .41) winner, 512w2.
# 300 -> 200: 512w2 3.0, 512w4 3.5; 400: 512w2 4.5, 512w4 4.0, 1024w4 4.6 (<= 8.0): all three kept.
#   config_for: no form (512w2 at 200); verified at both: 512w2 and 512w4; weight of 400
#   log(300/200) / log 2 = .585, of 200 .415: 512w2 .585 log(4.5/4.0) = .069, 512w4 .415 log(3.5/3.0)
#   = .064: 512w4.
# 700 -> 400: 1024w4 4.6 alone holds 700; 1000: 1024w4 8.0, 2048w4 8.1 (the alternate): both kept.
#   config_for: the winners 512w4 at 400 and 1024w4 at 1000 share the form; next_pow2(700): 1024w4.
# 130 -> 100, whose block (128) cannot hold 130 columns, and 200: 512w2 and 512w4 kept; config_for: no
#   form (512w2 at 200), none verified at both: 100's winner and configs fail check, 200's winner 512w2.
# 1500 -> beyond 1000, alone around: of the list only 2048w4 (8.1) holds 1500, an alternate; config_for:
#   1000's winner 1024w4 has the form; next_pow2(1500): 2048w4.
# The generated module's ExportRangeWarning at a length outside the measured ones is checked in
# tests/export/test_generalization.py; here it would reach pytest-xdist, whose workers cannot name its class
# (the module is loaded from a file).
pytestmark = pytest.mark.filterwarnings("ignore:.*lies outside the measured range")

CASES = {
    100: ({(128, 2)}, (128, 2)),
    400: ({(512, 4)}, (512, 4)),
    60: ({(128, 2)}, (128, 2)),
    150: ({(512, 2), (512, 4)}, (512, 2)),
    300: ({(512, 2), (512, 4), (1024, 4)}, (512, 4)),
    700: ({(1024, 4), (2048, 4)}, (1024, 4)),
    130: ({(512, 2), (512, 4)}, (512, 2)),
    1500: ({(2048, 4)}, (2048, 4)),
}


def test_covering_set_and_module_hold_the_stated_data(export_dir):
    module = (export_dir / "softmax_configs.py").read_text()
    top_imports = [alias.name for node in ast.parse(module).body
                   if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names]
    assert top_imports == ["triton"]
    namespace = {}
    exec(compile(module, "softmax_configs.py", "exec"), namespace)
    cover = {gpu: {dtype: [_block_warps(c) for c, _ in entries] for dtype, entries in by_dtype.items()}
             for gpu, by_version in namespace["COVER"].items() for by_dtype in [by_version["3.6.0"]]}
    assert cover == {"NVIDIA H200": {"float16": [(128, 2), (512, 2), (512, 4), (1024, 4), (2048, 4)],
                                     "float32": [(256, 1)]},
                     "NVIDIA H100 80GB HBM3": {"float16": [(256, 4)]}}
    assert namespace["KEY"] == {"n_cols": "cols"} and namespace["DIMS"] == ("rows", "cols")
    # Validity travels: 512 w2 was ok at 200 and 400 (not at 100 or 1000, where it was never run).
    verified = dict(namespace["COVER"]["NVIDIA H200"]["3.6.0"]["float16"])[namespace["CONFIGS"][2]]
    assert _block_warps(namespace["CONFIGS"][2]) == (512, 2)
    assert verified == {(ROWS, 200): 3.0, (ROWS, 400): 4.5}
    best = namespace["BEST_BY_SHAPE"]["NVIDIA H200"]["3.6.0"]
    assert _block_warps(best[("float16", (ROWS, 100))]) == (128, 2)
    assert _block_warps(best[("float32", (ROWS, 200))]) == (256, 1)


@pytest.mark.parametrize("cols", list(CASES))
def test_autotune_with_the_exported_prune_is_correct(consumer, exported, on_h200, cols):
    x, y = _inputs(3, cols)
    kept = exported.make_prune(check=consumer.holds_row)(exported.CONFIGS, {"n_cols": cols, "y_ptr": y})
    assert {_block_warps(c) for c in kept} == CASES[cols][0]
    chosen = consumer.softmax_autotuned(x, y)
    assert _block_warps(chosen) in CASES[cols][0]
    assert compare(y, torch.softmax(x.double(), dim=1)) is None


@pytest.mark.parametrize("cols", list(CASES))
def test_config_for_is_correct(consumer, on_h200, cols):
    x, y = _inputs(3, cols)
    assert _block_warps(consumer.softmax_looked_up(x, y)) == CASES[cols][1]
    assert compare(y, torch.softmax(x.double(), dim=1)) is None


def test_dtype_comes_from_the_first_tensor_argument(consumer, exported, on_h200):
    x, y = _inputs(2, 200, torch.float32)
    assert _block_warps(consumer.softmax_autotuned(x, y)) == (256, 1)  # float32's own list
    assert compare(y, torch.softmax(x.double(), dim=1)) is None
    assert _block_warps(exported.config_for("float32", cols=200)) == (256, 1)
    assert _block_warps(exported.config_for(torch.float16, cols=200)) == (512, 2)


def test_gpu_chosen_by_name_argument_or_environment(consumer, monkeypatch):
    x, y = _inputs(2, 200)
    assert _block_warps(consumer.softmax_looked_up(x, y, gpu="NVIDIA H100 80GB HBM3")) == (256, 4)
    assert compare(y, torch.softmax(x.double(), dim=1)) is None
    monkeypatch.setenv("TRITON_EXPORT_GPU", "NVIDIA H100 80GB HBM3")
    assert _block_warps(consumer.config_for("float16", n_cols=200)) == (256, 4)
    assert _block_warps(consumer.config_for("float16", n_cols=200, gpu="NVIDIA H200")) == (512, 2)


def test_unmeasured_gpu_is_a_clear_error(consumer, monkeypatch):
    monkeypatch.setenv("TRITON_EXPORT_GPU", "NVIDIA A100-SXM4-80GB")
    message = ("no configs were measured on 'NVIDIA A100-SXM4-80GB' "
               "(measured: NVIDIA H100 80GB HBM3, NVIDIA H200)")
    with pytest.raises(LookupError, match=re.escape(message)):
        consumer.config_for("float16", n_cols=200)
    x, y = _inputs(2, 222)  # a row length no earlier test tuned: autotune calls the prune
    with pytest.raises(LookupError, match="no configs were measured on 'NVIDIA A100-SXM4-80GB'"):
        consumer.softmax_autotuned(x, y)
    with pytest.raises(LookupError, match="no configs for dtype 'bfloat16' on NVIDIA H200"):
        consumer.config_for("bfloat16", n_cols=200, gpu="NVIDIA H200")


@pytest.mark.skipif(torch.cuda.is_available(), reason="names the missing CUDA device")
def test_no_device_to_name_is_a_clear_error(consumer, monkeypatch):
    monkeypatch.delenv("TRITON_EXPORT_GPU", raising=False)
    with pytest.raises(LookupError, match="no CUDA device to name; pass gpu=... or set TRITON_EXPORT_GPU"):
        consumer.config_for("float16", n_cols=200)


def test_a_row_no_exported_config_holds_is_a_clear_error(consumer, on_h200):
    """3000 columns: beyond the longest measured row (1000), the only length around; the longest listed
    block, 2048 (the alternate that serves 1500: CASES), cannot hold it, and no other measured length has
    a config that does: the prune keeps nothing and config_for finds nothing that passes check."""
    x, y = _inputs(2, 3000)
    expected = "no exported config for cols=3000 on NVIDIA H200 float16"
    with pytest.raises(LookupError, match=expected):
        consumer.softmax_autotuned(x, y)
    with pytest.raises(LookupError, match=expected):
        consumer.softmax_looked_up(x, y)
    assert torch.isnan(y).all()  # nothing was launched


def test_default_prune_trusts_the_configs_verified_around_the_call(exported, on_h200):
    """prune_configs (no check) trusts the configs verified around the call, as its doc says: at 130
    columns (between 100 and 200) it keeps every listed config within 2x of the fastest at 100 (128w2 2.0:
    a block of 128, which cannot hold the row) or at 200 (512w2 3.0, 512w4 3.5). Hence check= for row
    kernels (CASES: with it, 512w2 and 512w4). At 400, a measured length, the fastest there alone."""
    configs, y = exported.CONFIGS, torch.empty(1, dtype=torch.float16)
    kept = exported.prune_configs(configs, {"y_ptr": y, "n_cols": 130})
    assert [_block_warps(c) for c in kept] == [(128, 2), (512, 2), (512, 4)]
    assert [_block_warps(c) for c in exported.prune_configs(configs, {"y_ptr": y}, n_cols=400)] == [
        (512, 4)]  # a size passed by keyword reaches the prune in kwargs
    with pytest.raises(LookupError, match=r"KEY names \['n_cols'\], not arguments of this call"):
        exported.prune_configs(configs, {"y_ptr": y, "N": 130})
    with pytest.raises(LookupError, match="no tensor argument to take the dtype from"):
        exported.prune_configs(configs, {"n_cols": 130})
    kept = exported.make_prune(dtype="float32")(configs, {"n_cols": 130})
    assert [_block_warps(c) for c in kept] == [(256, 1)]
    # A list of the user's own that shares no config with the export: nothing to keep at any shape.
    with pytest.raises(LookupError, match="none of the 1 configs given to autotune was verified"):
        exported.prune_configs([triton.Config({"BLOCK_SIZE": 4096}, num_warps=8)],
                               {"y_ptr": y, "n_cols": 130})


def test_consumer_and_module_import_nothing_of_the_runner(export_dir, tmp_path):
    probe = ("import sys, softmax_configs; torch_loaded = 'torch' in sys.modules; "
             "import consumer_repo.row_softmax; "
             "print(torch_loaded, [m for m in sys.modules "
             "if m.split('.')[0] in ('triton_sweep', 'tests')])")
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"  # consumer_repo's folder, as its repo's root
    path = os.pathsep.join([str(export_dir), str(fixtures)])
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                            check=True, env={**os.environ, "PYTHONPATH": path, "TRITON_INTERPRET": "1"},
                            timeout=120)
    assert result.stdout.split() == ["False", "[]"]
