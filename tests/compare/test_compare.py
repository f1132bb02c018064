"""triton_sweep.compare: verdicts on the noise between runs, not within one.

The stores here are drawn as runs of a GPU are (tests/fixtures/synthetic_store.py, noisy_run): every run has
an offset all its rows share, every shape a placement of its inputs that its screening rows and the
finalists' first repetition share, every later repetition a placement of its own, with the spreads
measured on an H200 (BENCHMARKS.md, "noise between runs"). Samples drawn from one distribution with no
run-level offset would pass any rule: this draws what made the old rank test fail an unchanged re-run,
and runs that differ by twice what the rule before issue 32 assumed. The rule's own Monte Carlo, over
every cell the issue names, is tests/compare/test_between_runs.py.
"""

import json

import numpy as np
import pytest
from scipy import stats

from triton_sweep import export
from triton_sweep.compare import command as compare
from triton_sweep.compare import matching, sides
from triton_sweep.compare.report import gate_verdict
from triton_sweep.compare import between_runs
from triton_sweep.store.result_store import ResultStore
from tests.fixtures.synthetic_store import SHAPES, SPACE, noisy_run, row

GATE = between_runs.Rule(alpha=0.01, min_effect=0.01, fail_on_slow=0.02)
CALIBRATION_RUNS = 6


@pytest.mark.parametrize("text, value", [("2%", 0.02), ("0.5%", 0.005), ("0.02", 0.02), ("0", 0.0)])
def test_shares_parse(text, value):
    assert compare.parse_share(text, "--fail-on-slow") == pytest.approx(value)


@pytest.mark.parametrize("text, words", [("2", "ambiguous"), ("abc", "not a share"), ("150%", "between")])
def test_bad_shares_name_the_flag(text, words, tmp_path, capsys):
    store = ResultStore(tmp_path / "r.sqlite")
    noisy_run(store, "base", np.random.default_rng(0))
    store.close()
    status = compare.main([f"--store={tmp_path}/r.sqlite", "base", "base", "--fail-on-slow", text])
    error = capsys.readouterr().err
    assert status == 2 and "--fail-on-slow" in error and words in error


def _calibration(tmp_path, rng, run_noise, name="calibration", shapes=SHAPES) -> dict:
    """(GPU, kernel, provider) -> Spread from CALIBRATION_RUNS runs drawn like the compared ones."""
    path = tmp_path / f"{name}.sqlite"
    store = ResultStore(path)
    for index in range(CALIBRATION_RUNS):
        noisy_run(store, f"cal{index}", rng, run_noise=run_noise, shapes=shapes)
    store.close()
    return matching.load_calibration(str(path), ())[0]


def _gate(base, new, calibrated, shipped=None) -> tuple[list[dict], int]:
    """Every compared row, and the exit status of `--fail-on-slow 2%`."""
    if shipped is None:
        shipped = sides.shipped_keys(sides.Side("BASE", "", base), 0.03)
    result = matching.compare(base, new, GATE, shipped, calibrated=calibrated)
    return result["matched"] + result["winners"], gate_verdict(result, GATE)[1]


def _runs(tmp_path, pairs: int, run_noise: float, seed: int = 2026, shapes=SHAPES, **changes):
    """`pairs` (BASE, NEW) frames of unchanged code whose runs differ by `run_noise` (sd of a run's
    offset), NEW with `changes` (e.g. slower=1.05), and a calibration of runs that differ so."""
    store = ResultStore(tmp_path / f"runs{seed}.sqlite")
    rng = np.random.default_rng(seed)
    for index in range(pairs):
        noisy_run(store, f"base{index}", rng, run_noise=run_noise, shapes=shapes)
        noisy_run(store, f"new{index}", rng, run_noise=run_noise, shapes=shapes, **changes)
    frames = [(store.load(sweep_id=f"base{i}"), store.load(sweep_id=f"new{i}")) for i in range(pairs)]
    store.close()
    return frames, _calibration(tmp_path, rng, run_noise, f"calibration{seed}", shapes)


def test_unchanged_reruns_pass_the_gate_though_runs_differ_by_twice_the_old_assumption(tmp_path):
    """Runs whose offsets spread 1% (the rule before issue 32 assumed 0.5% and failed 6 in 100 such
    comparisons): the gate fails at most what alpha = 1% explains, and few rows are not SAME."""
    failures = not_same = compared = 0
    pairs = 40  # seeded; bench_gate measures the rates over thousands
    frames, calibrated = _runs(tmp_path, pairs, run_noise=0.01)
    for base, new in frames:
        rows, status = _gate(base, new, calibrated)
        failures += status == 1
        not_same += sum(r["verdict"] != "SAME" for r in rows)
        compared += len(rows)
        assert status in (0, 1)  # judged, never refused: the calibration names this GPU and kernel
    assert compared > 1000
    assert failures <= stats.binom.ppf(0.999, pairs, 0.01)
    assert not_same <= 0.01 * compared


