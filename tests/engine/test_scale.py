"""Sweep speed and isolation on the CPU: the compile pool (real Triton compiles for an sm_90 target, no
GPU needed), several trial workers, search budgets and seeds, finalists and the tie rule."""
import contextlib
import json
import time
from typing import Optional

import numpy as np
import pytest

from triton_sweep.engine import compile_pool
from triton_sweep.model.finalists import decide
from triton_sweep.engine.process import WorkerProcess, stop_all
from triton_sweep.engine.scheduler import Scheduler
from triton_sweep.model.search.optuna import Optuna
from triton_sweep.model.search.random import Random
from triton_sweep.model.trial import Trial
from triton_sweep.model.spec_sources import load_spec
from triton_sweep.model.space import plan_trials
from triton_sweep.measure import check
from triton_sweep.measure.stop_rule import StopRule
from triton_sweep.store.result_store import ResultStore
from tests.conftest import run_sweep

H100_TARGET = ("cuda", 90, 32)
H100_SHARED_BYTES = 232448  # cudaDevAttrMaxSharedMemoryPerBlockOptin of an H100 / H200


def _compile(trials, workers=2, timeout_s=60.0, spec="tests.fixtures.bad_kernels:COMPILE_CASES", grace_s=5.0,
             more=None):
    """Run `trials` through a compile pool only (no trial worker): (recorded failures, ready trials).
    `grace_s`: how long the workers may take to exit once told (what they build after answering)."""
    recorded = {}
    pool = compile_pool.compile_workers(workers, "external", spec)
    scheduler = Scheduler([], pool, trial_timeout_s=60, compile_timeout_s=timeout_s, target=H100_TARGET)
    try:
        scheduler.start(ahead=[])
        scheduler.set_device(H100_TARGET, H100_SHARED_BYTES, peaks={})
        scheduler.run(trials, lambda worker, trial, result: recorded.update({trial.key: result}), more=more)
    finally:
        stop_all(pool, grace_s)
    return recorded, scheduler


