"""The end-of-sweep table: which times the speedups divide, and the flag of timers that disagree."""
import pandas as pd

from runners.results.report import best_table, speedups


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