def test_the_samples_of_one_run_are_not_the_unit_the_rule_uses(tmp_path):
    """A rank test of the samples, the old rule, calls unchanged re-runs SLOW or FAST: their samples are
    precise inside a run and shifted between runs. The rule here does not."""
    ((base, new),), calibrated = _runs(tmp_path, 1, run_noise=0.005)
    rows, _ = _gate(base, new, calibrated)
    assert all(r["verdict"] == "SAME" for r in rows)
    shifted = 0
    for (_, b), (_, n) in zip(base.iterrows(), new.iterrows()):
        ratio = np.median(n["samples_us"]) / np.median(b["samples_us"])
        separated = min(n["samples_us"]) > max(b["samples_us"]) or max(n["samples_us"]) < min(b["samples_us"])
        shifted += separated and abs(ratio - 1) > 0.02  # samples apart, and by more than 2%
    assert shifted >= 1


@pytest.mark.parametrize("slower, at_least", [(1.05, 19), (1.10, 20)])
def test_a_slowdown_of_every_shape_fails_the_gate_by_the_shift(tmp_path, slower, at_least):
    """Our kernel slower at every shape, the baselines not: every row moves, so the kernel's shift carries
    it, judged against the spread of runs."""
    frames, calibrated = _runs(tmp_path, 20, run_noise=0.005, slower=slower)
    caught = sum(_gate(base, new, calibrated)[1] == 1 for base, new in frames)
    assert caught >= at_least


def test_a_slowdown_of_one_shape_fails_the_gate_by_its_rows_whatever_the_machines_differ_by(tmp_path):
    """Three shapes, each run on a machine of a kind whose runs differ by 1.5% (three times what the rule
    before issue 32 assumed; the calibration's runs too), and NEW's 4096x4096 shape 8% slower: its judged
    rows are SLOW against the shift of the other shapes, and nothing else is. (Those rows catch +5-7% in
    95% of runs here: the other shapes' shift is the mean of two, one of them the 5 us shape whose
    placements spread 2%.)"""
    three = ((4096, 1024), (4096, 2048), (4096, 4096))
    frames, calibrated = _runs(tmp_path, 10, run_noise=0.015, slower=1.08, slowed_shapes={(4096, 4096)},
                               shapes=three)
    caught = 0
    for base, new in frames:
        rows, status = _gate(base, new, calibrated)
        slow = {r["row"][3] for r in rows if r["judged"] and r["verdict"] == "SLOW"}
        caught += status == 1 and slow == {"4096x4096"}
    assert caught >= 9


def test_rows_report_their_threshold_reach_and_where_their_noise_came_from(tmp_path, capsys):
    path = tmp_path / "results.sqlite"
    store = ResultStore(path)
    rng = np.random.default_rng(1)
    for sweep in ("base", "again", "cal2", "cal3", "cal4"):
        noisy_run(store, sweep, rng)
    store.close()
    status = compare.main([f"--store={path}", "base", "again", "--fail-on-slow", "2%",
                           f"--calibration={path}"])
    out = capsys.readouterr().out
    table = [line.split(" | ") for line in out.split("## Trials")[1].split("## Winners")[0].splitlines()
             if line.startswith("| softmax")]
    assert table and all(cells[-5].startswith("±") and cells[-5].endswith("%") for cells in table)
    judged = [cells for cells in table if cells[-2] == "judged"]
    assert judged and all(cells[-4].startswith("+") and cells[-4].endswith("%") for cells in judged)
    assert all(cells[-4] == "-" for cells in table if cells[-2] == "info")
    sources = {cells[-3].split(" s=")[0] for cells in table}
    assert sources == {"shape"}  # screening rows take their shape's
    assert {cells[-2] for cells in table} == {"judged", "info"}
    assert "repetition noise by shape" in out and "gate --fail-on-slow 2% on" in out and status == 0
    assert "reach: a slowdown of one judged row is caught in 95% of runs from +" in out
    assert "softmax on Synthetic GPU (judged): NEW/BASE" in out
    assert f"calibrated on {path}: 3 runs of 2 shapes" in out


