"""On a GPU: a real sweep through the CUDA worker, its export, and the export driving @triton.autotune."""
import contextlib
import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import triton

from triton_sweep.kernels import softmax
from triton_sweep.engine.startup import IMPORTERS
from triton_sweep.measure.metrics import timers_disagree
from triton_sweep.measure.check import compare
from triton_sweep.measure.device import cuda_timer
from triton_sweep.measure.stop_rule import StopRule
from triton_sweep.measure.cuda_timer import MAX_CALLS_PER_HOLD, Pace
from triton_sweep.measure.l2_flush import FLUSH_KERNEL_NAME
from tests.conftest import run_sweep, sweep_rows
from tests.commands.test_sweep import end_of_sweep

pytestmark = pytest.mark.gpu


def gpu_uuids() -> list[str]:
    """This host's GPUs as nvidia-smi -L names them, by CUDA index."""
    return [f"GPU-{torch.cuda.get_device_properties(i).uuid}" for i in range(torch.cuda.device_count())]


def test_gpu_sweep_exports_configs_that_autotune_uses(tmp_path):
    result = run_sweep(tmp_path, "kernel=softmax", "kernel.shapes=[[1823,781],[4096,1024]]",
                       "kernel.dtypes=[bfloat16,float16]", "kernel.space.BLOCK_SIZE=[1024,2048]",
                       "kernel.space.num_warps=[4,8]", "kernel.baselines=[torch]", "logger.mode=offline",
                       "sweep_id=gpu_test", backend="cuda")
    rows = sweep_rows(tmp_path, "gpu_test")
    ok = rows[rows["status"] == "ok"]
    # 2 shapes x 2 dtypes x (2 blocks x 2 num_warps + the torch baseline); both blocks hold both rows.
    assert len(ok) == len(rows) == 2 * 2 * (2 * 2 + 1)
    assert set(rows["backend"]) == {"cuda"} and (ok["gpu_name"] == torch.cuda.get_device_name(0)).all()
    assert set(ok["gpu_uuid"]) <= set(gpu_uuids())  # each row names the GPU of the worker that measured it
    assert (ok["n_samples"] >= 6).all() and ok["pct_copy_bw"].notna().all()  # FAST_TIMING: min_samples=6
    assert ok["sm_clock_start_mhz"].notna().all() and ok["throttled"].notna().all()
    # The kernel time of record comes from CUPTI; the CUDA-event time around the same calls is longer
    # by launch overhead only, and every one of our calls is exactly one kernel.
    assert (ok["timing_method"] == "cupti/read-flush").all()
    disagree = ok[ok["timers_disagree"]]
    assert disagree.empty, disagree[["shape", "dtype", "config", "p50_us", "event_p50_us", "n_samples",
                                     "sm_clock_start_mhz", "sm_clock_end_mhz", "gpu_uuid", "samples_us",
                                     "event_samples_us"]].to_string()
    assert (ok["event_p50_us"] > ok["p50_us"]).all()
    assert (ok.loc[ok["provider"] == "triton", "kernels_per_call"] == 1).all()

    module_path = tmp_path / "exports" / "softmax_configs.py"
    spec = importlib.util.spec_from_file_location("exported", module_path)
    exported = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(exported)
    gpu = torch.cuda.get_device_name(0)
    best = exported.BEST_BY_SHAPE[gpu][triton.__version__][("float16", (4096, 1024))]
    # The prune finds the GPU from the tensors' device and the dtype from the first tensor argument; the
    # export's do_bench times what it keeps.
    tuned = triton.autotune(
        configs=exported.CONFIGS, key=["n_cols"], do_bench=exported.do_bench,
        prune_configs_by={"early_config_prune": exported.prune_configs})(softmax._softmax_kernel)
    x = torch.randn(4096, 1024, device="cuda", dtype=torch.float16)
    out = torch.full_like(x, float("nan"))
    tuned[lambda meta: (x.shape[0],)](out, x, x.shape[1], x.stride(0), out.stride(0))
    p50, p20, p80 = exported.do_bench(lambda: x.mul(2), quantiles=(0.5, 0.2, 0.8))
    assert 0 < p20 <= p50 <= p80 and exported.do_bench(lambda: x.mul(2)) > 0
    listed = [config for config, _ in exported.cover_for("float16")]
    assert tuned.best_config in listed and exported.config_for("float16", cols=1024) == best
    assert compare(out, softmax.softmax_ref(x.double())) is None
    # The end of a default sweep on a GPU: the counts, the table with GB/s and % of the copy ceiling, the
    # export, W&B's files and what to run next; no time accounting (verbose=true).
    end = end_of_sweep(result.stdout)
    said = "\n".join(end)
    table = [line for line in end if line.startswith("softmax ") and "BLOCK_SIZE" in line]
    assert len(table) == 4 and len(end) - len(table) <= 9, said  # 2 of them the export's, one a dtype
    assert "20 trials: 16 configs (16 ok), 4 baselines (4 ok)" in end, said
    assert "GB/s" in said and "%copy" in said and "interpreter" not in said
    assert f"exported: {module_path}, {module_path.with_suffix('.json')}" in said
    assert "W&B offline runs" in said
    assert end[-1].startswith(f"next: copy {module_path} next to your kernel")
    assert "W&B logging" not in result.stdout and "time spent" not in result.stdout
    data = json.loads(module_path.with_suffix(".json").read_text())
    assert list(data["gpus"]) == [gpu] and list(data["gpus"][gpu]) == [triton.__version__]


