"""A program's kernels swept with no spec (runners/capture/replay.py), on the interpreter: `python -m
triton_sweep.capture --replay` of tests/fixtures/replay_program.py writes a sweep file for each kernel it can
replay and says why it cannot replay the one defined inside a function; each sweep then checks every config
against the program's own: a kernel writing in place (restored before each checked call), one reading
an index tensor (its recorded values), one under @triton.autotune (its configs, the others pruned)."""
import json
import os
import re
import sys
import time
from pathlib import Path

import pytest
import torch

from triton_sweep.capture.replay import Replay, kernel_name, parse_target
from triton_sweep.capture.replay_records import why_not
from triton_sweep.model.trial import ConfigError
from triton_sweep.measure.check import compare
from triton_sweep.store.result_store import ResultStore
from tests.conftest import REPO, run_command, run_sweep, user_env

PROGRAM = REPO / "tests" / "fixtures" / "replay_program.py"
ONE_OPTION = ("+kernel.space.num_warps=[1]", "+kernel.space.num_stages=[1]")  # the interpreter ignores both


def _capture(folder: Path, program: Path) -> tuple[Path, str]:
    """(the capture's folder, its printed lines): the sweep files moved to <folder>/conf/sweep/."""
    folder.mkdir(parents=True, exist_ok=True)
    result = run_command(["triton_sweep.capture", "--replay", "--out", folder / "app", "--", sys.executable,
                          program], cwd=folder, env=user_env(TRITON_INTERPRET="1"))
    assert result.returncode == 0, result.stdout + result.stderr
    (folder / "conf" / "sweep").mkdir(parents=True)
    for path in folder.glob("app_*.yaml"):
        path.rename(folder / "conf" / "sweep" / path.name)
    return folder, result.stdout


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    return _capture(tmp_path_factory.mktemp("replay"), PROGRAM)


def swept(captured, tmp_path, name: str, *overrides: str, options: str = ""):
    """The rows of a sweep of the captured file app_<name>.yaml, which says where its kernel is imported
    from: the program's folder (tests/fixtures/), allowed (the sweep runs in a folder of its own);
    `options`, the target's others (;grid=...)."""
    folder, _ = captured
    sweep = folder / "conf" / "sweep" / f"app_{name}.yaml"
    line = next(line for line in sweep.read_text().splitlines() if "spec:" in line)
    spec = json.loads(line.split(": ", 1)[1])
    result = run_sweep(tmp_path, f"hydra.searchpath=[file://{folder / 'conf'}]", f"+sweep=app_{name}",
                       f"kernel.spec='{spec};allow={PROGRAM.parent}{options}'", *overrides)
    assert f"its kernel is imported from {PROGRAM.parent}/" in result.stdout
    frame = ResultStore(tmp_path / "results.sqlite").load()
    return frame.assign(config=frame["config"].map(json.loads))


def test_the_capture_writes_a_sweep_file_per_replayable_kernel_and_says_why_not(captured):
    folder, printed = captured
    assert sorted(p.name for p in (folder / "conf" / "sweep").iterdir()) == [
        "app_axpy_inplace.yaml", "app_gather_rows.yaml", "app_scaled_row_sum.yaml"]
    assert ("not replayed: __main__.negate.<locals>.negate_local cannot be replayed: the kernel is defined "
            "inside a function") in printed
    text = (folder / "conf" / "sweep" / "app_axpy_inplace.yaml").read_text()
    assert f'spec: "replay:{folder}/app_launches.json#__main__.axpy_inplace"' in text
    assert "shapes: [[300], [100]]" in text and "calls: [2, 1]" in text  # n varies: the dim; calls counted
    # the program is in tests/fixtures/, outside the capture's folder: a sweep run there must allow it
    assert (f"  note: a sweep run here refuses it: its file {PROGRAM} is outside the working directory, "
            f"the import path and the installed packages: a replay imports from none other (to allow it, "
            f"append ;allow={PROGRAM.parent} to kernel.spec)") in printed


def test_a_kernel_writing_in_place_is_restored_before_each_checked_call(captured, tmp_path):
    rows = swept(captured, tmp_path, "axpy_inplace", *ONE_OPTION)
    triton_rows = rows[rows["provider"] == "triton"]
    # BLOCK 16..256 with the program's own grid (a lambda of BLOCK): every one correct, at both sizes. An
    # x not restored to its inputs would have been poisoned (NaN) and every row incorrect.
    assert sorted(triton_rows["status"]) == ["ok"] * 10
    assert {c["BLOCK"] for c in triton_rows["config"]} == {16, 32, 64, 128, 256}