@pytest.fixture
def stores(tmp_path):
    """One store: base, a re-run, four more runs (a calibration with base and the re-run), an 8% slower
    sweep of another kernel source over a smaller space (this calibration of these noisy runs catches a
    shift of +7.1-7.5% in 95% of runs, not 5%), the same on another GPU, a sweep where one config
    broke, rows of the old timer; and a second store file."""
    path = tmp_path / "results.sqlite"
    store = ResultStore(path)
    rng = np.random.default_rng(0)
    for sweep in ("base", "again", "cal2", "cal3", "cal4", "cal5"):
        noisy_run(store, sweep, rng)
    smaller = {**SPACE, "num_warps": (2, 4, 8)}
    noisy_run(store, "slower", rng, slower=1.08, space=smaller, kernel_hash="bbbbbbbbbbbb")
    noisy_run(store, "other_gpu", rng, slower=1.08, space=smaller, gpu_name="Other GPU")
    broken_config = {"BLOCK_SIZE": 2048, "num_warps": 4, "num_stages": 1}
    store.append(row("broken", "triton", SHAPES[0], broken_config, None, rng, status="incorrect"))
    noisy_run(store, "old_timer", rng, slower=1.2, timing_method=None)  # CUDA events, ~3 us a call more
    # "slower" again, measured while another process ran kernels on the GPU (a generator of its own: the
    # runs above draw as they did before it)
    noisy_run(store, "shared", np.random.default_rng(11), slower=1.08, space=smaller,
              kernel_hash="bbbbbbbbbbbb", gpu_shared=True)
    store.close()
    other = ResultStore(tmp_path / "other.sqlite")
    noisy_run(other, "elsewhere", rng, top_k=0)
    other.close()
    return path, tmp_path / "other.sqlite"


def _calibrated(path) -> str:
    return f"--calibration={path}:base,again,cal2,cal3,cal4,cal5"


def _run(capsys, *args):
    capsys.readouterr()  # what came before (an export's own lines), not the report
    status = compare.main(list(args))
    out = capsys.readouterr()
    return status, out.out, out.err


def _verdicts(text: str, section: int = 0) -> dict:
    """(provider, shape, config) -> (phase, vs shift, gate, verdict) from the report's markdown table
    `section`."""
    table = text.split("## ")[1 + section]
    cells = [line.strip("| ").split(" | ") for line in table.splitlines() if line.startswith("| softmax")]
    return {(c[1], c[3], c[4]): (c[-11], c[-7], c[-2], c[-1]) for c in cells}


def test_a_slower_kernel_moves_every_row_and_fails_the_gate_by_its_shift(stores, capsys):
    path, _ = stores
    status, out, _ = _run(capsys, f"--store={path}", "base", "slower", _calibrated(path))
    verdicts = _verdicts(out)
    ours = {k: v for k, v in verdicts.items() if k[0] == "triton"}
    assert ours and {v for *_, v in ours.values()} == {"SAME"}  # each row moved as the shift did
    shift_line = next(line for line in out.splitlines() if line.startswith("  softmax on Synthetic GPU"))
    assert 1.06 < float(shift_line.split("NEW/BASE ")[1].split()[0]) < 1.10 and ": SLOW (" in shift_line
    baselines = {k: v for k, v in verdicts.items() if k[0] != "triton"}
    assert len(baselines) == 4 and {v for *_, v in baselines.values()} == {"SAME"}  # not slowed
    torch_line = next(line for line in out.splitlines()
                      if line.startswith("  softmax torch on Synthetic GPU"))
    assert "(info)" in torch_line and ": SAME;" in torch_line  # each provider's shift its own
    # The kernel source differs, and is named.
    assert "kernel_hash: aaaaaaaaaaaa -> bbbbbbbbbbbb" in out
    only_base = out.split("only in BASE (")[1].split("\n\n")[0]
    assert only_base.startswith("6):")  # num_warps=1 is not in the smaller space: 4 + 2 blocks
    assert all("num_warps=1 " in line for line in only_base.splitlines()[1:])
    assert status == 0  # no gate asked for
    for gate, status in (("2%", 1), ("12%", 0)):
        assert _run(capsys, f"--store={path}", "base", "slower", "--fail-on-slow", gate,
                    _calibrated(path))[0] == status
    # NEW against BASE the other way round: a FAST shift, and FAST never fails the gate.
    status, out, _ = _run(capsys, f"--store={path}", "slower", "base", "--fail-on-slow", "2%",
                          _calibrated(path))
    assert ": FAST;" in out and status == 0


def test_rows_measured_beside_another_process_s_kernels_refuse_the_gate_slow_or_not(stores, capsys):
    """The slower kernel that fails the gate at 2% (above), measured while another process ran kernels on
    the GPU: its slowdown may be that process's work, and the gate refuses rather than fail or pass."""
    path, _ = stores
    for base, new in (("base", "shared"), ("shared", "base")):
        status, out, _ = _run(capsys, f"--store={path}", base, new, "--fail-on-slow", "2%", _calibrated(path))
        compared = int(out.split("summary: ")[1].split()[0])  # the winners are among the trials matched
        counts = (0, compared) if new == "shared" else (compared, 0)
        said = f"{counts[0]} of BASE's and {counts[1]} of NEW's compared rows"
        assert f"measured while another process ran kernels on their GPU (gpu_shared): {said}" in out
        assert status == 2 and f"REFUSED: {said} were measured while another process ran kernels" in out


def test_another_gpu_model_is_matched_by_trial_and_its_shift_is_not_judged(stores, capsys):
    path, _ = stores
    status, out, _ = _run(capsys, f"--store={path}", "base", "other_gpu", "--fail-on-slow", "2%",
                          _calibrated(path))
    assert "gpu_name: Synthetic GPU -> Other GPU" in out
    assert "softmax on Synthetic GPU -> Other GPU (judged): NEW/BASE 1.0" in out and "NOT JUDGED" in out
    assert status == 2 and "REFUSED: BASE on Synthetic GPU, NEW on Other GPU" in out
    assert "--across-gpus" in out.splitlines()[-1]