def test_compile_pool_builds_classifies_and_cuts_a_hang(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    spec = load_spec("external", "tests.fixtures.bad_kernels:COMPILE_CASES")
    trials = plan_trials(spec, {"shapes": [4000], "dtypes": ["float32"], "baselines": []}, "cuda")
    case = {t.config["CASE"]: t for t in trials}
    recorded, scheduler = _compile(trials, timeout_s=8.0)

    assert [t.key for t in scheduler.ready] == [case[0].key]  # built: handed on to the GPU worker
    assert list(tmp_path.glob("cache/*/*.cubin"))  # the binary is in the Triton cache for it to load
    assert recorded[case[1].key]["status"] == check.STATUS_COMPILE_ERROR
    assert "undefined_function" in recorded[case[1].key]["message"]
    assert recorded[case[2].key]["status"] == check.STATUS_TIMEOUT  # killed at 8 s, process group and all
    assert recorded[case[3].key]["status"] == check.STATUS_COMPILE_ERROR
    assert "died" in recorded[case[3].key]["message"]
    assert len(recorded) + len(scheduler.ready) == len(trials)  # every trial accounted for once


def test_compile_pool_reports_shared_memory_the_device_lacks():
    # 256x256 tiles with K 128 in fp16, 4 stages: far over the 227 KB an H100 block can have.
    big = {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 4}
    small = {**big, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2}
    trials = [Trial("matmul", "triton", (256, 256, 256), "float16", config) for config in (big, small)]
    recorded, scheduler = _compile(trials, spec="triton_sweep.kernels.matmul:SPEC")
    assert recorded[trials[0].key]["status"] == check.STATUS_OUT_OF_RESOURCES
    assert "shared memory" in recorded[trials[0].key]["message"]
    assert [t.key for t in scheduler.ready] == [trials[1].key]


def test_a_pipelined_search_is_asked_for_more_as_results_come(tmp_path, monkeypatch):
    """run's `more` is asked after each record once no config waits for the pool, and what it hands out
    is compiled in the same run: the failed compile's record brings the next config, which is built."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    spec = load_spec("external", "tests.fixtures.bad_kernels:COMPILE_CASES")
    case = {t.config["CASE"]: t for t in plan_trials(spec, {"shapes": [4000], "dtypes": ["float32"],
                                                            "baselines": []}, "cuda")}
    asked = []

    def more():
        asked.append(len(asked))
        return [case[0]] if len(asked) == 1 else []

    recorded, scheduler = _compile([case[1]], more=more)
    assert recorded[case[1].key]["status"] == check.STATUS_COMPILE_ERROR
    assert len(asked) == 1  # once, after the only record: the built config is the GPU worker's to record
    assert [t.key for t in scheduler.ready] == [case[0].key]


def _cached_archs(cache) -> list[int]:
    """The GPU arch of every kernel binary in a Triton cache (from each build's metadata)."""
    archs = []
    for path in cache.glob("*/*.json"):
        target = json.loads(path.read_text()).get("target")
        if isinstance(target, dict) and path.with_suffix(".cubin").exists():
            archs.append(target["arch"])
    return archs


def _binaries(cache) -> int:
    """How many kernel binaries a Triton cache holds."""
    from pathlib import Path

    return len(list(Path(cache).glob("*/*.cubin")))


def _ready_once_cached(conn, cache, count: int) -> None:
    """Stands in for a GPU worker whose start takes until the pool has built `count` binaries."""
    import time

    while _binaries(cache) < count:
        time.sleep(0.1)
    conn.send(("ready", {"gpu_name": "none"}))
    conn.recv()


def _peaks_once_cached(conn, cache, count: int) -> None:
    """Stands in for a GPU worker, ready at once, whose measurement of the ceilings ends once the pool has
    built `count` binaries (or after 300 s: the fork server's imports and two compiles, on a busy 2-core
    box); it answers how many there were."""
    import time

    conn.send(("ready", {"gpu_name": "none"}))
    conn.recv()  # the peaks request
    deadline = time.monotonic() + 300
    while _binaries(cache) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    conn.send(("peaks", {"binaries": _binaries(cache)}))
    conn.recv()


def test_the_pool_compiles_while_the_gpu_worker_measures_the_ceilings(tmp_path, monkeypatch):
    """The first batch's compiles go on while the GPU worker measures the device's ceilings
    (Scheduler.measure_peaks): the pool's fork server is held in its import until the GPU worker is ready
    (as when the command's validation ends late), the stand-in ends its measurement only once the pool
    has built the binaries, and they come within it. (A request waited for outside the scheduler's loop
    gave the pool no config until it ended: here the stand-in's 300 s, with no binary.)"""
    cache, go = tmp_path / "cache", tmp_path / "go"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    monkeypatch.setenv("SLOW_IMPORT_S", "0")
    monkeypatch.setenv("SLOW_IMPORT_UNTIL", str(go))  # the fork server's import of the kernel waits for it
    trials = [Trial("slow_import_softmax", "triton", (64, 256), "float16",
                    {"BLOCK_SIZE": 256, "num_warps": warps, "num_stages": 1}) for warps in (4, 8)]
    measuring = WorkerProcess("GPU worker stand-in", _peaks_once_cached, (str(cache), len(trials)))
    pool = compile_pool.compile_workers(2, "external", "tests.fixtures.slow_import_kernel:SPEC")
    scheduler = Scheduler([measuring], pool, trial_timeout_s=60, compile_timeout_s=60, target=H100_TARGET)
    try:
        scheduler.start(ahead=trials)  # returns once the stand-in is ready
        assert not scheduler.placement.server.ready
        go.touch()
        peaks = scheduler.measure_peaks(600)
    finally:
        stop_all([measuring] + pool)
    assert peaks == {"binaries": len(trials)}


@pytest.mark.parametrize("guess", [H100_TARGET, ("cuda", 80, 32)])
def test_configs_compiled_ahead_for_a_guessed_target(tmp_path, monkeypatch, guess):
    """The pool compiles the first batch while the GPU workers start, for the target NVML reports. A
    right guess is used as built; a guess the GPU workers contradict is compiled again for their
    target, and only builds for the right target reach a GPU worker."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    configs = [{"BLOCK_M": m, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 2}
               for m in (32, 64)]
    trials = [Trial("matmul", "triton", (256, 256, 256), "float16", config) for config in configs]
    starting = WorkerProcess("slow GPU worker", _ready_once_cached, (str(cache), len(trials)))
    pool = compile_pool.compile_workers(2, "matmul", None)
    scheduler = Scheduler([starting], pool, trial_timeout_s=60, compile_timeout_s=60, target=guess)
    recorded = []
    try:
        scheduler.start(ahead=trials)
        scheduler.keep_gpu_workers([])  # the stand-in runs no trial
        scheduler.run([], recorded.append)  # collects the answers of the compiles still in flight
        assert len(scheduler.placement.built) == len(trials)  # built before the stand-in GPU worker was ready
        scheduler.set_device(H100_TARGET, H100_SHARED_BYTES, peaks={})
        scheduler.run(trials, lambda worker, trial, result: recorded.append(result))
    finally:
        stop_all([starting] + pool)
    assert recorded == [] and sorted(t.key for t in scheduler.ready) == sorted(t.key for t in trials)
    archs = _cached_archs(cache)
    assert archs.count(90) == len(trials)  # each config built for the GPU's own target
    assert archs.count(80) == (len(trials) if guess[1] == 80 else 0)


def _triton_configs(batch):
    return [tuple(sorted(t.config.items())) for t in batch if t.provider == "triton"]


def _matmul_trials():
    spec = load_spec("matmul", None)
    space = {"BLOCK_M": [32, 64, 128], "BLOCK_N": [32, 64, 128], "BLOCK_K": [32, 64], "num_warps": [2, 4, 8],
             "num_stages": [2, 3]}
    return plan_trials(spec,
                       {"shapes": [[128, 128, 128], [96, 200, 64]], "dtypes": ["float16"], "space": space},
                       "cuda")  # planning only: nothing runs


@pytest.mark.parametrize("strategy", [Random, Optuna])
def test_search_budget_and_seed_are_honoured(strategy):
    trials = _matmul_trials()

    def first_batch(seed):
        search = strategy(trials, budget_trials=6, seed=seed, batch=8)
        batch = search.ask()
        for trial in batch:  # pretend every trial ran; optuna must then stop at its budget
            search.tell(trial, {"status": "ok", "p50_us": float(sum(v for _, v in trial.config.items()))})
        assert search.ask() == []
        return batch

    batch = first_batch(seed=1)
    triton = [t for t in batch if t.provider == "triton"]
    assert len(triton) == 2 * 6  # the budget, in each of the two (shape, dtype) groups
    assert not any(t.pruned_reason for t in triton)  # pruned configs never reach a compiler
    assert [t.provider for t in batch if t.provider != "triton"]  # the baselines always run
    assert _triton_configs(first_batch(seed=1)) == _triton_configs(batch)
    assert _triton_configs(first_batch(seed=2)) != _triton_configs(batch)


def test_optuna_asks_in_rounds_until_its_budget_and_never_repeats():
    trials = _matmul_trials()
    search = Optuna(trials, budget_trials=20, seed=0, batch=4)
    rounds, asked = [], []
    while batch := search.ask():
        rounds.append(len(_triton_configs(batch)))
        asked += [t.key for t in batch if t.provider == "triton"]
        for trial in batch:
            search.tell(trial, {"status": "ok", "p50_us": 100.0 / trial.config.get("BLOCK_M", 1)})
    assert rounds == [8, 8, 8, 8, 8]  # 4 per group per round, two groups, until 20 per group
    assert len(set(asked)) == len(asked) == 40


def test_optuna_and_time_budget_in_a_sweep(tmp_path):
    run_sweep(tmp_path, "kernel=vector_add", "kernel.shapes=[1000]", "search=optuna",
                       "search.budget_trials=4", "search.batch=2", "kernel.baselines=[]", "sweep_id=opt")
    store = ResultStore(tmp_path / "results.sqlite")
    rows = store.load(sweep_id="opt")
    assert (rows["status"] == "ok").sum() == 4 and set(rows["phase"]) == {"screen"}
    result = run_sweep(tmp_path, "kernel=vector_add", "kernel.shapes=[2000]", "search.budget_s=2",
                       "kernel.baselines=[]", "timing.min_time_s=0.5", "timing.max_time_s=1",
                       "sweep_id=timed")
    timed = store.load(sweep_id="timed")
    store.close()
    # 15 configs at ~1 s each: the budget stops the job after about 2 of them.
    assert 1 <= len(timed) < 15 and "search budget of 2 s reached" in result.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["not_run"] == 15 - len(timed)


def test_tie_rule_prefers_fewer_resources_within_the_noise():
    rng = np.random.default_rng(1)
    base = rng.normal(100.0, 1.0, size=200)  # shared per-round conditions pair the samples
    configs = [{"BLOCK_SIZE": 1024, "num_warps": 8, "num_stages": 3},
               {"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 2},
               {"BLOCK_SIZE": 512, "num_warps": 4, "num_stages": 1}]
    samples = [base, base + rng.normal(0.2, 0.5, size=200), base * 1.05]  # 0.2% slower: a tie; 5%: not
    decisions = decide(configs, samples, tie_floor=0.005)
    assert [d["rank"] for d in decisions] == [1, 2, 3]
    assert [d["tie"] for d in decisions] == [True, True, False]
    # The tied config with fewer stages and warps is chosen over the fastest; the 5% slower one is not,
    # though it uses the fewest resources of all.
    assert [d["chosen"] for d in decisions] == [False, True, False]
    assert "chosen" in decisions[1]["message"] and "slower than" in decisions[2]["message"]


def test_finalists_and_baselines_are_retimed_together_and_the_report_uses_them(tmp_path):
    result = run_sweep(tmp_path, "kernel=vector_add", "kernel.shapes=[1000,3000]",
                       "kernel.space.num_warps=[2,4]", "kernel.space.BLOCK_SIZE=[1024,2048,4096]",
                       "finalists.top_k=3", "finalists.min_samples=6", "finalists.min_time_s=0",
                       "finalists.max_time_s=0.2", "finalists.screen_margin=100",  # the top 3 however far
                       "sweep_id=fin", "kernel.baselines=[torch]")
    store = ResultStore(tmp_path / "results.sqlite")
    rows = store.load(sweep_id="fin")
    store.close()
    final = rows[rows["phase"] == "final"]
    assert len(final) == 2 * (3 + 1)  # the top 3 of each shape, and its torch.add baseline beside them
    for _, group in final.groupby("shape"):
        ours, baseline = group[group["provider"] == "triton"], group[group["provider"] == "torch"]
        assert ours["chosen"].sum() == 1 and sorted(ours["rank"]) == [1, 2, 3]
        assert len(baseline) == 1 and baseline["chosen"].isna().all()  # timed beside them, never ranked
        assert group["n_samples"].nunique() == 1  # round-robin: as many samples of each
        # in the default 5 repetitions, each on buffers placed anew, with each one's median kept
        assert (group["repetitions"] == 5).all() and group["rep_noise"].notna().all()
        assert all(len(p50s) == 5 and min(p50s) <= p50 <= max(p50s)
                   for p50s, p50 in zip(group["rep_p50s_us"], group["p50_us"]))
        chosen = ours[ours["chosen"].astype(bool)].iloc[0]
        assert chosen["tie"]  # the fastest, or within the noise of it
        config = " ".join(f"{k}={v}" for k, v in json.loads(chosen["config"]).items())
        shape = json.loads(chosen["shape"])[0]
        line = next(line for line in result.stdout.splitlines()
                    if line.startswith("vector_add ") and line.split()[2] == str(shape))
        assert config in line
        # the speedup comes from the baseline's p50 of the same rounds, not from its screening (the
        # interpreter has no event times: the end-to-end and GPU-time speedups are the same ratio)
        ratio = baseline["p50_us"].iloc[0] / chosen["p50_us"]
        assert f"torch {baseline['p50_us'].iloc[0]:.2f} ({ratio:.2f}x, {ratio:.2f}x)" in line


def _timing_stand_in(conn) -> None:
    """Stands in for a GPU worker: ready at once; each trial "timed" at once, and the one of 2 warps
    ends in a sticky CUDA error, after which the worker exits, as a real one does."""
    conn.send(("ready", {"gpu_name": "none"}))
    while (message := conn.recv()) is not None:
        sticky = message[1].config["num_warps"] == 2
        conn.send(("result", {"status": "crashed" if sticky else "ok", "message": "stand-in",
                              "sticky": sticky}))
        if sticky:
            return


def test_a_gpu_worker_gets_its_next_trial_before_the_last_one_is_recorded():
    """While this process records a row (its commit to disk, the outputs), the worker already runs the
    next trial; after a sticky error it gets none (it is exiting), and the next trial goes to the
    worker started in its place, never lost with it."""
    trials = [Trial("k", "torch", (64,), "float16", {"num_warps": w}) for w in (1, 4, 2, 8, 16)]
    gpu = WorkerProcess("GPU stand-in", _timing_stand_in, ())
    scheduler = Scheduler([gpu], [], trial_timeout_s=60, compile_timeout_s=60)
    busy_at_record = {}

    def record(worker, trial, result):
        busy_at_record[trial.config["num_warps"]] = (result["status"], worker.task is not None)

    try:
        scheduler.start(ahead=[])
        scheduler.run(trials, record)
    finally:
        stop_all([gpu])
    assert busy_at_record == {1: ("ok", True), 4: ("ok", True), 2: ("crashed", False), 8: ("ok", True),
                              16: ("ok", False)}
    assert gpu.starts == 2  # started again after the sticky error


def _named_stand_in(conn, name: str, fails: bool) -> None:
    """A GPU worker stand-in that answers every trial and finalists group with its own name, and says
    whether it was asked to compile the trial ahead first; one that `fails` says so instead of getting
    ready, as a worker whose imports fail does."""
    if fails:
        conn.send(("failed", "ImportError: no inductor here"))
        return
    conn.send(("ready", {"gpu_name": "none"}))
    prepared = set()
    while (message := conn.recv()) is not None:
        if message[0] == "prepare":
            prepared.add(message[1].key)
            conn.send(("prepared", {"compile_s": 0.25}))
        elif message[0] == "trial":
            conn.send(("result", {"status": "ok", "by": name, "prepared": message[1].key in prepared}))
        else:  # with the rule its group came with
            conn.send(("finalists", [{"status": "ok", "by": name, "rule": message[3]} for _ in message[1]]))


@pytest.mark.parametrize("side_fails", [False, True])
def test_torch_compile_baselines_go_to_the_side_worker(side_fails):
    """The trials whose first call compiles, and the finalists groups that hold one, go to the side
    worker, each compiled ahead there first (its seconds recorded as the trial's compile), everything
    else to the trial worker; a side worker that cannot start leaves them to the trial worker, and
    nothing is lost. Each finalists group reaches its worker with the rule it was given (its own cut:
    finalists.of_screening), whichever worker runs it."""
    shapes = [(64,), (128,)]
    trials = [Trial("k", provider, shape, "float16", {"num_warps": w} if provider == "triton" else {})
              for shape in shapes for provider, w in
              [("triton", 1), ("triton", 4), ("torch", 0), ("compile", 0)]]
    gpu = WorkerProcess("trial worker", _named_stand_in, ("trial worker", False))
    side = WorkerProcess("side worker", _named_stand_in, ("side worker", side_fails))
    scheduler = Scheduler([gpu], [], trial_timeout_s=60, compile_timeout_s=60, sides=[side],
                          compiles=lambda trial: trial.provider == "compile")
    ran, groups = {}, {}
    try:
        scheduler.start(ahead=[])
        scheduler.run(trials, lambda worker, trial, result: ran.update({trial.label: result}))
        finalists = [[t for t in trials if t.shape == shape and t.provider in ("triton", "compile")]
                     for shape in shapes]
        finalists.append([t for t in trials if t.shape == shapes[0] and t.provider != "compile"])

        rules = [StopRule(min_samples=20, min_time_s=0.02, rel_precision=0.005, max_time_s=0.1 * (i + 1))
                 for i in range(len(finalists))]
        given, used = {}, {}

        def on_result(worker, group, results):
            groups[(group[0].shape, group[-1].provider)] = results[0]["by"]
            used[(group[0].shape, group[-1].provider)] = results[0]["rule"]

        for group, rule in zip(finalists, rules):
            given[(group[0].shape, group[-1].provider)] = rule
        scheduler.run_finalists(finalists, rules, tie_floor=0.01, on_result=on_result)
    finally:
        stop_all(scheduler.on_gpu + [side])
    for trial in trials:
        on_side = trial.provider == "compile" and not side_fails
        result = ran.pop(trial.label)
        assert result["by"] == ("side worker" if on_side else "trial worker"), trial.label
        assert result["prepared"] == on_side and result.get("compile_s") == (0.25 if on_side else None)
    assert not ran
    side_or_not = "trial worker" if side_fails else "side worker"
    assert groups == {((64,), "compile"): side_or_not, ((128,), "compile"): side_or_not,
                      ((64,), "torch"): "trial worker"}
    assert used == given and len(set(map(repr, used.values()))) == 3
    assert (scheduler.turns.sides == []) == side_fails


def _hold_the_lock(path: str, times, rounds: int, together) -> None:
    import time

    from triton_sweep.engine.worker import GpuLock

    lock = GpuLock(path)
    together.wait()  # both start asking at once
    for _ in range(rounds):
        with lock:
            entered = time.monotonic()
            time.sleep(0.02)
            times.put((entered, time.monotonic()))


def test_the_gpu_lock_lets_one_worker_at_a_time(tmp_path):
    """Two processes on one lock file: their held intervals never overlap, and both get their turns."""
    import multiprocessing

    path = tmp_path / "gpu0.lock"
    path.touch()
    context = multiprocessing.get_context("spawn")
    times, together = context.Queue(), context.Barrier(2)
    processes = [context.Process(target=_hold_the_lock, args=(str(path), times, 5, together))
                 for _ in range(2)]
    for process in processes:
        process.start()
    held = sorted(times.get(timeout=60) for _ in range(10))
    for process in processes:
        process.join(30)
    assert all(earlier[1] <= later[0] for earlier, later in zip(held, held[1:])), held


def _lock_file(tmp_path, gpu: int = 0) -> str:
    """GPU `gpu`'s lock file for the stand-ins below (the job makes one per GPU with a side worker)."""
    path = tmp_path / f"gpu{gpu}.lock"
    path.touch()
    return str(path)


def _sleeping_stand_in(conn, name: str, seconds: float, lock_file: Optional[str] = None) -> None:
    """A GPU worker stand-in whose every request takes `seconds`, under its GPU's lock as a real worker's
    (runners/engine/worker.py: GpuLock; a compile ahead takes none): a request the scheduler handed it
    may reach it after one it handed the other worker of its GPU began. It says when it began (holding
    the lock) and ended, and a trial's answer also when the compile ahead of it did, if one was asked
    for."""
    from triton_sweep.engine.worker import GpuLock

    conn.send(("ready", {"gpu_name": "none"}))
    ahead = {}
    lock = GpuLock(lock_file)
    while (message := conn.recv()) is not None:
        with contextlib.nullcontext() if message[0] == "prepare" else lock:
            began = time.monotonic()
            time.sleep(seconds)
            span = (began, time.monotonic())
        if message[0] == "prepare":
            ahead[message[1].key] = span
            conn.send(("prepared", {"compile_s": seconds}))
        elif message[0] == "finalists":  # what it compiled ahead among the group's trials
            compiled_here = [trial.key for trial in message[1] if trial.key in ahead]
            answer = {"status": "ok", "by": name, "span": span, "compiled_here": compiled_here}
            conn.send(("finalists", [answer] * len(message[1])))
        else:
            conn.send(("result", {"status": "ok", "by": name, "span": span,
                                  "ahead": ahead.get(message[1].key)}))


def test_the_trial_worker_waits_its_turn_while_the_side_worker_holds_the_lock(tmp_path):
    """The trial worker is handed no request while the side worker has one that holds the GPU's lock
    (the lock keeps no queue), and goes on while the side worker compiles a trial ahead (that takes no
    lock); the side worker's timeout grows by what is left of the trial worker's request in flight,
    which it may wait for."""
    trials = [Trial("k", provider, (64 * i,), "float16", config)
              for i in range(1, 4) for provider, config in
              [("triton", {"num_warps": 4}), ("triton", {"num_warps": 8}), ("compile", {})]]
    trials += [Trial("k", "triton", (512,), "float16", {"num_warps": w}) for w in (1, 2, 4, 8, 16, 32)]
    lock_file = _lock_file(tmp_path)
    gpu = WorkerProcess("trial worker", _sleeping_stand_in, ("trial worker", 0.05, lock_file))
    # 0.4 s a request: room for three of the trial worker's 0.05 s ones in a compile ahead even where a
    # busy 2-core box takes tens of ms to hand each on
    side = WorkerProcess("side worker", _sleeping_stand_in, ("side worker", 0.4, lock_file))
    scheduler = Scheduler([gpu], [], trial_timeout_s=60, compile_timeout_s=60, sides=[side],
                          compiles=lambda trial: trial.provider == "compile")
    results = {"trial worker": [], "side worker": []}
    handed = []  # for each request handed to the trial worker: whether the side worker held the lock
    assign = scheduler._assign

    def watched(worker):
        job = assign(worker)
        if job is not None and worker is gpu:
            handed.append(scheduler.turns.busy(side))
        return job

    scheduler._assign = watched
    try:
        scheduler.start(ahead=[])
        side.wait_ready()
        scheduler.run(trials, lambda worker, trial, result: results[result["by"]].append(result))
        gpu.task, gpu.deadline = ("trial", trials[0]), time.monotonic() + 100.0  # as if one were in flight
        assert 99.0 < scheduler.turns.lock_wait_s(side) <= 100.0 and scheduler.turns.lock_wait_s(gpu) == 0.0
        gpu.task = ("prepare", trials[2])  # a compile ahead holds no lock: nothing to wait for
        assert scheduler.turns.lock_wait_s(side) == 0.0
        gpu.task = None
    finally:
        stop_all(scheduler.on_gpu)
    assert len(results["side worker"]) == 3 and len(results["trial worker"]) == 12
    assert handed == [False] * 12
    locked = [result["span"] for result in results["side worker"]]
    ahead = [result["ahead"] for result in results["side worker"]]
    assert all(a[1] <= span[0] for a, span in zip(ahead, locked))  # each trial compiled ahead first
    trial_worker_began = [result["span"][0] for result in results["trial worker"]]
    # none of the trial worker's requests began while the side worker held the lock ...
    assert not any(start <= began < end for began in trial_worker_began for start, end in locked)
    # ... and some began while it compiled ahead (three 0.4 s compiles, the trial worker's 0.05 s requests)
    assert sum(start <= began < end for began in trial_worker_began for start, end in ahead) >= 3


def test_each_gpu_has_its_side_worker_and_the_turns_are_per_gpu(tmp_path):
    """On two GPUs each has a side worker: the torch.compile baselines spread over both, each run by the
    side worker that compiled it ahead, and a finalists group that holds one goes to that side worker
    too (another would compile it again; a group with two, each compiled by another side worker, to the
    first's). A trial worker is handed no request while the side worker of its GPU holds that GPU's
    lock; the other GPU's trial worker goes on."""
    shapes = [(64 * i,) for i in range(1, 5)]
    trials = [Trial("k", provider, shape, "float16", config) for shape in shapes for provider, config in
              [("triton", {"num_warps": 4}), ("triton", {"num_warps": 8}), ("compile", {})]]
    # a shape with two baselines that compile, which the two side workers may each compile ahead one of
    shapes.append((1024,))
    trials += [Trial("k", provider, (1024,), "float16", config) for provider, config in
               [("triton", {"num_warps": 4}), ("triton", {"num_warps": 8}), ("compile", {}),
                ("compile_max", {})]]
    trials += [Trial("k", "triton", (512,), "float16", {"num_warps": w}) for w in (1, 2, 4, 8, 16, 32)]
    lock_files = [_lock_file(tmp_path, 0), _lock_file(tmp_path, 1)]
    gpus = [WorkerProcess(f"trial worker {i}", _sleeping_stand_in,
                          (f"trial worker {i}", 0.05, lock_files[i])) for i in (0, 1)]
    sides = [WorkerProcess(f"side worker {i}", _sleeping_stand_in,
                           (f"side worker {i}", seconds, lock_files[i]))
             for i, seconds in ((0, 0.15), (1, 0.1))]
    scheduler = Scheduler(gpus, [], trial_timeout_s=60, compile_timeout_s=60, sides=sides,
                          compiles=lambda trial: trial.provider.startswith("compile"))
    results = {worker.name: [] for worker in gpus + sides}
    finalists = {}
    handed = []  # for each request handed to a trial worker: whether each GPU's side worker held its lock
    assign = scheduler._assign

    def watched(worker):
        job = assign(worker)
        if job is not None and worker in gpus:
            handed.append((gpus.index(worker), [scheduler.turns.busy(side) for side in sides]))
        return job

    scheduler._assign = watched
    try:
        scheduler.start(ahead=[])
        for side in sides:
            side.wait_ready()
        scheduler.run(trials, lambda worker, trial, result: results[result["by"]].append(result))
        groups = [[t for t in trials if t.shape == shape] for shape in shapes]
        scheduler.run_finalists(groups, [None] * len(groups), tie_floor=0.005,
                                on_result=lambda worker, group, answers:
                                finalists.update({group[0].shape: answers[0]}))
    finally:
        stop_all(scheduler.on_gpu)
    ran = {name: len(rows) for name, rows in results.items()}
    sides_ran = [ran["side worker 0"], ran["side worker 1"]]
    trial_workers_ran = [ran["trial worker 0"], ran["trial worker 1"]]
    assert sum(sides_ran) == 6 and all(sides_ran) and sum(trial_workers_ran) == 16 and all(trial_workers_ran)
    assert all(result["ahead"] is not None for side in sides for result in results[side.name])
    # every group re-timed, on the side worker that compiled its baseline ahead (of two, the first's)
    assert sorted(finalists) == sorted(shapes)
    assert all(answer["by"].startswith("side worker") and answer["compiled_here"]
               for answer in finalists.values())
    assert all(len(finalists[shape]["compiled_here"]) == 1 for shape in shapes[:4]), finalists
    assert all(not held[gpu] for gpu, held in handed)  # never while its own GPU's side worker held the lock
    locked = {i: [r["span"] for r in results[f"side worker {i}"]] for i in (0, 1)}
    began = {i: [r["span"][0] for r in results[f"trial worker {i}"]] for i in (0, 1)}
    assert not any(start <= b < end for i in (0, 1) for b in began[i] for start, end in locked[i])
    assert any(held[1 - gpu] for gpu, held in handed)  # ... while the other GPU's trial worker went on


def test_a_gpu_gets_a_side_worker_for_each_baseline_that_compiles_up_to_the_gpus():
    from triton_sweep.engine.side import side_workers

    compiled = [Trial("k", "compile", (64 * i,), "float16", {}) for i in (1, 2, 3)]
    eager = Trial("k", "torch", (64,), "float16", {})
    side = WorkerProcess("side worker", _sleeping_stand_in, ("side worker", 0.0))  # never started
    compiles = lambda trial: trial.provider == "compile"  # noqa: E731
    assert side_workers(side, [eager, compiled[0]], compiles, gpu_workers=1) == 1
    assert side_workers(side, [eager, *compiled], compiles, gpu_workers=2) == 2
    assert side_workers(side, [eager, compiled[0]], compiles, gpu_workers=8) == 1
    assert side_workers(None, [eager, *compiled], compiles, gpu_workers=2) == 0  # none started: no core
    assert side_workers(side, [eager], compiles, gpu_workers=2) == 0


def test_the_compile_note_says_each_side_worker_s_start():
    from types import SimpleNamespace

    from triton_sweep.engine.startup import compile_note

    def note(*ready_s):
        sides = [SimpleNamespace(ready_s=seconds, info={}) for seconds in ready_s]
        return compile_note(SimpleNamespace(turns=SimpleNamespace(sides=sides),
                                            placement=SimpleNamespace(compilers=[])))

    assert note(3.21) == "; the torch.compile baselines in a worker of their own (ready after 3.2 s)"
    assert note(3.21, 2.44).endswith("workers of their own on 2 GPUs (ready after 3.2, 2.4 s)")
    assert note(3.21, None).endswith("(ready after 3.2 s; 1 not waited for: the others took every baseline)")
    assert note(None) == note() == ""


def test_a_side_worker_imports_inductor_and_waits_for_the_lock(tmp_path):
    """A real side worker (on the interpreter here): ready with dynamo and inductor imported, it runs a
    trial and a baseline, and a request waits while another process holds the GPU's lock."""
    from triton_sweep.engine.worker import GpuLock, trial_worker

    lock = tmp_path / "gpu0.lock"
    lock.touch()
    rule = StopRule(min_samples=6, min_time_s=0.0, rel_precision=0.5, max_time_s=0.05)
    worker = trial_worker("interpret", "softmax", None, rule, 0.0, 0, 0, str(lock), side=True)
    ours = Trial("softmax", "triton", (8, 100), "float32",
                 {"BLOCK_SIZE": 128, "num_warps": 1, "num_stages": 1})
    theirs = Trial("softmax", "torch", (8, 100), "float32", {})
    try:
        worker.start()
        assert worker.name.startswith("torch.compile worker") and worker.wait_ready()
        for trial in (ours, theirs):
            assert worker.request(("trial", trial, {}), 120, "running")["status"] == "ok"
        with GpuLock(str(lock)):
            worker.submit(("trial", ours, {}), "trial", 120, "running")
            assert not worker.conn.poll(1.0)  # waiting for the lock
        assert worker.take()[1]["status"] == "ok"
    finally:
        stop_all([worker])


def _dying_stand_in(conn, name: str, seconds: float, dies_at: Optional[str], marker: str) -> None:
    """A GPU worker stand-in whose finalists groups take `seconds` and answer each trial with its name;
    it dies (no answer) in the group at the shape `dies_at`, the first time any worker is handed it, and
    leaves its name in `marker`."""
    import os
    from pathlib import Path

    conn.send(("ready", {"gpu_name": "none"}))
    while (message := conn.recv()) is not None:
        time.sleep(seconds)
        if message[0] == "finalists":
            if str(message[1][0].shape) == dies_at and not Path(marker).exists():
                Path(marker).write_text(name)
                os._exit(9)
            conn.send(("finalists", [{"status": "ok", "by": name, "key": t.key} for t in message[1]]))
        else:
            conn.send(("result", {"status": "ok", "by": name}))


def test_finalists_groups_spread_over_the_gpus_whole_and_a_dead_worker_s_group_is_run_again(tmp_path):
    """Eight groups (one (shape, dtype) each) on two GPU workers: every group is re-timed once, whole, by
    one worker; both workers get groups; a worker that dies in a group has that group re-timed from the
    start on the other worker, and the dead one is started again while groups are left."""
    shapes = [(64 * i,) for i in range(1, 9)]
    groups = [[Trial("k", "triton", shape, "float16", {"num_warps": w}) for w in (1, 2, 4)]
              for shape in shapes]
    marker = str(tmp_path / "died")
    gpus = [WorkerProcess(f"worker {i}", _dying_stand_in, (f"worker {i}", 0.2, str(shapes[4]), marker))
            for i in (0, 1)]
    scheduler = Scheduler(gpus, [], trial_timeout_s=60, compile_timeout_s=60)
    answered = []
    try:
        scheduler.start(ahead=[])
        for gpu in gpus:
            gpu.wait_ready()
        scheduler.run_finalists(groups, [None] * len(groups), tie_floor=0.005,
                                on_result=lambda worker, group, answers: answered.append((group, answers)))
    finally:
        stop_all(scheduler.on_gpu)
    assert sorted(group[0].shape for group, _ in answered) == shapes  # each once
    for group, answers in answered:  # whole: every trial of it answered, by one worker
        assert [a["key"] for a in answers] == [t.key for t in group]
        assert len({a["by"] for a in answers}) == 1 and answers[0]["status"] == "ok"
    by = {group[0].shape: answers[0]["by"] for group, answers in answered}
    died = (tmp_path / "died").read_text()
    assert by[shapes[4]] != died  # re-timed elsewhere, not lost with its worker
    assert set(by.values()) == {"worker 0", "worker 1"}
    assert [worker.starts for worker in gpus] == [2 if worker.name == died else 1 for worker in gpus]


def _seeded_stand_in(conn, name: str) -> None:
    """A GPU worker stand-in whose finalists' samples are a function of the trial alone (seeded by its
    key): the times a group gets do not depend on which worker re-times it."""
    import zlib

    conn.send(("ready", {"gpu_name": "none"}))
    while (message := conn.recv()) is not None:
        answers = []
        for trial in message[1]:
            rng = np.random.default_rng(zlib.crc32(trial.key.encode()))
            p50 = trial.shape[0] * (1 + rng.normal(0, 0.01))  # within noise of each other: the draws decide
            samples = p50 * (1 + rng.normal(0, 0.003, 12))
            answers.append({"status": "ok", "by": name, "samples_us": list(samples)})
        conn.send(("finalists", answers))


def _picks(workers: int) -> dict:
    """Each group's chosen config when the finalists go to `workers` stand-in GPU workers."""
    from triton_sweep.model.finalists import on_finalists

    groups = [[Trial("k", "triton", (64 * i,), "float16", {"num_warps": w}) for w in (1, 2, 4, 8)]
              for i in range(1, 9)]
    gpus = [WorkerProcess(f"worker {i}", _seeded_stand_in, (f"worker {i}",)) for i in range(workers)]
    scheduler = Scheduler(gpus, [], trial_timeout_s=60, compile_timeout_s=60)
    picks, by = {}, set()

    def record(worker, trial, row, phase):
        by.add(row["by"])
        if row["chosen"]:
            picks[trial.shape] = trial.config

    try:
        scheduler.start(ahead=[])
        for gpu in gpus:
            gpu.wait_ready()
        scheduler.run_finalists(groups, [None] * len(groups), tie_floor=0.005,
                                on_result=on_finalists(record, tie_floor=0.005))
    finally:
        stop_all(scheduler.on_gpu)
    assert len(by) == workers  # every worker re-timed a group
    return picks


def test_finalists_spread_over_two_workers_pick_what_one_worker_picks():
    """Eight groups whose configs are within noise of each other, each trial's samples drawn from its own
    seed: spread over two workers, every group gets the pick it gets on one (an answer taken for another
    group's, or a group split between workers, would change some: answers reversed on one worker did)."""
    one, two = _picks(1), _picks(2)
    assert len(one) == 8 and two == one