def test_an_in_place_write_that_misses_elements_is_incorrect(captured, tmp_path):
    """The recorded grid of BLOCK=16 cut to one program: x is updated in its first 16 elements only."""
    folder, _ = captured
    launches = json.loads((folder / "app_launches.json").read_text())
    for launch in launches["functions"]["__main__.axpy_inplace"].values():
        for row in launch["replay"]["grid"]["table"]:
            if row[0] == [16]:
                row[1] = [1]
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(launches))
    replay = Replay(path, "__main__.axpy_inplace", None)
    inputs = replay.make_inputs((100,), torch.float32, 0, "cpu")
    references = replay.reference(*inputs)
    assert replay.written[replay.index((100,), "float32")] == {0: False}  # x read and written; y read only
    for block, problem in ((64, None), (16, "elements outside")):
        out = replay.output_like(inputs)
        replay.prepare_output(inputs, out)
        replay.launch(inputs, out, {"BLOCK": block, "num_warps": 1, "num_stages": 1})
        found = compare(out[0], references[0])
        assert (found is None) if problem is None else (problem in found), (block, found)
        assert compare(out[1], references[1]) is None  # y untouched


def test_launches_of_two_dtypes_at_one_shape_are_told_apart(captured, tmp_path):
    """The program's axpy launched in float16 too (its records copied): each dtype's inputs find their own
    record, and the reference runs in that dtype."""
    folder, _ = captured
    launches = json.loads((folder / "app_launches.json").read_text())
    function = launches["functions"]["__main__.axpy_inplace"]
    for key, launch in list(function.items()):
        half = json.loads(json.dumps(launch).replace('"float32"', '"float16"'))
        function[key + "half"] = half
    path = tmp_path / "two_dtypes.json"
    path.write_text(json.dumps(launches))
    replay = Replay(path, "__main__.axpy_inplace", None)
    assert replay.dims == ["n"] and replay.spec().dtypes == ("float16", "float32")
    for dtype in (torch.float16, torch.float32):
        inputs = replay.make_inputs((100,), dtype, 0, "cpu")
        x, y = inputs[0].double(), inputs[1].double()
        (after_x, _) = replay.reference(*inputs)
        assert after_x.dtype == torch.float64 and inputs[0].dtype == dtype
        torch.testing.assert_close(after_x, (x + 0.5 * y).to(dtype).double(), rtol=1e-3, atol=1e-3)


def test_a_kernel_reading_an_index_tensor_replays_its_values(captured, tmp_path):
    folder, _ = captured
    replay = Replay(folder / "app_launches.json", "__main__.gather_rows", None)
    assert replay.dims == ["out_ptr_shape0"]  # n_cols is 24 at both launches: the rows tell them apart
    recorded = [arg for name, arg in replay.records[0]["positional"] if name == "index_ptr"][0]
    inputs = replay.make_inputs((5,), torch.float32, 0, "cpu")
    assert inputs[2].tolist() == recorded["values"] and inputs[2].dtype == torch.int64
    # The program's grid is a fixed one (a row a program): its block is kept as launched...
    assert replay.constraints((5,), "float32", {"BLOCK_COLS": 32, "num_warps": 1, "num_stages": 1}) is None
    assert replay.constraints((5,), "float32", {"BLOCK_COLS": 64, "num_warps": 1, "num_stages": 1}) == (
        "the program launched a fixed grid (5,) at BLOCK_COLS=32: a grid computed from its blocks would not "
        "fit BLOCK_COLS=64 (kernel.spec's ;grid=EXPR gives the grid at every config)")
    # ...unless the target gives the grid: then blocks under the 24 columns leave some elements unwritten.
    rows = swept(captured, tmp_path, "gather_rows", *ONE_OPTION, options=";grid=out_ptr_shape0")
    status = {c["BLOCK_COLS"]: s for c, s in zip(rows["config"], rows["status"])}
    assert status == {8: "incorrect", 16: "incorrect", 32: "ok", 64: "ok", 128: "ok"}
    assert rows.loc[rows["status"] == "incorrect", "message"].str.contains("never written").all()


