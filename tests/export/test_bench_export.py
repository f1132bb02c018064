"""runners/benchmarks/bench_export.py without a GPU: its cases hold shapes out between and beyond the tuned
ones, its options parse, and one held-out shape of each kernel goes through the same code as on the GPU
(autotune over the export with its prune, config_for, autotune over the whole space, the check of
every pick and its timing) on the interpreter, with tiny shapes, a host clock and an export written
from made-up rows (the timings it prints here mean nothing)."""
import json
import math
import time

import pytest
import torch

from triton_sweep.benchmarks import bench_export
from triton_sweep.model.trial import TRITON_PROVIDER
from triton_sweep.model.spec_sources import load_spec
from triton_sweep.model.space import plan_trials
from triton_sweep.export import export_kernel
from triton_sweep.store.result_store import ResultStore

GPU_ENV = {"backend": "cuda", "gpu_name": "NVIDIA H200", "driver_version": "580.159.04",
           "cuda_version": "13.0", "torch_version": "2.11.0", "triton_version": "3.6.0",
           "kernel_hash": "feedbeef0003"}
# kernel -> (tuning shapes, one held-out shape between them): the smallest the default spaces allow
# (softmax's blocks start at 1024 and must be < 4x the row; matmul's BLOCK_N 128 needs N > 32). 2004 is
# not a multiple of 16, as no tuning length is either: no warning of kind.
TINY = {"softmax": ([(2, 300), (2, 1000), (2, 3000)], (2, 2004)),
        "layernorm": ([(2, 600), (2, 1000), (2, 3000)], (2, 2004)),
        "matmul": ([(64, 64, 64), (128, 128, 64), (256, 256, 64)], (96, 96, 64))}