def test_sides_on_different_gpu_models_never_fail_the_gate_and_are_information_when_asked(tmp_path, capsys):
    """BASE on one GPU model, NEW on another with one shape 8% slower: its rows are SLOW against the
    shift, yet no rule tells that from the GPUs' own difference. --fail-on-slow refuses (exit 2, naming
    both GPUs and --across-gpus), --across-gpus reads it as information (exit 0), and without a gate the
    exit is 0; never 1."""
    path = tmp_path / "results.sqlite"
    store = ResultStore(path)
    rng = np.random.default_rng(3)
    three = ((4096, 1024), (4096, 2048), (4096, 4096))
    noisy_run(store, "h200", rng, shapes=three, gpu_name="NVIDIA H200")
    noisy_run(store, "h100", rng, shapes=three, slower=1.08, slowed_shapes={(4096, 4096)},
              gpu_name="NVIDIA H100 80GB HBM3")
    store.close()
    sides = [f"--store={path}", "h200", "h100", "--machine-spread", "0.5%"]
    status, out, _ = _run(capsys, *sides, "--fail-on-slow", "2%")
    gate = out.splitlines()[-1]
    assert status == 2 and "REFUSED: BASE on NVIDIA H200, NEW on NVIDIA H100 80GB HBM3" in gate
    assert "--across-gpus" in gate
    assert "SLOW" in _verdicts(out)[("triton", "4096x4096", "BLOCK_SIZE=4096 num_warps=4 num_stages=1")][-1]
    status, out, _ = _run(capsys, *sides, "--fail-on-slow", "2%", "--across-gpus")
    assert status == 0 and "NOT GATED: BASE on NVIDIA H200, NEW on NVIDIA H100 80GB HBM3" in out
    assert _run(capsys, *sides)[0] == 0


def test_the_gate_refuses_a_shift_no_measured_spread_judges_unless_one_is_stated(stores, capsys):
    path, _ = stores
    status, out, _ = _run(capsys, f"--store={path}", "base", "again", "--fail-on-slow", "2%")
    assert status == 2 and "no spread of runs of this GPU, kernel and provider was measured" in out
    status, out, _ = _run(capsys, f"--store={path}", "base", "again", "--fail-on-slow", "2%",
                          "--machine-spread", "0.5%")
    assert status == 0 and "stated by --machine-spread" in out
    status, _, err = _run(capsys, f"--store={path}", "base", "again", f"--calibration={path}:base,again")
    assert status == 2 and "needs 3 or more" in err


def test_the_runs_of_base_and_new_are_left_out_of_the_calibration(stores, capsys):
    """NEW's own run in the calibration would judge a change of every row by a spread that holds it (a
    10% slowdown of NEW among three runs puts sigma near 5%); BASE's would judge BASE by itself. Both are
    left out, and the report says so."""
    path, _ = stores
    status, out, _ = _run(capsys, f"--store={path}", "base", "slower", "--fail-on-slow", "2%",
                          f"--calibration={path}:base,again,cal2,cal3,cal4,cal5,slower")
    assert f"calibration: 5 runs of {path}; left out: base (BASE's run), slower (NEW's run)" in out
    assert status == 1  # the shift of every row, judged against the five unchanged runs
    status, _, err = _run(capsys, f"--store={path}", "base", "again", f"--calibration={path}:base,again,cal2")
    assert status == 2 and "holds 1 run(s) with rows besides BASE's and NEW's" in err


def test_the_gate_judges_winners_and_shipped_configs_unless_told_all(stores, capsys):
    path, _ = stores
    _, out, _ = _run(capsys, f"--store={path}", "base", "slower", _calibrated(path))
    trials = _verdicts(out)
    judged = {k for k, (_, _, gate, _) in trials.items() if gate == "judged"}
    assert judged and len(judged) < len(trials)  # the covering set's configs, at the shapes they cover
    assert all(gate == "judged" for _, _, gate, _ in _verdicts(out, section=1).values())  # every winner
    _, out, _ = _run(capsys, f"--store={path}", "base", "slower", "--gate", "all", _calibrated(path))
    assert {gate for _, _, gate, _ in _verdicts(out).values()} == {"judged"}


def test_a_config_that_broke_is_listed_and_fails_the_gate(stores, capsys):
    path, _ = stores
    status, out, _ = _run(capsys, f"--store={path}", "base", "broken", "--fail-on-slow", "50%")
    assert ("status changed (1):\n  ok -> incorrect: softmax triton float16 4096x1024 BLOCK_SIZE=2048 "
            "num_warps=4" in out)
    assert "1 ok in BASE and failing in NEW" in out and status == 1