def test_an_autotuned_kernel_is_swept_over_its_configs(captured, tmp_path):
    rows = swept(captured, tmp_path, "scaled_row_sum")
    ok = rows[rows["status"] == "ok"]
    assert {tuple(sorted(c.items())) for c in ok["config"]} == {tuple(sorted(c.items())) for c in (
        {"BLOCK": 32, "num_warps": 1, "num_stages": 3}, {"BLOCK": 64, "num_warps": 2, "num_stages": 3},
        {"BLOCK": 128, "num_warps": 4, "num_stages": 3})}
    assert len(ok) == 6  # 3 configs at both row lengths
    pruned = rows[rows["status"] == "pruned"]
    assert len(pruned) and (pruned["message"] == "not one of the program's @triton.autotune configs").all()


def _record(**arg) -> dict:
    return {"qualname": "k", "constexprs": ["BLOCK"], "grid": {"fixed": [1]},
            "positional": [["x_ptr", {"kind": "tensor", "dtype": "float16", "shape": [4], "extent": 4,
                                      "nbytes": 8}], ["a", arg]], "keywords": []}


def test_what_cannot_be_replayed_is_named():
    assert why_not(_record(kind="int", value=7)) is None
    assert "looks like an address" in why_not(_record(kind="int", value=0x7F00_0000_0000))
    assert "tensor descriptor" in why_not(_record(kind="descriptor", value=None))
    assert "over the recorded bound" in why_not(_record(kind="tensor", dtype="int32", shape=[70000],
                                                        extent=70000, nbytes=280000))
    assert "is a dict" in why_not(_record(kind="dict", value=None))


def test_a_target_that_cannot_load_names_the_field(tmp_path):
    with pytest.raises(ConfigError, match="kernel.spec: .* does not exist"):
        Replay(tmp_path / "missing.json", "m.k", None)
    path = tmp_path / "launches.json"
    path.write_text(json.dumps({"functions": {}}))
    with pytest.raises(ConfigError, match="has no launch of m.k"):
        Replay(path, "m.k", None)
    for text, why in (("[1", "is not a launches file"), ("[]", "is not a launches file"),
                      ('{"functions": []}', "its functions are not objects of launches"),
                      ('{"functions": {"m.k": {"a": {"calls": "2", "replay": {}}}}}', "a launch is not"),
                      ('{"functions": {"m.k": {"a": {"calls": 2, "replay": []}}}}', "a launch is not")):
        path.write_text(text)
        with pytest.raises(ConfigError, match=f"kernel.spec: {re.escape(str(path))}:? {why}"):
            Replay(path, "m.k", None)


def test_integer_outputs_are_compared_exactly():
    ref = torch.tensor([3, 1, 2], dtype=torch.int32)
    assert compare(ref.clone(), ref) is None
    wrong = torch.tensor([3, 0, 2], dtype=torch.int32)
    assert "1 of 3 int32 elements differ, first at [1]" in compare(wrong, ref)


