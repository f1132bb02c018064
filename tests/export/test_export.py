"""Export: a covering set per (GPU, dtype) with the shapes where each config was ok, as JSON (the data of
record) and a module that imports only triton, from GPU rows only.

The store rows here are written by the test (as a GPU sweep would write them) so that the lists they
must produce are known by hand; the GPU test in test_gpu.py exports from a real sweep, and
test_export_roundtrip.py drives another repository's kernel with an export.
"""
import ast
import json
import math
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from triton_sweep.kernels import softmax
from triton_sweep.model.schema import register_configs
from triton_sweep.model.trial import TRITON_PROVIDER
from triton_sweep.model.spec_sources import load_spec
from triton_sweep.model.space import plan_trials
from triton_sweep.export.command import main as export_main
from triton_sweep.export import export_kernel
from triton_sweep.export.settings import from_sweep
from triton_sweep.measure.check import compare
from triton_sweep.store.result_store import ResultStore

REPO = Path(__file__).resolve().parents[2]
GPU_ENV = {"backend": "cuda", "gpu_name": "NVIDIA H200", "driver_version": "580.159.04",
           "cuda_version": "13.0", "torch_version": "2.11.0", "triton_version": "3.6.0",
           "kernel_hash": "feedbeef0001"}
# (shape, BLOCK_SIZE, num_warps, p50_us). Best at 8x200: (256, 4) 9.0; at 8x300: (512, 4) 20.0.
# Within 3%: (256, 4) covers 8x200 only (a 256 block cannot hold a 300-column row: never run there);
# (512, 4) covers 8x300 only (11.0 > 1.03 x 9.0 at 8x200); (512, 2) covers nothing (10.0 and 30.0).
# Both cover one shape and win it: the fewer resources first (BLOCK 256 < 512). CONFIGS: (256, 4), (512, 4).
# The list is the covering set, then the alternates (every other config within the tolerance of the best at
# one shape at least): at 3% none, (512, 2) being within it nowhere.
# Within 25% (limits 11.25 at 8x200, 25.0 at 8x300): (512, 4) covers both shapes (11.0, 20.0) and is the
# covering set; (512, 2) (10.0 at 8x200; 30.0 > 25.0 at 8x300) and (256, 4) (9.0 at 8x200) are within it
# at one shape each: the alternates, first measured first ((512, 2) was stored before (256, 4)).
MEASURED = [((8, 200), 512, 2, 10.0), ((8, 200), 512, 4, 11.0), ((8, 200), 256, 4, 9.0),
            ((8, 300), 512, 2, 30.0), ((8, 300), 512, 4, 20.0)]


