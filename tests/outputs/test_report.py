"""The end-of-sweep table: which times the speedups divide, and the flag of timers that disagree."""
import pandas as pd

from triton_sweep.outputs.output import shown
from triton_sweep.outputs.table.report import best_table, speedups


def _row(provider, p50, event_p50, config="{}", **changes):
    return {"kernel": "softmax", "dtype": "float16", "shape": "[8192, 4096]", "provider": provider,
            "config": config, "status": "ok", "phase": "screen", "p50_us": p50, "event_p50_us": event_p50,
            "gbps": 1.0, "pct_copy_bw": 1.0, "chosen": None, "timers_disagree": False, "message": None,
            **changes}


def test_speedups_divide_event_times_end_to_end_and_kernel_times_for_gpu_time():
    ours = pd.Series(_row("triton", 30.0, 33.0))
    eager = pd.Series(_row("eager", 267.5, 278.0))  # 5 kernels: launch gaps count against it end to end
    e2e, gpu = speedups(eager, ours)
    assert (round(e2e, 3), round(gpu, 3)) == (round(278.0 / 33.0, 3), round(267.5 / 30.0, 3))
    interpreter = pd.Series(_row("eager", 90.0, None))  # one timer only: the p50 ratio for both
    assert speedups(interpreter, ours) == (3.0, 3.0)


def test_table_shows_both_speedups_and_counts_disagreeing_rows():
    frame = pd.DataFrame([
        {**_row("triton", 30.0, 33.0, '{"BLOCK_SIZE": 4096}'), "id": 1},
        {**_row("triton", 40.0, 43.0, '{"BLOCK_SIZE": 8192}', timers_disagree=True), "id": 2},
        {**_row("torch", 107.3, 110.9), "id": 3},
    ])
    table = best_table(frame)
    line = next(line for line in table.splitlines() if line.startswith("softmax"))
    assert "BLOCK_SIZE=4096" in line and f"torch 107.30 ({110.9 / 33.0:.2f}x, {107.3 / 30.0:.2f}x)" in line
    assert "1 row(s) where the CUDA-event time and the kernel time disagree" in table


def test_counts_say_configs_baselines_and_finalists_apart_and_add_up():
    """Each trial once (its newest row: a finalist's re-timing is not a trial more), configs apart from
    baselines, then the finalists re-timed."""
    frame = pd.DataFrame([
        {**_row("triton", 30.0, None, '{"BLOCK_SIZE": 4096}'), "id": 1, "trial_key": "a"},
        {**_row("triton", 40.0, None, '{"BLOCK_SIZE": 8192}'), "id": 2, "trial_key": "b"},
        {**_row("triton", None, None, '{"BLOCK_SIZE": 1024}', status="pruned"), "id": 3, "trial_key": "c"},
        {**_row("torch", 107.3, None), "id": 4, "trial_key": "d"},
        {**_row("triton", 31.0, None, '{"BLOCK_SIZE": 4096}', phase="final", chosen=True), "id": 5,
         "trial_key": "a"},
        {**_row("triton", 41.0, None, '{"BLOCK_SIZE": 8192}', phase="final", chosen=False), "id": 6,
         "trial_key": "b"},
        {**_row("torch", 108.0, None, phase="final"), "id": 7, "trial_key": "d"},
    ])
    assert best_table(frame).splitlines()[0] == (
        "4 trials: 3 configs (2 ok, 1 pruned), 1 baseline (1 ok); finalists: 2 configs and 1 baseline "
        "re-timed in 1 (shape, dtype) group")


def test_interpreter_timings_are_said_to_be_and_show_no_throughput_or_ceiling():
    frame = pd.DataFrame([
        {**_row("triton", 30.0, None, '{"BLOCK_SIZE": 4096}', backend="interpret"), "id": 1},
        {**_row("torch", 90.0, None, backend="interpret"), "id": 2},
    ])
    table = best_table(frame)
    assert "interpreter timings (backend=interpret" in table and "say nothing of a GPU" in table
    assert "GB/s" not in table and "%copy" not in table
    line = next(line for line in table.splitlines() if line.startswith("softmax"))
    assert line.split()[4] == "30.00" and "torch 90.00 (3.00x, 3.00x)" in line
    gpu = best_table(frame.assign(backend="cuda"))
    assert "GB/s" in gpu and "interpreter" not in gpu


def test_counts_of_a_sweep_where_nothing_was_ok_read_plainly():
    """No ok and no pruned trial: the other statuses alone, without a dangling comma."""
    frame = pd.DataFrame([
        {**_row("triton", None, None, '{"BLOCK_SIZE": 4096}', status="compile_error"), "id": 1,
         "trial_key": "a"},
        {**_row("triton", None, None, '{"BLOCK_SIZE": 8192}', status="compile_error"), "id": 2,
         "trial_key": "b"},
        {**_row("torch", None, None, status="timeout"), "id": 3, "trial_key": "c"},
        {**_row("triton", None, None, '{"BLOCK_SIZE": 1024}', status="incorrect"), "id": 4, "trial_key": "d"},
    ])
    assert best_table(frame).splitlines()[:2] == [
        "4 trials: 3 configs (2 compile_error, 1 incorrect), 1 baseline (1 timeout)", "no ok trials"]


def test_paths_are_named_from_the_working_directory_where_they_lie_inside_it(tmp_path, monkeypatch):
    """One form a line: relative inside the working directory however the config gave it, else absolute."""
    (tmp_path / "repo").mkdir()
    monkeypatch.chdir(tmp_path / "repo")
    assert shown(tmp_path / "repo" / "outputs" / "results.sqlite") == "outputs/results.sqlite"
    assert shown("outputs/runs/x") == "outputs/runs/x"
    assert shown(tmp_path / "elsewhere" / "r.sqlite") == str(tmp_path / "elsewhere" / "r.sqlite")
    assert shown("../elsewhere") == str(tmp_path / "elsewhere")
    assert shown(tmp_path / "repository") == str(tmp_path / "repository")  # a sibling sharing a prefix