def test_a_flop_model_given_in_the_target_counts_the_dims(captured):
    folder, _ = captured
    assert parse_target("replay:a/b.json#m.k;flops=2*n") == (Path("a/b.json"), "m.k", "2*n", (), None)
    assert parse_target(f"replay:b.json#m.k;allow={folder};flops=n;grid=cdiv(n,B)") == (
        Path("b.json"), "m.k", "n", (str(folder),), "cdiv(n,B)")
    replay = Replay(folder / "app_launches.json", "__main__.axpy_inplace", "2*n")
    assert replay.flops((300,)) == 600.0 and replay.spec().export_key == {"n": "n"}
    assert Replay(folder / "app_launches.json", "__main__.axpy_inplace", None).flops((300,)) == 0.0
    model = Replay(folder / "app_launches.json", "__main__.axpy_inplace", "(n + 1) ** 2 // 3 % 7 - -n / 2")
    assert model.flops((300,)) == (301 ** 2 // 3 % 7) + 150.0
    for attack in ('__import__("os")', "n.real", "(lambda: 1)()", "[n][0]", "max(n, key=n)"):
        with pytest.raises(ConfigError, match=r"flops=.*: (only numbers, the names|__import__ is not cdiv)"):
            Replay(folder / "app_launches.json", "__main__.axpy_inplace", attack)
    for refused, why in (("9**9**9**9", r"9\*\*387420489 is beyond 1e\+30"), ("2**n", r"2\*\*100 is beyond"),
                         ("n*1e30", r"a term is 1e\+32, beyond 1e\+30"), ("m*n", "m is not one of n"),
                         ("n/0", "ZeroDivisionError"), ("(-n)**0.5", "not a real number")):
        with pytest.raises(ConfigError, match=rf"kernel.spec: flops='{re.escape(refused)}': .*{why}"):
            Replay(folder / "app_launches.json", "__main__.axpy_inplace", refused)  # at n=300 and n=100


def test_what_a_replay_gets_wrong_most_easily(tmp_path):
    """tests/fixtures/replay_edges.py: two arguments that are one tensor are refused (each would get its own
    memory); a block left at its default, an expanded (stride 0) bias and an optional tensor that is None
    at one launch replay, partial blocks found unwritten; an integer count the kernel adds to is
    restored before every call, the finalists' included (it would drift, and an offset would run off)."""
    folder, printed = _capture(tmp_path / "capture", REPO / "tests" / "fixtures" / "replay_edges.py")
    assert ("not replayed: __main__.reverse cannot be replayed: arguments src_ptr and dst_ptr overlap in "
            "memory") in printed
    statuses = {}
    # Each launched with a fixed grid: double's block is kept as launched (cdiv(n, 64)); the others' grids
    # are given by the target, so their blocks vary.
    grids = {"add_bias": ";grid=x_ptr_shape0", "maybe_add": ";grid=cdiv(n, BLOCK)"}
    for name in ("double", "add_bias", "maybe_add", "count_positive"):
        rows = swept((folder, printed), tmp_path / name, name, *ONE_OPTION, "finalists.top_k=2",
                     options=grids.get(name, ""))
        for config, status, phase in zip(rows["config"], rows["status"], rows["phase"]):
            block = config.get("BLOCK", config.get("BLOCK_COLS"))
            statuses.setdefault(name, {}).setdefault(block, set()).add((status, phase))
    ok = {("ok", "screen"), ("ok", "final")}
    assert {b: s <= ok for b, s in statuses["double"].items()} == {16: False, 32: False, 64: True, 128: False,
                                                                    256: False}
    assert {status for b, s in statuses["double"].items() if b != 64 for status, _ in s} == {"pruned"}
    assert {b for b, s in statuses["add_bias"].items() if s <= ok} == {64, 128, 256}  # 40 columns
    assert {b for b, s in statuses["maybe_add"].items() if s <= ok} == {16, 32, 64, 128, 256}
    assert all(s <= ok for s in statuses["count_positive"].values())
    assert ("ok", "final") in set().union(*statuses["count_positive"].values())


def test_two_functions_of_one_name_get_their_modules_names():
    functions = ["moda._fwd_kernel", "modb._fwd_kernel", "moda.other"]
    assert [kernel_name(f, functions) for f in functions] == ["moda_fwd_kernel", "modb_fwd_kernel", "other"]


def test_a_script_that_works_at_its_top_level_is_a_named_error(captured, tmp_path):
    """A replay imports the program's script without its `if __name__ == "__main__":` part; a script that
    parses its arguments (or exits) at its top level stops that import with a named error, not the sweep."""
    folder, _ = captured
    script = tmp_path / "toplevel.py"
    parser = ("import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('data')\n"
              "parser.parse_args()")
    script.write_text(PROGRAM.read_text().replace('if __name__ == "__main__":\n    main()', parser))
    launches = json.loads((folder / "app_launches.json").read_text())
    for launch in launches["functions"]["__main__.axpy_inplace"].values():
        launch["replay"]["file"] = str(script)
    path = tmp_path / "launches.json"
    path.write_text(json.dumps(launches).replace("__main__.axpy_inplace", "toplevel.axpy_inplace"))
    replay = Replay(path, "toplevel.axpy_inplace", None, allow=(str(tmp_path),))
    replay.spec()  # the sweep's process makes the spec without importing the program
    with pytest.raises(ConfigError, match="cannot import __main__ .*SystemExit: 2"):
        replay.kernel  # the script wants an argument: it sees none, as a sweep's worker gives none


def _pointed(captured, tmp_path: Path, **fields) -> Path:
    """The capture's launches of axpy_inplace with each record's `fields` replaced (a launches file from
    someone else), written to tmp_path/launches.json."""
    folder, _ = captured
    launches = json.loads((folder / "app_launches.json").read_text())
    for launch in launches["functions"]["__main__.axpy_inplace"].values():
        launch["replay"].update(fields)
    path = tmp_path / "launches.json"
    path.write_text(json.dumps(launches))
    return path


def _evil(tmp_path: Path) -> tuple[Path, Path]:
    """(a module elsewhere that defines the program's kernels and writes a marker when imported, the
    marker)."""
    marker = tmp_path / "imported"
    evil = tmp_path / "elsewhere" / "evilmod.py"
    evil.parent.mkdir()
    evil.write_text(f"open({str(marker)!r}, 'w').close()\n" + PROGRAM.read_text())
    return evil, marker


def test_a_launches_file_pointing_elsewhere_is_refused_and_nothing_is_imported(captured, tmp_path,
                                                                              monkeypatch):
    """A record's file or path0 outside the working directory's tree, the import path and the installed
    packages (as given, through `..`, or through a link) is refused in one line naming the launches file,
    the place and how to allow it; fields of other types too. The module is never imported."""
    evil, marker = _evil(tmp_path)
    monkeypatch.chdir((tmp_path / "work").mkdir() or tmp_path / "work")
    (tmp_path / "work" / "link").symlink_to(evil.parent)
    inside = tmp_path / "work" / "app.py"
    inside.write_text(PROGRAM.read_text())
    cases = [({"module": "evilmod", "file": str(evil)}, re.escape(f"its file {evil} ")),
             ({"module": "__main__", "file": os.path.relpath(evil)}, re.escape(f"({evil}) is outside")),
             ({"module": "__main__", "file": "link/../link/evilmod.py"}, "is outside"),
             ({"module": "evilmod", "file": str(inside), "path0": str(evil.parent)}, "its path0"),
             ({"module": "__main__", "file": 42}, "file is 42, not a path"),
             ({"module": "os;x", "file": str(inside)}, "not a module name"),
             ({"path0": ["x"]}, "path0 is \\['x'\\]")]
    for fields, why in cases:
        path = _pointed(captured, tmp_path, **fields)
        with pytest.raises(ConfigError, match=rf"^kernel.spec: {re.escape(str(path))}: .*{why}") as refused:
            Replay(path, "__main__.axpy_inplace", None).kernel
        assert "\n" not in str(refused.value)
    assert "allow=" in str(pytest.raises(ConfigError, Replay, _pointed(captured, tmp_path, file=str(evil)),
                                         "__main__.axpy_inplace", None).value)
    assert not marker.exists() and "evilmod" not in sys.modules


def test_a_sweep_refuses_a_kernel_from_elsewhere_unless_its_folder_is_allowed(captured, tmp_path):
    """End to end: refused in one line, exit 2, nothing imported; with ;allow=ITS_FOLDER the same file is
    swept, and the sweep says which file its kernel is imported from."""
    evil, marker = _evil(tmp_path)
    path = _pointed(captured, tmp_path, module="evilmod", file=str(evil), path0=str(evil.parent))
    target = f"replay:{path}#__main__.axpy_inplace"
    refused = run_sweep(tmp_path / "refused", "kernel=external", f"kernel.spec='{target}'", *ONE_OPTION,
                        check=False)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.strip().count("\n") == 0 and f";allow={evil.parent}" in refused.stderr
    assert str(path) in refused.stderr and not marker.exists()
    allowed = run_sweep(tmp_path / "allowed", "kernel=external",
                        f"kernel.spec='{target};allow={evil.parent}'", *ONE_OPTION)
    assert f"axpy_inplace: its kernel is imported from {evil}" in allowed.stdout and marker.exists()
    planned = run_sweep(tmp_path / "planned", "kernel=external",
                        f"kernel.spec='{target};allow={evil.parent}'", "dry_run=true")
    assert f"axpy_inplace: its kernel is imported from {evil}" in planned.stdout
    rows = ResultStore(tmp_path / "allowed" / "results.sqlite").load()
    assert set(rows.loc[rows["provider"] == "triton", "status"]) == {"ok"}


def test_a_flop_model_beyond_its_bound_stops_the_sweep_before_any_trial(captured, tmp_path):
    folder, _ = captured
    began = time.monotonic()
    result = run_sweep(tmp_path, "kernel=external", f"kernel.spec='replay:{folder}/app_launches.json"
                       f"#__main__.axpy_inplace;allow={PROGRAM.parent};flops=9**9**9**9'", check=False)
    assert result.returncode == 2 and time.monotonic() - began < 60, result.stdout + result.stderr
    assert result.stderr.strip() == ("error: kernel.spec: flops='9**9**9**9': 9**387420489 is beyond 1e+30 "
                                     "(a power's exponent at most 64)")