def _add(store, index, shape, block, warps, p50, **changes):
    config = {"BLOCK_SIZE": block, "num_warps": warps, "num_stages": 1}
    store.append({**GPU_ENV, "trial_key": f"k{index}", "sweep_id": "s1", "kernel": "softmax",
                  "provider": "triton", "shape": shape, "dtype": "float16", "config": config, "status": "ok",
                  "phase": "screen", "p50_us": p50, "gbps": 1000.0 / p50, "tflops": 0.1, "seed": 0,
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
    _add(store, 13, (8, 200), 512, 1, 5.0, gpu_name="NVIDIA H100 80GB HBM3")  # another GPU: its own section
    store.close()
    return path


def _export(store_path, tmp_path, *args):
    assert export_main(["--store", str(store_path), "--out-dir", str(tmp_path / "exports"), *args]) == 0
    return tmp_path / "exports"


def _listed(section, dtype="float16"):
    configs = section["dtypes"][dtype]["configs"]
    return [(c["config"]["BLOCK_SIZE"], c["config"]["num_warps"]) for c in configs]


def _load(path):
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace


def test_covering_set_per_gpu_with_validity_and_best_by_shape(store_path, tmp_path):
    out = _export(store_path, tmp_path, "--kernel", "softmax", "--key", "n_cols=cols")
    assert sorted(p.name for p in out.iterdir()) == ["softmax_configs.json", "softmax_configs.py"]
    data = json.loads((out / "softmax_configs.json").read_text())
    assert list(data["gpus"]) == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    assert data["key"] == {"n_cols": "cols"}
    h200 = data["gpus"]["NVIDIA H200"]["3.6.0"]
    assert _listed(h200) == [(256, 4), (512, 4)]
    assert _listed(data["gpus"]["NVIDIA H100 80GB HBM3"]["3.6.0"]) == [(512, 1)]
    first, second = h200["dtypes"]["float16"]["configs"]
    assert first["ok_at"] == [{"shape": [8, 200], "p50_us": 9.0}] and first["covers"] == [[8, 200]]
    assert second["ok_at"] == [{"shape": [8, 200], "p50_us": 11.0}, {"shape": [8, 300], "p50_us": 20.0}]
    best = {tuple(b["shape"]): (b["config"]["BLOCK_SIZE"], b["p50_us"], b["list_p50_us"])
            for b in h200["dtypes"]["float16"]["best_by_shape"]}
    assert best == {(8, 200): (256, 9.0, 9.0), (8, 300): (512, 20.0, 20.0)}
    assert h200["kernel_hash"] == "feedbeef0001" and h200["sweep_ids"] == ["s1"] and h200["trials"] == 5
    module = _load(out / "softmax_configs.py")  # the same data, generated from the JSON
    configs = [(c.kwargs["BLOCK_SIZE"], c.num_warps) for c in module["CONFIGS"]]
    assert configs == [(512, 1), (256, 4), (512, 4)]  # H100's list, then H200's
    assert module["BEST_BY_SHAPE"]["NVIDIA H200"]["3.6.0"][("float16", (8, 300))].num_warps == 4


def test_tolerance_decides_the_list(store_path, tmp_path):
    """At 25% (MEASURED's comment): the covering set is (512, 4) alone, followed by the alternates (512, 2)
    and (256, 4), within 25% at 8x200 only; (512, 2), within 3% nowhere, is not listed at the default."""
    data = json.loads((_export(store_path, tmp_path, "--kernel", "softmax", "--tolerance", "0.25")
                       / "softmax_configs.json").read_text())
    assert _listed(data["gpus"]["NVIDIA H200"]["3.6.0"]) == [(512, 4), (512, 2), (256, 4)]
    section = data["gpus"]["NVIDIA H200"]["3.6.0"]["dtypes"]["float16"]
    covers = [c["covers"] for c in section["configs"]]
    assert covers == [[[8, 200], [8, 300]], [[8, 200]], [[8, 200]]]
    # The winner at 8x200 is listed (an alternate): the list's best there is the winner's own 9.0.
    best = section["best_by_shape"][0]
    assert (best["config"]["BLOCK_SIZE"], best["list_p50_us"]) == (256, 9.0)


def test_module_imports_only_triton_in_a_fresh_interpreter(store_path, tmp_path):
    module = _export(store_path, tmp_path, "--kernel", "softmax") / "softmax_configs.py"
    top = [alias.name for node in ast.parse(module.read_text()).body
           if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names]
    assert top == ["triton"]  # os and torch only inside gpu_name(), at the first lookup
    probe = (f"import importlib.util, sys; spec = importlib.util.spec_from_file_location('m', "
             f"{str(module)!r}); "
             "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
             "print(len(m.CONFIGS), m.CONFIGS[1].kwargs, m.CONFIGS[1].num_warps, "
             "m.BEST_BY_SHAPE['NVIDIA H200']['3.6.0'][('float16', (8, 300))].num_warps, "
             "[name for name in ('torch', 'triton_sweep') if name in sys.modules])")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                            check=True, timeout=120)
    assert result.stdout.split() == ["3", "{'BLOCK_SIZE':", "256}", "4", "4", "[]"]


def test_exported_prune_drives_triton_autotune(store_path, tmp_path, monkeypatch):
    out = _export(store_path, tmp_path, "--kernel", "softmax", "--key", "n_cols=cols")
    module = _load(out / "softmax_configs.py")
    monkeypatch.setenv("TRITON_EXPORT_GPU", "NVIDIA H200")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    prune = {"early_config_prune": module["prune_configs"]}
    tuned = triton.autotune(configs=module["CONFIGS"], key=["n_cols"], do_bench=module["do_bench"],
                            prune_configs_by=prune)(softmax._softmax_kernel)
    # CONFIGS holds BLOCK 256, the fastest at 8x200, which would write only 256 of 300 columns: the
    # prune keeps what was ok at 8x300, (512, 4) alone.
    x = torch.randn(8, 300, device=device, dtype=torch.float16)
    out = torch.full_like(x, float("nan"))
    tuned[lambda meta: (x.shape[0],)](out, x, x.shape[1], x.stride(0), out.stride(0))
    assert (tuned.best_config.kwargs["BLOCK_SIZE"], tuned.best_config.num_warps) == (512, 4)
    assert compare(out, softmax.softmax_ref(x.double())) is None


def test_interpreter_rows_are_refused(tmp_path, capsys):
    path = tmp_path / "results.sqlite"
    store = ResultStore(path)
    _add(store, 1, (8, 100), 128, 2, 10.0, backend="interpret", gpu_name="Triton interpreter (CPU)")
    store.close()
    assert export_main(["--store", str(path), "--kernel", "softmax", "--out-dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "refusing to export 'softmax': its ok trials are interpreter timings" in err
    assert "triton-sweep-export --interpreter" in err
    assert not (tmp_path / "x").exists()


def test_rows_without_a_driver_version_export(tmp_path):
    """A NULL driver_version made the same-environment filter drop every row (NaN != NaN in pandas), and
    the export ended in 'attempt to get argmax of an empty sequence'."""
    path = tmp_path / "results.sqlite"
    store = ResultStore(path)
    for index, (shape, block, warps, p50) in enumerate(MEASURED):
        _add(store, index, shape, block, warps, p50, driver_version=None)
    store.close()
    out = _export(path, tmp_path, "--kernel", "softmax")
    data = json.loads((out / "softmax_configs.json").read_text())
    h200 = data["gpus"]["NVIDIA H200"]["3.6.0"]
    assert h200["driver_version"] is None and h200["trials"] == 5
    assert _listed(data["gpus"]["NVIDIA H200"]["3.6.0"]) == [(256, 4), (512, 4)]
    module = (out / "softmax_configs.py").read_text()
    assert "NVIDIA H200, Triton 3.6.0: driver not recorded, CUDA 13.0" in module


def test_finalists_compete_among_themselves(tmp_path):
    """At a shape whose finalists were re-timed, only their re-timed p50s compete: a screening p50 taken
    at a higher clock (10.5) must not make the finalists (12.0, 12.1) look 14% slower than the best."""
    path = tmp_path / "results.sqlite"
    store = ResultStore(path)
    _add(store, 1, (8, 400), 512, 4, 10.0)
    _add(store, 2, (8, 400), 512, 8, 10.1)
    _add(store, 3, (8, 400), 1024, 4, 10.5)  # not a finalist (top_k 2)
    # Tied; the tie rule chooses the fewer warps, (512, 4), although its p50 is the higher.
    _add(store, 1, (8, 400), 512, 4, 12.1, phase="final", rank=2, tie=True, chosen=True)
    _add(store, 2, (8, 400), 512, 8, 12.0, phase="final", rank=1, tie=True, chosen=False)
    store.close()
    data = json.loads((_export(path, tmp_path, "--kernel", "softmax") / "softmax_configs.json").read_text())
    section = data["gpus"]["NVIDIA H200"]["3.6.0"]["dtypes"]["float16"]
    # Both finalists are within 3% of 12.0 and cover the shape; the winner breaks the tie and is the
    # covering set, the other finalist follows as an alternate. (1024, 4), not re-timed, is not listed.
    # Had the screening p50 of (1024, 4) counted, it alone would have been listed (12.0 > 1.03 x 10.5).
    assert _listed(data["gpus"]["NVIDIA H200"]["3.6.0"]) == [(512, 4), (512, 8)]
    assert [c["covers"] for c in section["configs"]] == [[[8, 400]], [[8, 400]]]
    best = section["best_by_shape"][0]
    assert best["fastest_p50_us"] == 12.0 and best["p50_us"] == 12.1


def test_sections_of_other_gpus_are_kept_unless_no_merge(store_path, tmp_path, capsys):
    out = _export(store_path, tmp_path, "--kernel", "softmax", "--key", "n_cols=cols")
    other = tmp_path / "other.sqlite"
    store = ResultStore(other)
    _add(store, 1, (8, 200), 256, 2, 7.0, gpu_name="NVIDIA B200")
    store.close()
    assert export_main(["--store", str(other), "--kernel", "softmax", "--out-dir", str(out)]) == 0
    data = json.loads((out / "softmax_configs.json").read_text())
    assert list(data["gpus"]) == ["NVIDIA B200", "NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    assert data["key"] == {"n_cols": "cols"}  # softmax's own key (KernelSpec.export_key)
    kept = "softmax_configs.json keeps the configs of 'NVIDIA H200', Triton '3.6.0'"
    assert kept in capsys.readouterr().out
    assert export_main(["--store", str(other), "--kernel", "softmax", "--out-dir", str(out),
                        "--no-merge"]) == 0
    assert list(json.loads((out / "softmax_configs.json").read_text())["gpus"]) == ["NVIDIA B200"]


def test_bad_export_input_names_the_field(store_path, tmp_path, capsys):
    base = ["--store", str(store_path), "--kernel", "softmax", "--out-dir", str(tmp_path / "x")]
    assert export_main(base + ["--key", "n_cols=colz"]) == 2
    assert "--key: n_cols=colz: 'colz' is not a dim of softmax (rows, cols)" in capsys.readouterr().err
    assert export_main(base + ["--key", "n_cols"]) == 2
    assert "--key: 'n_cols' must look like ARGUMENT=DIM" in capsys.readouterr().err
    assert export_main(base + ["--tolerance", "-0.1"]) == 2
    assert "export.tolerance: -0.1 must be a share in [0, 1)" in capsys.readouterr().err
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "softmax_configs.json").write_text(json.dumps({"format": 2, "kernel": "layernorm"}))
    assert export_main(base) == 2
    assert "cannot merge into" in capsys.readouterr().err
    assert not (tmp_path / "x" / "softmax_configs.py").exists()


def test_a_samples_blob_the_export_does_not_read_is_still_checked(store_path, tmp_path, capsys):
    """The command loads no samples_us (STORE_COLUMNS), yet one of odd length refuses the export, as
    loading it did: exit 2, one line naming the row and the field, no file."""
    with sqlite3.connect(store_path) as db:
        db.execute("UPDATE trials SET samples_us = x'0102030405' WHERE id = 3")
    assert export_main(["--store", str(store_path), "--out-dir", str(tmp_path / "x")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "row 3: samples_us: a blob of 5 bytes" in line and "(a row no sweep writes)" in line
    assert not (tmp_path / "x").exists()


@pytest.fixture(scope="module")
def default_config():
    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        yield compose("config", overrides=["export.tolerance=0.03"])


def _model_p50(shape, config):
    """A made-up latency (not a measurement): bytes over 3 TB/s, slower for a block wider than the row
    and for warps away from one per 512 columns."""
    rows, cols = shape
    waste = config["BLOCK_SIZE"] / triton.next_power_of_2(cols)
    warps = abs(math.log2(config["num_warps"]) - math.log2(max(1, min(32, cols // 512))))
    return 4 * rows * cols / 3e6 * waste ** 0.5 * (1 + 0.04 * warps)


def _write_default_sweep(path, cfg):
    """The rows the README's default sweep writes: its shapes, dtype and space, pruned by the kernel's
    constraints, with the model's latencies for the ok trials."""
    spec = load_spec(cfg.kernel.name, None)
    trials = plan_trials(spec, OmegaConf.to_container(cfg.kernel, resolve=True), "cuda")
    store = ResultStore(path)
    for trial in trials:
        ok = trial.pruned_reason is None
        p50 = _model_p50(trial.shape, trial.config) if ok and trial.provider == TRITON_PROVIDER else 1e3
        store.append({**GPU_ENV, "trial_key": trial.key, "sweep_id": "readme", "kernel": trial.kernel,
                      "provider": trial.provider, "shape": trial.shape, "dtype": trial.dtype,
                      "config": trial.config, "status": "ok" if ok else "pruned",
                      "message": trial.pruned_reason, "phase": "screen",
                      "p50_us": p50 if ok else None, "seed": 0, "timestamp": "2026-11-22T00:00:00"})
    store.close()
    return trials


def test_default_sweep_exports_a_list_for_every_shape(default_config, tmp_path, capsys):
    trials = _write_default_sweep(tmp_path / "results.sqlite", default_config)
    ok_at = {}
    for trial in trials:
        if trial.provider == TRITON_PROVIDER and trial.pruned_reason is None:
            ok_at.setdefault(json.dumps(trial.config, sort_keys=True), set()).add(trial.shape)
    shapes = {trial.shape for trial in trials}  # softmax's default shapes (KernelSpec.default_shapes)
    assert len(shapes) == 3 and not any(at == shapes for at in ok_at.values())  # no config is ok everywhere
    store = ResultStore(tmp_path / "results.sqlite")
    frame = store.load(sweep_id="readme")
    store.close()
    export_kernel(frame, "softmax", tmp_path / "exports", **from_sweep(default_config, "softmax"))
    # What it says of the sizes between its 3 row lengths, as the README's quick start shows it: whatever
    # the latencies, none of the blocks the kernel's rule lets run at one length runs at another.
    (said,) = [line for line in capsys.readouterr().out.splitlines() if "did not measure" in line]
    assert said.startswith("softmax on NVIDIA H200, float16: at sizes the sweep did not measure: unknown")
    assert said in (REPO / "README.md").read_text()
    module = _load(tmp_path / "exports" / "softmax_configs.py")
    assert module["KEY"] == {"n_cols": "cols"}  # softmax.SPEC.export_key
    cover = module["COVER"]["NVIDIA H200"]["3.6.0"]["float16"]
    assert module["CONFIGS"] and {shape for _, verified in cover for shape in verified} >= shapes
    for shape in shapes:  # the list's best where it was ok is within 3% of the best there
        best = min(_model_p50(shape, json.loads(c)) for c, at in ok_at.items() if shape in at)
        listed = min(verified[shape] for _, verified in cover if shape in verified)
        assert listed <= 1.03 * best


def _readme_example() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("## Use the tuned configs in another repo", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return code


def test_readme_example_runs(default_config, tmp_path):
    """The README's code, as a user pastes it, against the default sweep's export; on the CPU the
    interpreter runs it, on CPU tensors, the module's do_bench timing autotune by the wall clock."""
    _write_default_sweep(tmp_path / "results.sqlite", default_config)
    store = ResultStore(tmp_path / "results.sqlite")
    frame = store.load(sweep_id="readme")
    store.close()
    export_kernel(frame, "softmax", tmp_path / "exports", **from_sweep(default_config, "softmax"))
    code = _readme_example()
    check = ("\nreference = torch.softmax(x.double(), dim=1)\n"
             "assert not out.isnan().any() and (out.double() - reference).abs().max() < 1e-3\n"
             "print('README OK', config)\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "exports"), "TRITON_EXPORT_GPU": "NVIDIA H200",
           "TRITON_INTERPRET": "0" if torch.cuda.is_available() else "1"}
    result = subprocess.run([sys.executable, "-c", code + check], capture_output=True, text=True,
                            cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "README OK" in result.stdout


def test_the_export_command_writes_what_the_end_of_the_sweep_writes(default_config, tmp_path):
    """Issue 24: `python -m triton_sweep.export --kernel softmax` by hand takes the sweep's defaults (the
    built-in key, the tolerance): the files of the two exports of one store differ in their timestamps
    only."""
    plain = compose("config")  # in default_config's Hydra context: the sweep's config, no override
    _write_default_sweep(tmp_path / "results.sqlite", plain)
    store = ResultStore(tmp_path / "results.sqlite")
    frame = store.load(sweep_id="readme")
    store.close()
    export_kernel(frame, "softmax", tmp_path / "sweep", **from_sweep(plain, "softmax"))
    assert export_main(["--store", str(tmp_path / "results.sqlite"), "--kernel", "softmax",
                        "--out-dir", str(tmp_path / "command")]) == 0
    stamp = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00")
    for name in ("softmax_configs.json", "softmax_configs.py"):
        by_sweep = (tmp_path / "sweep" / name).read_text()
        by_command = (tmp_path / "command" / name).read_text()
        assert stamp.search(by_sweep) and ("'n_cols': 'cols'" in by_command or name.endswith(".json"))
        assert stamp.sub("T", by_sweep) == stamp.sub("T", by_command)
    # --key and --tolerance still override the defaults.
    assert export_main(["--store", str(tmp_path / "results.sqlite"), "--kernel", "softmax", "--key",
                        "cols_arg=cols", "--tolerance", "0.5", "--out-dir", str(tmp_path / "over")]) == 0
    data = json.loads((tmp_path / "over" / "softmax_configs.json").read_text())
    assert data["key"] == {"cols_arg": "cols"} and data["gpus"]["NVIDIA H200"]["3.6.0"]["tolerance"] == 0.5


def _two_versions(tmp_path):
    """An export holding sections of Triton 3.6.0 and 3.9.0 on one GPU, each with its own winner at
    8x200: (256, 4) under 3.6.0 (MEASURED), (512, 2) under 3.9.0."""
    old = tmp_path / "old.sqlite"
    store = ResultStore(old)
    for index, (shape, block, warps, p50) in enumerate(MEASURED):
        _add(store, index, shape, block, warps, p50)
    store.close()
    out = _export(old, tmp_path, "--kernel", "softmax")
    new = tmp_path / "new.sqlite"
    store = ResultStore(new)
    for index, (shape, block, warps, p50) in enumerate(MEASURED):
        p50 = 5.0 if (block, warps) == (512, 2) else p50
        _add(store, index, shape, block, warps, p50, triton_version="3.9.0")
    store.close()
    assert export_main(["--store", str(new), "--kernel", "softmax", "--out-dir", str(out)]) == 0
    return out


def _winner_at_8x200(namespace, **choice):
    config = namespace["config_for"]("float16", gpu="NVIDIA H200", cols=200, **choice)
    return config.kwargs["BLOCK_SIZE"], config.num_warps


def test_sections_by_triton_version_the_running_one_else_the_nearest(tmp_path, monkeypatch):
    """Issue 22: one file, a section per (GPU, Triton version); the module takes the running Triton's,
    else the nearest older, else the nearest newer with a warning naming both; an argument or
    TRITON_EXPORT_TRITON forces one."""
    import types
    import warnings

    out = _two_versions(tmp_path)
    data = json.loads((out / "softmax_configs.json").read_text())
    assert data["format"] == 3 and list(data["gpus"]["NVIDIA H200"]) == ["3.6.0", "3.9.0"]
    namespace = _load(out / "softmax_configs.py")
    monkeypatch.delenv("TRITON_EXPORT_TRITON", raising=False)
    for running, expected in (("3.9.0", (512, 2)), ("3.10.1", (512, 2)), ("3.7.2", (256, 4)),
                              ("3.6.0+gitabc", (256, 4))):
        namespace["triton"] = types.SimpleNamespace(__version__=running)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # exact or older: no warning
            assert _winner_at_8x200(namespace) == expected, running
    namespace["triton"] = types.SimpleNamespace(__version__="3.4.0")  # older than every section
    with pytest.warns(namespace["ExportVersionWarning"], match="Triton 3.6.0, newer than the running 3.4.0"):
        assert _winner_at_8x200(namespace) == (256, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per GPU
        _winner_at_8x200(namespace)
    assert _winner_at_8x200(namespace, triton_version="3.9.0") == (512, 2)
    monkeypatch.setenv("TRITON_EXPORT_TRITON", "3.9.0")
    assert _winner_at_8x200(namespace) == (512, 2)
    with pytest.raises(namespace["ExportLookupError"], match="measured: 3.6.0, 3.9.0"):
        _winner_at_8x200(namespace, triton_version="3.5.0")


def test_a_file_of_the_earlier_format_still_loads(tmp_path, capsys):
    """An export of format 2 (one section a GPU) is merged into by the next export, which files its
    sections under their Triton versions, and compare reads it."""
    out = _two_versions(tmp_path)
    data = json.loads((out / "softmax_configs.json").read_text())
    older = {**data, "format": 2, "gpus": {"NVIDIA H200": data["gpus"]["NVIDIA H200"]["3.6.0"]}}
    (out / "softmax_configs.json").write_text(json.dumps(older))
    from triton_sweep.compare import command as compare

    assert compare.main([str(out / "softmax_configs.json"), f"{tmp_path / 'old.sqlite'}"]) == 0
    assert "the export" in capsys.readouterr().out
    assert export_main(["--store", str(tmp_path / "new.sqlite"), "--kernel", "softmax", "--out-dir",
                        str(out)]) == 0
    merged = json.loads((out / "softmax_configs.json").read_text())
    assert merged["format"] == 3 and list(merged["gpus"]["NVIDIA H200"]) == ["3.6.0", "3.9.0"]