def test_stores_by_path_and_path_with_sweep_id(stores, capsys):
    path, other = stores
    status, out, _ = _run(capsys, f"{path}:base", str(other), _calibrated(path))
    assert out.startswith(f"BASE: sweep base in {path}\nNEW:  every trial in {other}")
    # The other store has no finalists: screening rows on both sides, their noise from BASE's shapes.
    assert {phase for phase, _, _, _ in _verdicts(out).values()} == {"screen"} and status == 0


def test_an_unknown_sweep_names_the_argument_and_the_sweeps_there(stores, capsys):
    path, _ = stores
    status, _, err = _run(capsys, f"--store={path}", "base", "nope")
    assert status == 2 and "NEW: no sweep 'nope'" in err and "again, base, broken, cal2" in err
    status, _, err = _run(capsys, "--store=/nonexistent/r.sqlite", "base", "again")
    assert status == 2 and "BASE:" in err and "/nonexistent/r.sqlite" in err


def test_rows_of_another_timing_method_get_no_verdict_and_the_gate_refuses(stores, capsys):
    path, _ = stores
    status, out, _ = _run(capsys, f"--store={path}", "base", "old_timer", "--fail-on-slow", "2%",
                          _calibrated(path))
    verdicts = _verdicts(out)
    assert verdicts and {v for *_, v in verdicts.values()} == {"OTHER TIMER"}  # 20% slower, yet no SLOW
    assert "timing_method: cupti/read-flush -> None" in out
    assert status == 2 and "REFUSED: no judged row has a verdict" in out


def test_rows_without_repetitions_get_no_verdict_and_the_gate_refuses(tmp_path, capsys):
    """A store written before repetitions existed: no class has any noise; no assumed one stands in."""
    path = tmp_path / "old.sqlite"
    store = ResultStore(path)
    rng = np.random.default_rng(3)
    for sweep in ("base", "again"):
        for r in noisy_run(ResultStore(tmp_path / "scratch.sqlite"), sweep, rng):
            store.append({**r, "repetitions": None, "rep_noise": None, "rep_p50s_us": None})
    store.close()
    status, out, _ = _run(capsys, f"--store={path}", "base", "again", "--fail-on-slow", "2%",
                          "--machine-spread", "0.5%")
    assert {cells.split(" | ")[-1].strip(" |") for cells in out.splitlines()
            if cells.startswith("| softmax")} == {"NO REPETITIONS"}
    assert status == 2 and "no repetitions on either side" in out


