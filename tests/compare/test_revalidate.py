"""triton_sweep.revalidate on the interpreter: an export re-timed where it was recorded, judged by compare's
rule, only the shapes that got slower than the tolerance or broke re-screened, the exit status; and the
re-screen decision itself.

The export re-validated here is made from an interpreter sweep by the export's own functions, with its
recorded figures scaled to stand for a change: the re-validation measures again on the same (interpreter)
machine, and writes the interpreter's section (tests/export/test_interpreter_flow.py re-validates what
triton-sweep-export --interpreter wrote)."""
import json
import re
import shutil

import pytest

from triton_sweep.measure.device import INTERPRETER_DEVICE_NAME
from triton_sweep.export.cover import covered
from triton_sweep.export.fileformat import write_export
from triton_sweep.export.generalization import gpu_section
from triton_sweep.export.rows import baseline_rows, beside_rows
from triton_sweep.store.result_store import ResultStore
from triton_sweep.revalidate import judge_shapes
from tests.conftest import overwrite_a_leaf_page, run_command, run_sweep, user_env

SHAPES = [[300], [900]]
# vector_add whose launches sleep: steady timings (its docstring)
STEADY = "tests.fixtures.vector_add_steady:SPEC"
SWEEP = ["kernel=external", f"kernel.spec={STEADY}", f"kernel.shapes={json.dumps(SHAPES)}",
         "kernel.dtypes=[float32]",
         "+kernel.space.BLOCK_SIZE=[256,512]", "+kernel.space.num_warps=[2]", "+kernel.baselines=[torch]",
         "finalists.top_k=2", "finalists.min_samples=8", "finalists.min_time_s=0", "finalists.max_time_s=0.5",
         "finalists.repetitions=3", "sweep_id=tuned"]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The sweep an export is made from (interpreter, finalists in 3 repetitions)."""
    work = tmp_path_factory.mktemp("tuned")
    run_sweep(work, *SWEEP)
    store = ResultStore(work / "results.sqlite")
    rows = store.load(sweep_id="tuned")
    store.close()
    return work, rows


def _export(tuned, tmp_path, scale: dict):
    """The export of the tuned rows, its recorded p50s times scale[cols] at each shape."""
    _, rows = tuned
    ours = rows[(rows["provider"] == "triton") & (rows["status"] == "ok")]
    ours = ours.sort_values("id").groupby("trial_key").tail(1)
    section = gpu_section(ours, covered(ours, 0.03, baseline_rows(beside_rows(rows, ours))), 0.03)
    def scaled(figures: dict, names: tuple) -> None:
        factor = scale[figures["shape"][0]]
        for name in names:
            figures[name] *= factor
        if "rep_p50s_us" in figures:  # the repetitions' medians, which compare's rule reads
            figures["rep_p50s_us"] = [m * factor for m in figures["rep_p50s_us"]]

    for lists in section["dtypes"].values():
        for item in lists["configs"]:
            for at in item["ok_at"]:
                scaled(at, ("p50_us",))
        for best in lists["best_by_shape"]:
            scaled(best, ("p50_us", "fastest_p50_us", "list_p50_us"))
    write_export("vector_add", {INTERPRETER_DEVICE_NAME: section}, tmp_path / "exports", ("n",),
                 {"n_elements": "n"}, merge=False)
    return tmp_path / "exports" / "vector_add_configs.json"


def _revalidate(path, tmp_path, *args, spec: str = STEADY):
    result = run_command(["triton_sweep.revalidate", path, "--backend", "interpret", "--store",
                          tmp_path / "reval.sqlite", "--spec", spec, *args], cwd=tmp_path,
                         env=user_env(TRITON_INTERPRET="1"))
    return result.returncode, result.stdout + result.stderr


def test_shapes_recorded_as_faster_than_they_run_are_re_screened_the_others_kept(tuned, tmp_path):
    # 900 recorded at a quarter of its time: it now looks 4x as slow (SLOW beyond 3%); 300 recorded at 3x
    # its time: it now looks faster (FAST): kept.
    # Without --check the shape is re-screened, and the interpreter's section written anew from the rows.
    path = _export(tuned, tmp_path, {300: 3.0, 900: 0.25})
    status, out = _revalidate(path, tmp_path)
    assert status == 1, out
    lines = {line.split(" | ")[1]: line for line in out.splitlines() if line.startswith("| float32")}
    assert "FAST" in lines["300"] and lines["300"].endswith("| keep |")
    assert "SLOW" in lines["900"] and lines["900"].endswith("| re-screen |")
    assert "1 to re-screen" in out
    assert "re-screened 1 float32 shape(s)" in out
    assert f"exported: {path}" in out
    (section,) = json.loads(path.read_text())["gpus"][INTERPRETER_DEVICE_NAME].values()
    assert section["backend"] == "interpret"
    assert any(sweep.endswith("-screen-float32") for sweep in section["sweep_ids"])


def test_an_export_that_still_holds_passes(tuned, tmp_path):
    # Recorded slower than it runs, every shape alike: the shift of every row is 3x faster (not judged on
    # the interpreter, which no spread of runs was measured for), each shape SAME against it.
    # Holding is every shape kept, none broken (exit 0: the module's rule). Steady as the sleeps make
    # them, the two shapes may still move apart by more than the repetitions' spread, minutes after the
    # base: FAST or SLOW against the shift, each kept while the shape is no slower than recorded beyond
    # the tolerance (seen with vector_add itself: FAST in 2 of ~8 runs; SLOW once, a shape at 0.37x its
    # recorded time against a shift of 0.27x).
    path = _export(tuned, tmp_path, {300: 3.0, 900: 3.0})
    status, out = _revalidate(path, tmp_path, "--check")
    assert status == 0, out
    assert "0 to re-screen" in out and re.search(r"2 shapes: \d SAME, \d FAST, \d SLOW, 0 broken", out), out
    lines = [line for line in out.splitlines() if line.startswith("| float32")]
    assert len(lines) == 2 and all(line.endswith("| keep |") for line in lines), out
    assert "vector_add on Triton interpreter (CPU) (judged): NEW/BASE 0." in out and "NOT JUDGED" in out


def test_a_config_a_kernel_change_broke_is_reported_and_its_shapes_re_screened(tuned, tmp_path):
    path = _export(tuned, tmp_path, {300: 3.0, 900: 3.0})
    status, out = _revalidate(path, tmp_path, "--check", spec="tests.fixtures.vector_add_broken:SPEC")
    assert status == 1, out
    broken = [line for line in out.splitlines() if "broken: BLOCK_SIZE=512" in line]
    assert broken and all("(incorrect)" in line and line.endswith("| re-screen |") for line in broken)


def test_bad_input_names_the_argument(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    status, out = _revalidate(tmp_path / "x.json", tmp_path)
    assert status == 2 and "not an export" in out


@pytest.mark.parametrize("shift_verdict, also", [("SAME", set()), ("SLOW", {6}), ("NOT JUDGED", {6})])
def test_the_re_screen_decision(shift_verdict, also):
    """Re-screen where a shipped config broke, or where the list's best is slower than the tolerance and
    SLOW against the shift of every row, or the shift is SLOW itself or not judged (a shape 8% slower
    that moved as every row did: 6); keep a SLOW within the tolerance, SAME and FAST."""
    import pandas as pd

    from triton_sweep.compare.between_runs import Shift

    base = pd.DataFrame([{"provider": "triton", "dtype": "float16", "shape": json.dumps([n])}
                         for n in (1, 2, 3, 4, 5, 6)])

    def winner(n, verdict, ratio):
        return {"row": ("k", "triton", "float16", str(n), "c"), "verdict": verdict, "ratio": ratio,
                "threshold": 0.02, "base_p50": 1.0, "new_p50": ratio}

    shift = Shift(0.0, 1e-5, 8, 6, None, True, verdict=shift_verdict)
    result = {"winners": [winner(1, "SAME", 1.01), winner(2, "SLOW", 1.025), winner(3, "SLOW", 1.08),
                          winner(4, "FAST", 0.9), winner(5, "SAME", 1.0), winner(6, "SAME", 1.08)],
              "status_changes": [{"row": ("k", "triton", "float16", "5", "BLOCK=8"), "base": "ok",
                                  "new": "incorrect"}],
              "shifts": {(("GPU", "k", "triton"), ""): shift, (("GPU", "k", "torch"), ""): None}}
    decided = {json.loads(s["shape"])[0]: s["rescreen"] for s in judge_shapes(result, base, 0.03)}
    assert {n for n, rescreen in decided.items() if rescreen} == {3, 5} | also


def test_a_re_timing_beside_another_process_s_kernels_judges_and_re_tunes_nothing(tuned, tmp_path, capsys,
                                                                                   monkeypatch):
    """The export recorded 4x faster than it runs at 900 (a re-screen, were it judged), re-timed by the
    real sweep, whose rows say another process ran kernels on the GPU meanwhile (on a GPU the job's watch
    marks them: tests/measure/test_gpu.py): exit 2, no verdict, nothing re-screened or written."""
    from triton_sweep import revalidate

    real_sweep = revalidate.run_sweep

    def beside_a_neighbour(*args, **kwargs):
        rows, seconds = real_sweep(*args, **kwargs)
        return rows.assign(gpu_shared=rows["status"] == "ok"), seconds

    monkeypatch.setattr(revalidate, "run_sweep", beside_a_neighbour)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    path = _export(tuned, tmp_path, {300: 3.0, 900: 0.25})
    status = revalidate.main([str(path), "--backend", "interpret", "--store", str(tmp_path / "reval.sqlite"),
                              "--spec", STEADY])
    out = capsys.readouterr()
    assert status == 2, out
    assert "re-timed rows were measured while another process ran kernels on the GPU" in out.err
    assert "re-screen" not in out.out and "summary:" not in out.out


def test_a_damaged_store_is_refused_in_one_line_and_left_as_it_is(tuned, tmp_path):
    work, _ = tuned
    store = tmp_path / "reval.sqlite"
    shutil.copyfile(work / "results.sqlite", store)
    overwrite_a_leaf_page(store)
    before = store.read_bytes()
    status, out = _revalidate(_export(tuned, tmp_path, {300: 1.0, 900: 1.0}), tmp_path)
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert status == 2 and len(errors) == 1 and "Traceback" not in out, out
    assert f"{store}: a damaged results store: SQLite" in errors[0] and "re-timed" not in out
    assert store.read_bytes() == before
