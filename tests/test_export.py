"""Export: a self-contained module (imports only triton) and JSON, from GPU rows only, best first.

The store rows here are written by the test (as a GPU sweep would write them) so that the ranking they
must produce is known; the GPU test in test_gpu.py exports from a real sweep.
"""
import ast
import json
import math
import subprocess
import sys
import time

import pytest
import torch
import triton

from kernels import softmax
from runners.check import compare
from runners.export import main as export_main
from runners.store import ResultStore

GPU_ENV = {"backend": "cuda", "gpu_name": "NVIDIA H200", "driver_version": "580.159.04", "cuda_version": "13.0",
           "torch_version": "2.11.0", "triton_version": "3.6.0", "kernel_hash": "feedbeef0001"}
# (shape, BLOCK_SIZE, num_warps, p50_us). (256, 4) ran at 8x200 only (a 256 block cannot hold a
# 300-column row) and is the fastest there: it is BEST_BY_SHAPE at 8x200 but never in CONFIGS.
# Scores of the rest, against the best at each shape: (512, 4) sqrt(9/11 * 20/20) = 0.905,
# (512, 2) sqrt(9/10 * 20/30) = 0.775.
MEASURED = [((8, 200), 512, 2, 10.0), ((8, 200), 512, 4, 11.0), ((8, 200), 256, 4, 9.0),
            ((8, 300), 512, 2, 30.0), ((8, 300), 512, 4, 20.0)]


def _add(store, index, shape, block, warps, p50, **changes):
    store.append({**GPU_ENV, "trial_key": f"k{index}", "sweep_id": "s1", "kernel": "softmax", "provider": "triton",
                  "shape": shape, "dtype": "float16", "config": {"BLOCK_SIZE": block, "num_warps": warps, "num_stages": 1},
                  "status": "ok", "p50_us": p50, "gbps": 1000.0 / p50, "tflops": 0.1, "seed": 0,
                  "timestamp": "2026-11-22T00:00:00", **changes})


@pytest.fixture
def store_path(tmp_path):
    path = tmp_path / "results.sqlite"
    store = ResultStore(path)
    _add(store, 14, (8, 200), 512, 1, 1.0, kernel_hash="0ld50urce000")  # older kernel source: not mixed in
    for index, (shape, block, warps, p50) in enumerate(MEASURED):
        _add(store, index, shape, block, warps, p50)
    _add(store, 10, (8, 200), 512, 8, 1.0, status="incorrect", p50_us=None)  # never exported
    _add(store, 11, (8, 200), 512, 16, 1.0, provider="torch")  # a baseline, not a config
    _add(store, 12, (8, 200), 512, 32, 1.0, backend="interpret", gpu_name="Triton interpreter (CPU)")
    _add(store, 13, (8, 200), 512, 1, 5.0, gpu_name="NVIDIA H100 80GB HBM3")  # another GPU: its own file
    store.close()
    return path


def _export(store_path, tmp_path, *args):
    assert export_main(["--store", str(store_path), "--out-dir", str(tmp_path / "exports"), *args]) == 0
    return tmp_path / "exports"


def test_configs_best_first_and_best_by_shape(store_path, tmp_path):
    out = _export(store_path, tmp_path, "--kernel", "softmax")
    assert sorted(p.name for p in out.iterdir()) == [
        "softmax_nvidia_h100_80gb_hbm3.json", "softmax_nvidia_h100_80gb_hbm3.py",
        "softmax_nvidia_h200.json", "softmax_nvidia_h200.py"]
    data = json.loads((out / "softmax_nvidia_h200.json").read_text())
    ranked = [(c["config"]["BLOCK_SIZE"], c["config"]["num_warps"], round(c["score"], 3)) for c in data["configs"]]
    assert ranked == [(512, 4, round(math.sqrt(9 / 11 * 1), 3)), (512, 2, round(math.sqrt(9 / 10 * 20 / 30), 3))]
    best = {tuple(b["shape"]): (b["config"]["BLOCK_SIZE"], b["p50_us"]) for b in data["best_by_shape"]}
    assert best == {(8, 200): (256, 9.0), (8, 300): (512, 20.0)}
    assert data["gpu"] == "NVIDIA H200" and data["kernel_hash"] == "feedbeef0001" and data["sweep_ids"] == ["s1"]


def test_module_imports_only_triton_in_a_fresh_interpreter(store_path, tmp_path):
    module = _export(store_path, tmp_path, "--kernel", "softmax") / "softmax_nvidia_h200.py"
    imports = [node for node in ast.walk(ast.parse(module.read_text())) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert [alias.name for node in imports for alias in node.names] == ["triton"]
    probe = (f"import importlib.util, sys; spec = importlib.util.spec_from_file_location('m', {str(module)!r}); "
             "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
             "print(len(m.CONFIGS), m.CONFIGS[0].kwargs, m.CONFIGS[0].num_warps, "
             "m.BEST_BY_SHAPE[('float16', (8, 300))].num_warps, 'runners' in sys.modules, 'kernels' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert result.stdout.split() == ["2", "{'BLOCK_SIZE':", "512}", "4", "4", "False", "False"]


def _cpu_bench(fn, quantiles=None, **kwargs):
    """A do_bench for the interpreter (autotune's default needs a GPU driver): median wall time, ms."""
    times = []
    for _ in range(3):
        began = time.perf_counter()
        fn()
        times.append((time.perf_counter() - began) * 1e3)
    return sorted(times)[1]


def test_exported_configs_drive_triton_autotune(store_path, tmp_path):
    module = _export(store_path, tmp_path, "--kernel", "softmax") / "softmax_nvidia_h200.py"
    namespace = {}
    exec(compile(module.read_text(), str(module), "exec"), namespace)
    configs = namespace["CONFIGS"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    autotune_options = {} if device == "cuda" else {"do_bench": _cpu_bench}
    tuned = triton.autotune(configs=configs, key=["n_cols"], **autotune_options)(softmax._softmax_kernel)
    # At 8x300 the fastest config measured anywhere (BLOCK 256, at 8x200) would write only 256 of the
    # 300 columns: CONFIGS must not offer it.
    x = torch.randn(8, 300, device=device, dtype=torch.float16)
    out = torch.full_like(x, float("nan"))
    assert all(c.kwargs["BLOCK_SIZE"] >= 300 for c in configs)  # no config unable to hold the row
    tuned[lambda meta: (x.shape[0],)](out, x, x.shape[1], x.stride(0), out.stride(0))
    assert compare(out, softmax.softmax_ref(x.double())) is None


def test_interpreter_rows_are_refused(tmp_path, capsys):
    path = tmp_path / "results.sqlite"
    store = ResultStore(path)
    _add(store, 1, (8, 100), 128, 2, 10.0, backend="interpret", gpu_name="Triton interpreter (CPU)")
    store.close()
    assert export_main(["--store", str(path), "--kernel", "softmax", "--out-dir", str(tmp_path / "x")]) == 2
    assert "refusing to export 'softmax': its ok trials are interpreter timings" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