def _grid_shapes(kernel):
    """The shapes sweeps/<kernel>_export.yaml measures."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from triton_sweep.model.schema import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(bench_export.REPO / "conf"), version_base="1.3"):
        conf = OmegaConf.to_container(compose("config", overrides=[f"+sweep={kernel}_export"]), resolve=True)
    trials = plan_trials(load_spec(kernel, None), conf["kernel"], "cuda")
    return sorted({t.shape for t in trials if t.pruned_reason is None})


@pytest.mark.parametrize("kernel", list(bench_export.CASES))
def test_held_out_shapes_lie_between_and_beyond_the_measured_ones(kernel):
    measured = _grid_shapes(kernel)
    held_out = [tuple(shape) for shape in bench_export.CASES[kernel]]
    assert len(held_out) >= 10 and not set(held_out) & set(measured)
    places = [bench_export.where(shape, measured) for shape in held_out]
    assert places.count("between") >= len(held_out) // 2 and "beyond" in places


def test_options_parse():
    assert bench_export.parse_args([]).kernels == ["softmax", "layernorm", "matmul"]
    args = bench_export.parse_args(["--kernels", "matmul", "--autotune-full", "--work", "w"])
    assert (args.kernels, args.autotune_full, args.work, args.sweep_only) == (["matmul"], True, "w", [])
    args = bench_export.parse_args(["--sweep-only", "attention", "vector_add"])
    assert (args.kernels, args.sweep_only) == ([], ["attention", "vector_add"])
    with pytest.raises(SystemExit):
        bench_export.parse_args(["--kernels", "attention"])  # no held-out cases: --sweep-only


@pytest.mark.skipif(torch.cuda.is_available(), reason="says that it needs a GPU")
def test_without_a_gpu_it_says_so(capsys):
    assert bench_export.main([]) == 2
    assert "bench_export needs a CUDA GPU" in capsys.readouterr().err


class HostTimer:
    """triton_sweep.measure.device.cuda_timer's measure(fn).samples_s, by the host's clock (the
    interpreter)."""

    def measure(self, fn):
        samples = []
        for _ in range(3):
            began = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - began)
        return type("Measurement", (), {"samples_s": samples})()


def _host_bench(fn, quantiles=None, **kwargs):
    began = time.perf_counter()
    fn()
    return (time.perf_counter() - began) * 1e3


def _export(kernel, tmp_path):
    """Rows as a GPU sweep at the tiny tuning shapes writes them (made-up p50s), exported."""
    spec = load_spec(kernel, None)
    trials = plan_trials(spec, {"shapes": [list(s) for s in TINY[kernel][0]], "dtypes": ["float16"],
                                "baselines": []}, "cuda")
    store = ResultStore(tmp_path / "results.sqlite")
    grid = len([t for t in trials if t.shape == trials[0].shape])
    for index, trial in enumerate(trials):
        ok = trial.pruned_reason is None
        # The made-up best moves through the grid from shape to shape: lists of more than one config.
        position, shape_index = index % grid, index // grid
        slower = 1 + 0.05 * ((position - 7 * shape_index) % grid)
        store.append({**GPU_ENV, "trial_key": trial.key, "sweep_id": "tiny", "kernel": kernel,
                      "provider": TRITON_PROVIDER, "shape": trial.shape, "dtype": "float16",
                      "config": trial.config, "status": "ok" if ok else "pruned",
                      "message": trial.pruned_reason, "phase": "screen",
                      "p50_us": math.prod(trial.shape) / 1e3 * slower if ok else None,
                      "seed": 0, "timestamp": "2026-11-22T00:00:00"})
    frame = store.load()
    store.close()
    (path, _) = export_kernel(frame, kernel, tmp_path / "exports", key=dict(spec.export_key))
    return spec, bench_export.load_export(path)


@pytest.mark.parametrize("kernel", list(TINY))
def test_one_held_out_shape_on_the_interpreter(kernel, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_EXPORT_GPU", "NVIDIA H200")
    spec, exported = _export(kernel, tmp_path)
    shape = TINY[kernel][1]
    space = bench_export.sweep_space(kernel, spec)
    best = bench_export.full_space(space, spec, shape, "float16")[0]
    row = bench_export.bench_shape(kernel, spec, exported, shape, "float16", best, HostTimer(), True,
                                   device="cpu", do_bench=_host_bench)
    assert row["notes"] == []  # every pick ran and matched the float64 reference
    assert set(row["picks"]) == {"exhaustive", "config_for", "export", "autotune_full"}
    assert all(us > 0 for us in row["us"].values()) and row["kept"] >= 1
    assert row["first_call_short_s"] > 0 and row["first_call_full_s"] > 0
    assert row["full_configs"] == len(bench_export.full_space(space, spec, shape, "float16")) > 1
    assert row["range_warning"] is False  # between the tuned shapes
    if kernel == "softmax":  # the pick holds the 2004-column row
        assert row["picks"]["export"]["BLOCK_SIZE"] >= 2004
        assert row["picks"]["config_for"]["BLOCK_SIZE"] >= 2004
    listed = [bench_export.as_dict(c) for c, _ in exported.cover_for("float16", "NVIDIA H200")]
    assert len(listed) > 1  # so that autotune calls the prune
    assert row["picks"]["export"] in listed
    result = {"kernel": kernel, "list_length": {"float16": len(listed)}, "list": listed,
              "rows": [{**row, "where": "between"}]}
    line = bench_export.table([result]).splitlines()[2]
    assert line.startswith(f"| {kernel} | float16 | {'x'.join(map(str, shape))} | between | ")
    assert "%)" in line
    json.dumps(result)  # plain data, as printed


def test_the_summary_sets_held_out_figures_beside_the_leave_one_out_estimate():
    loo = {"summary": {"autotune": {"good": 9, "shapes": 10, "geomean_pct": 98.5},
                       "config_for": {"good": 7, "shapes": 10, "geomean_pct": 95.0}}}
    rows = [{"dtype": dtype, "us": {"exhaustive": 10.0, "export": us, "config_for": us * 1.1}}
            for dtype in bench_export.DTYPES for us in (10.0, 10.2, 12.5)]
    result = {"kernel": "softmax", "tune_s": 61.0, "trials": 576, "rows": rows,
              "leave_one_out": {dtype: loo for dtype in bench_export.DTYPES}}
    lines = bench_export.summary([result]).splitlines()
    # 100% and 98% reach 97%, 80% not: 2 of 3, geometric mean (100 x 98.04 x 80) ^ (1/3)
    mean = (100 * (1000 / 10.2) * 80) ** (1 / 3)
    assert lines[2] == (f"| softmax | float16 | 61 (576) | 3 | 2/3 ({mean:.1f}%) | 9/10 (98.5%) | "
                        f"0/3 ({mean / 1.1:.1f}%) | 7/10 (95.0%) |")