def test_illegal_memory_access_mid_sweep_is_crashed_and_nothing_is_lost(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    run_sweep(tmp_path, "kernel=external", "kernel.spec=tests.fixtures.bad_kernels:ILLEGAL_ACCESS",
              "kernel.shapes=[1000000]", "kernel.dtypes=[float16]",
              "+kernel.space.BLOCK_SIZE=[256,512,1024,2048]", "+kernel.space.num_warps=[4]",
              "kernel.baselines=[]", "sweep_id=illegal", backend="cuda")
    rows = sweep_rows(tmp_path, "illegal")
    status = {json.loads(c)["BLOCK_SIZE"]: (s, m)
              for c, s, m in zip(rows["config"], rows["status"], rows["message"])}
    assert len(rows) == 4 and status[512][0] == "crashed" and "illegal" in status[512][1]
    assert all(status[block][0] == "ok" for block in (256, 1024, 2048))
    # The compile pool built every binary and the GPU worker only loaded them: one cache entry per
    # config (a worker that compiled again under another key would have made a second one).
    built = [p.parent.name for p in (tmp_path / "triton-cache").glob("*/*.cubin")
             if p.stem != FLUSH_KERNEL_NAME]
    assert len(built) == len(set(built)) == 4
    # The pool's compile seconds reach the rows. Not every row's: a GPU worker ready before the pool has a
    # compile in flight takes a config to compile itself (the scheduler's rule), as it did in 2 of 3 runs
    # of this test on an H200 host, with or without this session's changes (BENCHMARKS.md, 2026-11-27
    # (second)).
    assert rows["compile_s"].notna().any()


@pytest.mark.skipif((os.cpu_count() or 1) <= IMPORTERS, reason="the side worker needs a core of its own")
def test_torch_compile_baselines_run_in_a_worker_of_their_own(tmp_path):
    """The torch.compile baselines go to the side worker, their finalists groups too; the lock's file is
    gone once the sweep ends."""
    import glob
    import tempfile

    locks_before = set(glob.glob(f"{tempfile.gettempdir()}/triton-sweep-gpu*-*.lock"))
    result = run_sweep(tmp_path, "kernel=softmax", "kernel.shapes=[[1823,781],[4096,1024]]",
                       "kernel.dtypes=[float16]", "kernel.space.BLOCK_SIZE=[1024,2048]",
                       "kernel.space.num_warps=[4,8]", "kernel.baselines=[torch,compile]",
                       "finalists.top_k=2", "sweep_id=side_test", "gpu_workers=1", "verbose=true",
                       backend="cuda")
    rows = sweep_rows(tmp_path, "side_test")
    assert (rows["status"] == "ok").all(), rows[["provider", "status", "message"]]
    assert set(rows["gpu_uuid"]) == {gpu_uuids()[0]}  # the side worker's rows too: both on GPU 0
    compiled = rows[rows["provider"] == "compile"]
    assert set(compiled["phase"]) == {"screen", "final"} and len(compiled) == 4
    screened = compiled[compiled["phase"] == "screen"]
    assert (screened["first_call_s"] > 0).all() and compiled["p50_us"].notna().all()
    assert "a worker for the torch.compile baselines" in result.stdout
    assert "the torch.compile baselines in a worker of their own" in result.stdout
    assert set(glob.glob(f"{tempfile.gettempdir()}/triton-sweep-gpu*-*.lock")) == locks_before


@pytest.mark.skipif(torch.cuda.device_count() < 2 or (os.cpu_count() or 1) <= IMPORTERS,
                    reason="two GPUs, and a core for the side worker")
def test_on_two_gpus_each_has_a_worker_for_the_torch_compile_baselines(tmp_path):
    """Two baselines that compile, two GPUs: a side worker on each, each sharing its GPU's lock with that
    GPU's trial worker; every row ok, each naming the GPU that measured it, a shape's finalists all
    re-timed on one; a row no GPU measured (pruned) names none; the lock files gone at the end."""
    import glob
    import tempfile

    locks_before = set(glob.glob(f"{tempfile.gettempdir()}/triton-sweep-gpu*-*.lock"))
    result = run_sweep(tmp_path, "kernel=softmax", "kernel.shapes=[[1823,781],[4096,1024]]",
                       "kernel.dtypes=[float16]", "kernel.space.BLOCK_SIZE=[512,1024,2048]",
                       "kernel.space.num_warps=[4,8]", "kernel.baselines=[torch,compile]", "gpu_workers=2",
                       "finalists.top_k=2", "sweep_id=two_gpus", "verbose=true", backend="cuda")
    all_rows = sweep_rows(tmp_path, "two_gpus")
    pruned = all_rows[all_rows["status"] == "pruned"]  # BLOCK_SIZE 512: shorter than either shape's rows
    assert len(pruned) == 4 and pruned["gpu_uuid"].isna().all()
    rows = all_rows[all_rows["status"] != "pruned"]
    assert (rows["status"] == "ok").all(), rows[["provider", "status", "message"]]
    assert set(rows["gpu_uuid"]) == set(gpu_uuids()[:2])
    final = rows[rows["phase"] == "final"]
    assert len(final) == 2 * 4 and (final.groupby(["shape", "dtype"])["gpu_uuid"].nunique() == 1).all()
    compiled = rows[rows["provider"] == "compile"]
    assert set(compiled["phase"]) == {"screen", "final"} and len(compiled) == 4
    assert "a worker for the torch.compile baselines on each of 2 GPUs" in result.stdout
    assert "the torch.compile baselines in workers of their own on 2 GPUs" in result.stdout
    assert set(glob.glob(f"{tempfile.gettempdir()}/triton-sweep-gpu*-*.lock")) == locks_before


def test_the_trial_worker_starts_the_gpu_while_the_kernel_module_imports(tmp_path, monkeypatch, capfd):
    """The GPU's part of the trial worker's start (CUDA context, the L2 flush kernel's compile) runs beside
    the import of the kernel's module: here that import is held until the flush kernel is in the fresh
    Triton cache, which it would never be if the GPU's part waited for the import. Then the worker's own
    thread probes CUPTI and uses the GPU: it measures the ceilings, and kineto prints no error about its
    first session's thread (it did while the probe ran beside the import)."""
    from pathlib import Path

    from triton_sweep.engine.process import stop_all
    from triton_sweep.engine.worker import trial_worker
    from triton_sweep.measure.stop_rule import StopRule

    release, cache = tmp_path / "release", tmp_path / "triton-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    monkeypatch.setenv("SLOW_IMPORT_S", "0")
    monkeypatch.setenv("SLOW_IMPORT_UNTIL", str(release))
    rule = StopRule(min_samples=10, min_time_s=0.0, rel_precision=0.02, max_time_s=0.05)
    worker = trial_worker("cuda", "external", "tests.fixtures.slow_import_kernel:SPEC", rule, 0.005, 0)
    try:
        worker.start()
        deadline = time.monotonic() + 120
        while not any(FLUSH_KERNEL_NAME in p.name for p in Path(cache).rglob("*")):
            assert time.monotonic() < deadline, "the flush kernel was not compiled while the import was held"
            assert worker.process.is_alive()
            time.sleep(0.05)
        release.touch()
        info = worker.wait_ready()
        peaks = worker.request(("peaks",), 120, "measuring the ceilings")
    finally:
        release.touch()
        stop_all([worker])
    parts = info["start_seconds"]
    assert set(parts["gpu"]) >= {"lock", "cuda_context", "flush", "cupti_probe", "nvml"}
    assert parts["kernel_module"] > 0 and parts["gpu_after_imports"] >= 0
    assert peaks["copy_gbps"] > 0, peaks
    assert "registerClient" not in capfd.readouterr().err


def test_a_batch_past_one_hold_gives_every_call_its_own_kernel_alone():
    # Behind each MAX_CALLS_PER_HOLD calls the GPU is held again; that spin is no call's work (its
    # milliseconds once landed in the sample before it: 0.3-9 ms samples among 2-66 us ones).
    timer = cuda_timer(0, StopRule(), warmup_s=0.0)
    assert timer.kernel_clock.available and timer.kernel_clock.hold_name, timer.kernel_clock.reason
    x = torch.randn(1 << 16, device="cuda")
    calls = 2 * MAX_CALLS_PER_HOLD + 3
    samples, events, late_events, activities = [[]], [[]], [[]], [[]]
    timer._sample_batch([lambda: x.add_(1.0)], calls, Pace(50e-6, 0.0), samples, events, late_events,
                        activities)
    assert activities == [[1] * calls]
    assert len(samples[0]) == calls and min(samples[0]) > 0


def test_calls_the_host_launched_late_are_left_out_of_the_event_cross_check():
    # A call whose host side turns slow after the hold was sized from it (as a preempted host does,
    # beside compile workers): the GPU, done with a flush, waits for the launch inside the event window.
    timer = cuda_timer(0, StopRule(min_samples=12, min_time_s=0, max_time_s=0.05), warmup_s=0.0)
    assert timer.kernel_clock.available, timer.kernel_clock.reason
    x = torch.randn(4096, 1024, device="cuda", dtype=torch.float16)
    counter = iter(range(1 << 20))

    def softmax_launched_late_now_and_then():
        if (n := next(counter)) >= 4 and n % 2 == 0:  # not the warm-up's call nor the enqueue-time probe's
            time.sleep(2e-3)  # longer than the first batch's hold, even at an idle GPU's clock
        torch.softmax(x, -1)

    measurement = timer.measure(softmax_launched_late_now_and_then)
    late, fed = measurement.late_event_samples_s or [], measurement.event_samples_s or []
    assert late and fed and len(late) + len(fed) == len(measurement.samples_s), (fed, late)
    p50_us = float(np.median(measurement.samples_s)) * 1e6
    assert max(late) * 1e6 > p50_us + 100  # a late call's window held the GPU's wait for the host
    fed_p50_us = float(np.median(fed)) * 1e6
    assert not timers_disagree(p50_us, fed_p50_us, measurement.kernels_per_call), (p50_us, fed, late)


NEIGHBOUR = """
import sys, time, torch
torch.cuda.set_device(int(sys.argv[2]))  # a context on that GPU alone
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
print("ready", flush=True)
while sys.argv[1] == "busy":
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
time.sleep(600)
"""


@contextlib.contextmanager
def neighbour(kind: str, gpu: int = 0):
    """Another process on GPU `gpu`, holding a context: `idle`, or `busy` with matmuls the whole time."""
    process = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, kind, str(gpu)], stdout=subprocess.PIPE,
                               text=True)
    try:
        assert process.stdout.readline().strip() == "ready"
        yield process.pid
    finally:
        process.kill()
        process.wait()