DAMAGES = {  # how NEW's damaged rows are damaged, and which: the rank-1 finalist row, or every ok row of
    # our provider at one shape (which once ended in a pandas traceback, exit 1: read by CI as a regression)
    "p50 NaN": ({"p50_us": float("nan"), "rep_p50s_us": None}, "rank 1"),
    "p50 zero": ({"p50_us": 0.0, "rep_p50s_us": None}, "rank 1"),
    "p50 None": ({"p50_us": None, "rep_p50s_us": None}, "rank 1"),
    "p50 inf": ({"p50_us": float("inf"), "rep_p50s_us": None}, "rank 1"),
    "a repetition median inf": ({"rep_p50s_us": [5.0, float("inf"), 5.0, 5.0, 5.0]}, "rank 1"),
    "every row of a shape None": ({"p50_us": None, "rep_p50s_us": None}, "a shape"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_an_ok_row_without_a_finite_positive_median_is_bad_input_named(tmp_path, capsys, damage):
    changes, which = DAMAGES[damage]
    path = tmp_path / "bad.sqlite"
    store = ResultStore(path)
    rng = np.random.default_rng(4)
    noisy_run(store, "base", rng)
    for r in noisy_run(ResultStore(tmp_path / "scratch.sqlite"), "new", rng):
        ours = r["provider"] == "triton" and r["status"] == "ok"
        damaged = ours and (r["phase"] == "final" and r["rank"] == 1 if which == "rank 1"
                            else tuple(r["shape"]) == SHAPES[0])
        store.append({**r, **changes} if damaged else r)
    store.close()
    status, _, err = _run(capsys, f"--store={path}", "base", "new", "--fail-on-slow", "2%",
                          "--machine-spread", "0.5%")
    assert status == 2 and "Traceback" not in err
    assert err.startswith("error: NEW: softmax triton float16") and err.count("\n") == 1, err
    assert "an ok row needs a finite, positive p50 and repetition medians" in err


def test_a_fault_of_compare_itself_exits_2_not_1(tmp_path, capsys, monkeypatch):
    """A failure to judge is never read as a regression (exit 1 is the gate's verdict alone)."""
    path = tmp_path / "r.sqlite"
    store = ResultStore(path)
    rng = np.random.default_rng(5)
    noisy_run(store, "base", rng)
    noisy_run(store, "new", rng)
    store.close()

    def broken(*args, **kwargs):
        raise ValueError("idxmin with skipna=True encountered all NA values in a group.")

    monkeypatch.setattr(compare, "compare", broken)
    status, _, err = _run(capsys, f"--store={path}", "base", "new", "--fail-on-slow", "2%")
    assert status == 2 and err.startswith("error: could not judge (ValueError: idxmin")
    assert "Traceback" not in err


@pytest.mark.parametrize("p50, reps", [(None, [5.0, 5.1]), (5.0, [5.0, None]), (5.0, [5.0, -1.0]),
                                        (float("nan"), None)])
def test_a_missing_or_broken_timing_is_named_whatever_its_form(p50, reps):
    import pandas as pd

    row = pd.Series({"kernel": "softmax", "provider": "triton", "dtype": "float16", "shape": "[8, 100]",
                     "config": '{"BLOCK_SIZE": 128}', "p50_us": p50, "rep_p50s_us": reps, "repetitions": 2})
    with pytest.raises(sides.CompareError,
                       match="BASE: softmax triton float16 8x100 BLOCK_SIZE=128 is ok with a p50 of"):
        matching._figure(row, "BASE")


def test_an_export_entry_without_a_p50_is_named(tmp_path, capsys):
    store = ResultStore(tmp_path / "r.sqlite")
    noisy_run(store, "base", np.random.default_rng(8))
    frame = store.load(sweep_id="base")
    store.close()
    path = _export(frame, tmp_path / "export")
    data = json.loads(path.read_text())
    del data["gpus"]["Synthetic GPU"]["9.9"]["dtypes"]["float16"]["configs"][0]["ok_at"][0]["p50_us"]
    path.write_text(json.dumps(data))
    status, _, err = _run(capsys, str(path), str(path), "--machine-spread", "0.5%")
    assert status == 2 and f"{path}: gpus.Synthetic GPU.9.9.dtypes.float16.configs.0.ok_at.0.p50_us: Field " \
        "required" in err


def test_a_clock_s_quantum_bounds_what_a_row_can_show(tmp_path, capsys):
    """Samples read off a clock of 0.5 us on a 5 us kernel (CUDA events, where CUPTI cannot be used): the
    repetitions' medians can agree exactly and spread 0, and a one-quantum move (10%) is then within the
    row's noise (the quantum's variance, q^2 / 12 a side), not SLOW by a threshold of min_effect."""
    path = tmp_path / "quantized.sqlite"
    store = ResultStore(path)
    for sweep, value in (("base", 5.0), ("new", 5.5)):
        samples = np.array([value] * 17 + [value + 0.5] * 3, dtype=np.float32)
        for config in ({"BLOCK_SIZE": 1024}, {"BLOCK_SIZE": 2048}):
            store.append({**row(sweep, "triton", (4096, 1024), config, value, np.random.default_rng(0),
                                phase="final"), "samples_us": samples, "p50_us": value, "repetitions": 3,
                          "rep_p50s_us": [value] * 3, "rep_noise": 0.0, "p50_precision": 0.2})
    store.close()
    status, out, _ = _run(capsys, f"--store={path}", "base", "new", "--gate", "all",
                          "--machine-spread", "0.1%")
    rows = [line for line in out.splitlines() if line.startswith("| softmax")]
    assert rows and all(line.endswith("| ONE SHAPE |") or "| SAME |" in line for line in rows)
    assert "NEW/BASE 1.100" in out and ": SAME;" in out  # the shift: 10% within four quanta


def test_a_row_whose_samples_are_all_one_value_is_refused_for_its_clock(tmp_path, capsys):
    """Five repetitions whose every sample reads one value (a clock coarser than the kernel): the row's
    error is unknown, which is what the refusal says (not "no repetitions"); --machine-spread, which is of
    the runs, does not clear it."""
    path = tmp_path / "coarse.sqlite"
    store = ResultStore(path)
    rng = np.random.default_rng(6)
    noisy_run(store, "base", rng)
    for r in noisy_run(ResultStore(tmp_path / "scratch.sqlite"), "new", rng):
        if r["provider"] == "triton" and r["phase"] == "final" and r["rank"] == 1:
            value = float(r["p50_us"])
            r = {**r, "samples_us": np.full(20, value, dtype=np.float32), "rep_p50s_us": [value] * 5,
                 "rep_noise": 0.0}
        store.append(r)
    store.close()
    status, out, _ = _run(capsys, f"--store={path}", "base", "new", "--fail-on-slow", "2%",
                          "--machine-spread", "0.5%")
    assert status == 2 and "read every sample as one value (e.g. softmax triton float16" in out
    assert "a clock too coarse for the kernel" in out and "no repetitions on either side" not in out


def test_a_calibration_without_repetitions_says_so(tmp_path, capsys):
    path, calibration = tmp_path / "r.sqlite", tmp_path / "calibration.sqlite"
    rng = np.random.default_rng(7)
    store = ResultStore(path)
    noisy_run(store, "base", rng)
    noisy_run(store, "new", rng)
    store.close()
    store = ResultStore(calibration)
    for index in range(CALIBRATION_RUNS):
        noisy_run(store, f"run{index}", rng, repetitions=1)
    store.close()
    status, out, _ = _run(capsys, f"--store={path}", "base", "new", "--fail-on-slow", "2%",
                          "--calibration", str(calibration))
    assert status == 2 and "the calibration gives no spread of runs of this GPU, kernel and provider" in out
    assert "give --calibration" not in out


def _export(frame, out_dir):
    export.export_kernel(frame, "softmax", out_dir, tolerance=0.03, key={"n_cols": "cols"})
    return out_dir / "softmax_configs.json"


def test_an_export_compares_with_a_store_and_with_another_export(tmp_path, capsys):
    path = tmp_path / "results.sqlite"
    store = ResultStore(path)
    rng = np.random.default_rng(5)
    for sweep, slower in (("base", 1.0), ("again", 1.0), ("cal2", 1.0), ("cal3", 1.0), ("slower", 1.08)):
        noisy_run(store, sweep, rng, slower=slower)
    frames = {s: store.load(sweep_id=s) for s in ("base", "again", "slower")}
    store.close()
    calibration = f"--calibration={path}:base,again,cal2,cal3"
    old = _export(frames["base"], tmp_path / "old")
    data = json.loads(old.read_text())
    entries = data["gpus"]["Synthetic GPU"]["9.9"]["dtypes"]["float16"]
    assert all(best["repetitions"] == 5 and best["rep_noise"] > 0 and len(best["rep_p50s_us"]) == 5
               for best in entries["best_by_shape"])  # the noise travels with the export
    # The vendored export against a re-run on the same GPU: every shipped config at its shapes, SAME.
    status, out, _ = _run(capsys, str(old), f"{path}:again", "--fail-on-slow", "2%", calibration)
    shipped = _verdicts(out)
    assert shipped and {gate for _, _, gate, _ in shipped.values()} >= {"judged"}
    assert {v for *_, v in shipped.values()} == {"SAME"} and status == 0
    assert "environment: the same for every matched row" in out  # the fields an export records
    # ... and against a slower one: the gate fails (by the shift: every row of ours moved).
    status, out, _ = _run(capsys, str(old), f"{path}:slower", "--fail-on-slow", "2%", calibration)
    assert status == 1 and "1 shift(s) SLOW" in out
    # Two exports.
    new = _export(frames["slower"], tmp_path / "new")
    status, out, _ = _run(capsys, str(old), str(new), "--fail-on-slow", "2%", calibration)
    assert status == 1 and out.startswith(f"BASE: the export {old}")


def test_a_file_that_is_no_export_names_the_argument(tmp_path, capsys):
    (tmp_path / "notes.json").write_text('{"a": 1}')
    status, _, err = _run(capsys, str(tmp_path / "notes.json"), str(tmp_path / "notes.json"))
    assert status == 2 and "BASE:" in err and "not an export" in err


def test_the_slower_softmax_revision_matches_softmax_trial_by_trial():
    """tests/fixtures/softmax_twice.py, the NEW side of the GPU comparison (.ci/gpu compare): the same trials
    as softmax, another source hash, and still correct (launched twice into the same output)."""
    import torch

    from triton_sweep.kernels import softmax
    from triton_sweep.model.spec_sources import kernel_source_hash
    from triton_sweep.model.space import plan_trials
    from triton_sweep.measure.check import TOLERANCES
    from tests.fixtures import softmax_twice

    conf = {"shapes": [[6, 123]], "dtypes": ["float16"], "space": {"BLOCK_SIZE": [128, 256]},
            "baselines": ["torch"]}
    keys = [[t.key for t in plan_trials(spec, conf, "interpret")]
            for spec in (softmax.SPEC, softmax_twice.SPEC)]
    assert len(keys[0]) > 2 and keys[0] == keys[1]
    assert kernel_source_hash(softmax.SPEC) != kernel_source_hash(softmax_twice.SPEC)
    (x,) = softmax.SPEC.make_inputs((6, 123), torch.float16, 0, "cpu")
    out = torch.full_like(x, float("nan"))
    softmax_twice.SPEC.launch((x,), out, {"BLOCK_SIZE": 128, "num_warps": 2, "num_stages": 1})
    rtol, atol = TOLERANCES["float16"]  # the correctness gate's
    torch.testing.assert_close(out.double(), softmax.softmax_ref(x.double()), rtol=rtol, atol=atol)


def test_the_slowed_softmax_at_zero_is_softmax_trial_by_trial(monkeypatch):
    """tests/fixtures/softmax_slowed.py, the regression bench_gate puts into the kernel on the GPU: unset, it
    is softmax (no spin compiled in), with softmax's trials; the share is read at each launch."""
    import torch

    from triton_sweep.kernels import softmax
    from triton_sweep.model.space import plan_trials
    from triton_sweep.measure.check import TOLERANCES
    from tests.fixtures import softmax_slowed

    conf = {"shapes": [[6, 123]], "dtypes": ["float16"], "space": {"BLOCK_SIZE": [128, 256]}}
    assert [t.key for t in plan_trials(softmax.SPEC, conf, "interpret")] == \
        [t.key for t in plan_trials(softmax_slowed.SPEC, conf, "interpret")]
    (x,) = softmax.SPEC.make_inputs((6, 123), torch.float16, 0, "cpu")
    out = torch.full_like(x, float("nan"))
    monkeypatch.delenv(softmax_slowed.SPIN_VARIABLE, raising=False)
    assert softmax_slowed.spin_per_mille(123) == -1  # unset: no counter read (the GPU alone has one)
    softmax_slowed.SPEC.launch((x,), out, {"BLOCK_SIZE": 128, "num_warps": 2, "num_stages": 1})
    rtol, atol = TOLERANCES["float16"]
    torch.testing.assert_close(out.double(), softmax.softmax_ref(x.double()), rtol=rtol, atol=atol)
    monkeypatch.setenv(softmax_slowed.SPIN_VARIABLE, "1024:40")
    assert softmax_slowed.spin_per_mille(1024) == 40 and softmax_slowed.spin_per_mille(123) == 0
    monkeypatch.setenv(softmax_slowed.SPIN_VARIABLE, "25")
    assert softmax_slowed.spin_per_mille(4096) == 25


def test_a_shape_every_provider_moved_alike_is_the_machine_s_not_a_regression(tmp_path):
    """NEW's largest shape 8% slower on our kernel and on both baselines timed in its rounds (a machine
    effect on that shape): our rows there are MACHINE, not SLOW, and the gate passes; ours alone 8% slower
    there is SLOW and fails it."""
    three = ((4096, 1024), (4096, 2048), (4096, 4096))
    frames, calibrated = _runs(tmp_path, 1, run_noise=0.005, shapes=three)
    base, new = frames[0]
    at = new["shape"] == json.dumps(list(three[-1]))

    def slower(frame, rows):
        frame = frame.copy()
        for name in ("p50_us", "samples_us", "rep_p50s_us"):
            frame.loc[rows, name] = frame.loc[rows, name].map(
                lambda v: None if v is None else np.asarray(v) * 1.08)
        frame["p50_us"] = frame["p50_us"].astype(float)
        return frame

    rows, status = _gate(base, slower(new, at), calibrated)
    ours = {r["verdict"] for r in rows
            if r["row"][1] == "triton" and r["row"][3] == "4096x4096" and r["judged"]}
    assert ours == {between_runs.MACHINE} and status == 0
    assert _gate(base, slower(new, at & (new["provider"] == "triton")), calibrated)[1] == 1


@pytest.mark.parametrize("copy, matmul, kind", [(70.0, 3.0, "memory-bound"), (10.0, 60.0, "compute-bound"),
                                                (None, float("nan"), ""), (0.0, 0.0, "")])
def test_a_row_s_kind_of_bound_is_the_larger_of_its_shares_of_the_ceilings(copy, matmul, kind):
    import pandas as pd

    assert matching._kind(pd.Series({"pct_copy_bw": copy, "pct_matmul": matmul})) == kind


def test_the_launch_and_reference_errors_are_status_changes_and_leave_the_export_alone(tmp_path, capsys):
    """A store whose rows hold the statuses added after it (launch_error, reference_error) reads, compares
    (each listed as a status change, failing the gate as a broken config does) and exports (only ok rows)."""
    path = tmp_path / "results.sqlite"
    store = ResultStore(path)
    rng = np.random.default_rng(3)
    noisy_run(store, "base", rng, top_k=0)
    config = {"BLOCK_SIZE": 2048, "num_warps": 4, "num_stages": 1}
    store.append(row("renamed", "triton", SHAPES[0], config, None, rng, status="launch_error",
                     message="TypeError: softmax() got an unexpected keyword argument 'BLOCK'"))
    store.append(row("renamed", "triton", SHAPES[1], {**config, "BLOCK_SIZE": 4096}, None, rng,
                     status="reference_error", message="the kernel's reference raised RuntimeError: boom"))
    frame = store.load()
    store.close()
    status, out, _ = _run(capsys, f"--store={path}", "base", "renamed", "--fail-on-slow", "50%")
    assert ("status changed (2):\n  ok -> launch_error: softmax triton float16 4096x1024 BLOCK_SIZE=2048 "
            "num_warps=4 num_stages=1: TypeError" in out)
    assert "ok -> reference_error: softmax triton float16 4096x4096 BLOCK_SIZE=4096" in out
    assert "2 ok in BASE and failing in NEW" in out and status == 1
    data = json.loads(_export(frame, tmp_path / "out").read_text())
    exported = data["gpus"]["Synthetic GPU"]["9.9"]["dtypes"]["float16"]["best_by_shape"]
    assert len(exported) == len(SHAPES)  # the base's winners, none of the failing rows