def test_a_row_measured_while_a_neighbour_ran_kernels_on_its_gpu_says_so(tmp_path):
    """A process that only holds a context on the GPU is named and marks no row, and the ceilings are kept;
    one that runs matmuls there is warned of, marks every row, and the ceilings measured beside it are
    not kept."""
    sweep = ("kernel=softmax", "kernel.shapes=[[4096,1024]]", "kernel.dtypes=[float16]",
             "kernel.space.BLOCK_SIZE=[1024,2048]", "kernel.space.num_warps=[4,8]",
             "kernel.baselines=[torch]", "gpu_workers=1", "sweep_id=nb")
    for kind in ("idle", "busy"):
        (tmp_path / kind).mkdir()
        with neighbour(kind) as pid:
            result = run_sweep(tmp_path / kind, *sweep, backend="cuda")
        rows = sweep_rows(tmp_path / kind, "nb")
        summary = json.loads((tmp_path / kind / "run" / "summary.json").read_text())
        with contextlib.closing(sqlite3.connect(tmp_path / kind / "results.sqlite")) as db:
            ceilings_kept = db.execute("SELECT COUNT(*) FROM device_peaks").fetchone()[0]
        assert f"another process holds a CUDA context on {gpu_uuids()[0]}: pid {pid} (python" in result.stdout
        assert (rows["status"] == "ok").all() and (rows["phase"] == "screen").sum() == 2 * 2 + 1
        if kind == "idle":
            assert not rows["gpu_shared"].any() and rows["gpu_shared"].notna().all()
            assert summary["gpu_shared_rows"] == 0 and "warning" not in result.stdout and ceilings_kept == 1
        else:
            assert rows["gpu_shared"].all(), rows[["provider", "phase", "gpu_shared"]]
            assert summary["gpu_shared_rows"] == len(rows) and ceilings_kept == 0
            assert f"warning: pid {pid} (python" in result.stdout
            assert "the store does not keep them" in result.stdout


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="two GPUs")
def test_on_two_gpus_a_neighbour_on_one_marks_the_rows_of_that_gpu_alone(tmp_path):
    with neighbour("busy", gpu=1) as pid:
        result = run_sweep(tmp_path, "kernel=softmax", "kernel.shapes=[[1823,781],[4096,1024]]",
                           "kernel.dtypes=[float16]", "kernel.space.BLOCK_SIZE=[1024,2048]",
                           "kernel.space.num_warps=[2,4,8]", "kernel.baselines=[torch]", "gpu_workers=2",
                           "sweep_id=nb2", backend="cuda")
    rows = sweep_rows(tmp_path, "nb2")
    rows = rows[rows["status"] != "pruned"]
    first, second = gpu_uuids()[:2]
    assert (rows["status"] == "ok").all() and set(rows["gpu_uuid"]) == {first, second}
    assert rows.loc[rows["gpu_uuid"] == second, "gpu_shared"].all()
    assert not rows.loc[rows["gpu_uuid"] == first, "gpu_shared"].any()
    assert f"another process holds a CUDA context on {second}: pid {pid} (python" in result.stdout
