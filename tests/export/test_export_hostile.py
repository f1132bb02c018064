"""An export handed someone else's data — a store merged in, an existing JSON with another GPU's section —
either refuses it (exit 2, one line naming the file or store, the row's sweep and the field) or writes a
module whose data section is literals and triton.Config calls only, which runs nothing on import."""
import ast
import copy
import json
import subprocess
import sys

import pytest

from triton_sweep.export.command import main as export_main
from triton_sweep.export.render import lookup_code
from triton_sweep.model.trial import ConfigError, checked_name
from triton_sweep.store.result_store import ResultStore

GPU_ENV = {"backend": "cuda", "gpu_name": "NVIDIA H200", "driver_version": "580.159.04",
           "cuda_version": "13.0", "torch_version": "2.11.0", "triton_version": "3.6.0",
           "kernel_hash": "feedbeef0001", "timing_method": "cupti/read-flush"}
CONFIGS = [(256, 4, 9.0), (512, 4, 11.0), (512, 2, 10.0)]  # BLOCK_SIZE, num_warps, p50 at 8x200
# Text as an attacker or an odd machine writes it: each kind of quote closing a docstring or a string,
# backslashes (a Windows path), line breaks, NUL, non-ASCII and right-to-left marks, format braces, code.
TEXTS = ['"""\nimport os; os.system("touch {marker}")\n"""',
         "'''; __import__('os').system('touch {marker}') #", "C:\\Nightly\\xyz\\N{{BULLET}}\\u00e9",
         "a\nb\r\nc\x00d\x1b[2J", "GPU ünï ☃ \u202eevil", "{{}}%s{{0}}", "\"\\\"'; open('{marker}', 'w') #"]
TEXT_FIELDS = ["sweep_id", "gpu_name", "driver_version", "cuda_version", "torch_version", "triton_version",
               "kernel_hash", "timing_method"]


def _store(path, **changes):
    store = ResultStore(path)
    for index, (block, warps, p50) in enumerate(CONFIGS):
        config = {"BLOCK_SIZE": block, "num_warps": warps, "num_stages": 1}
        config.update(changes.pop("config", {}) if index == 0 else {})
        store.append({**GPU_ENV, "trial_key": f"k{index}", "sweep_id": "s1", "kernel": "softmax",
                      "provider": "triton", "shape": [8, 200], "dtype": "float16", "config": config,
                      "status": "ok", "phase": "screen", "p50_us": p50, "gbps": 100.0, "seed": 0,
                      "timestamp": "2026-11-22T00:00:00", **(changes if index == 0 else {})})
    store.close()
    return path


def _data_only(node: ast.AST) -> bool:
    """Literals, the containers of literals, triton.Config(...), CONFIGS[i] and set(): nothing else."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(map(_data_only, node.elts))
    if isinstance(node, ast.Dict):
        return all(k is not None and _data_only(k) for k in node.keys) and all(map(_data_only, node.values))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return isinstance(node.operand, ast.Constant)
    if isinstance(node, ast.Subscript):
        return (isinstance(node.value, ast.Name) and node.value.id == "CONFIGS"
                and isinstance(node.slice, ast.Constant) and type(node.slice.value) is int)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id == "set":
            return not node.args and not node.keywords
        return (isinstance(func, ast.Attribute) and func.attr == "Config" and isinstance(func.value, ast.Name)
                and func.value.id == "triton" and all(map(_data_only, node.args))
                and all(_data_only(k.value) for k in node.keywords))
    return False


def _assert_inert(module) -> None:
    """The module's data section (above the lookup code copied from runtime.py) is a docstring, `import
    triton` and assignments of data only."""
    text, runtime = module.read_text(), lookup_code()
    assert text.endswith(runtime)
    data = text[:-len(runtime)]
    body = ast.parse(data).body
    assert isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    assert isinstance(body[1], ast.Import) and [a.name for a in body[1].names] == ["triton"]
    for statement in body[2:]:
        assert isinstance(statement, ast.Assign), ast.dump(statement)
        assert all(isinstance(t, ast.Name) for t in statement.targets)
        assert _data_only(statement.value), ast.unparse(statement)


def _import_all(modules, cwd) -> dict:
    """Import every module in one fresh interpreter: the GPU names of each module's COVER."""
    probe = ("import importlib.util, json, sys\nfound = {}\n"
             f"for index, path in enumerate({[str(m) for m in modules]!r}):\n"
             "    spec = importlib.util.spec_from_file_location(f'm{index}', path)\n"
             "    module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
             "    found[path] = sorted(module.COVER)\n"
             "print(json.dumps(found))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=cwd,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def _one_error_line(text: str, *words) -> None:
    lines = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in text, text
    assert all(word in lines[0] for word in words), (lines[0], words)


def _folder_name(text: str) -> bool:
    try:
        return bool(checked_name(text, "sweep_id"))
    except ConfigError:
        return False


def test_hostile_text_in_a_store_gives_inert_modules_that_keep_it_exactly(tmp_path, capsys):
    marker = tmp_path / "RAN"
    modules, expected = [], {}
    for n, (field, text) in enumerate((f, t) for f in TEXT_FIELDS for t in TEXTS):
        value = text.format(marker=marker)
        out = tmp_path / f"out{n}"
        store = _store(tmp_path / f"store{n}.sqlite", **{field: value})
        if field == "sweep_id" and not _folder_name(value):  # it names folders: refused, as by a sweep
            assert export_main(["--store", str(store), "--kernel", "softmax", "--out-dir", str(out)]) == 2
            _one_error_line(capsys.readouterr().err, "row 1 of sweep", "sweep_id: ", "cannot name a folder")
            continue
        # The hostile row is one of three: with a field of the environment changed, it is a section (or
        # an environment) of its own, exported beside the others' or in their place.
        assert export_main(["--store", str(store), "--kernel", "softmax", "--out-dir", str(out)]) == 0, field
        module = out / "softmax_configs.py"
        _assert_inert(module)
        modules.append(module)
        expected[str(module)] = sorted({GPU_ENV["gpu_name"], value if field == "gpu_name" else "NVIDIA H200"})
    capsys.readouterr()
    assert _import_all(modules, tmp_path) == expected  # GPU names kept exactly, as the lookup needs them
    assert not marker.exists()


@pytest.mark.parametrize("config, words", [
    ({"num_warps": "__import__('os').system('true')"}, "config.num_warps"),
    ({"num_warps": 2 ** 40}, "config.num_warps"),
    ({"num_warps": 3}, "num_warps 3 is not one of"),
    ({"num_stages": 1.5}, "config.num_stages"),
    ({"BLOCK_SIZE": True}, "config.BLOCK_SIZE"),
    ({"BLOCK_SIZE=1) or print(1) #": 1}, "is not a Python name"),
])
def test_a_store_row_of_the_wrong_type_is_refused_naming_store_row_sweep_and_field(tmp_path, capsys, config,
                                                                                   words):
    store = _store(tmp_path / "results.sqlite", config=config)
    out = tmp_path / "out"
    assert export_main(["--store", str(store), "--kernel", "softmax", "--out-dir", str(out)]) == 2
    _one_error_line(capsys.readouterr().err, str(store), "row 1 of sweep 's1'", words)
    assert not out.exists()  # nothing written


@pytest.mark.parametrize("changes, words", [({"p50_us": float("inf")}, "p50_us"),
                                            ({"shape": ["8", 200]}, "shape.0"),
                                            ({"dtype": "float16; rm"}, "dtype")])
def test_a_store_figure_shape_or_dtype_of_the_wrong_kind_is_refused(tmp_path, capsys, changes, words):
    store = _store(tmp_path / "results.sqlite", **changes)
    assert export_main(["--store", str(store), "--kernel", "softmax", "--out-dir", str(tmp_path / "o")]) == 2
    _one_error_line(capsys.readouterr().err, str(store), words)


def _other_gpu(json_path, change):
    """The export's JSON with a section of another GPU, a copy of its own changed by `change`."""
    data = json.loads(json_path.read_text())
    section = copy.deepcopy(data["gpus"]["NVIDIA H200"]["3.6.0"])
    gpu, version = change(section)
    data["gpus"][gpu] = {version: section}
    json_path.write_text(json.dumps(data))


def _set(path, value):
    def change(section):
        where = section
        for key in path[:-1]:
            where = where[key]
        where[path[-1]] = value
        return "NVIDIA B200", "3.5.0"
    return change


ENTRY = ["dtypes", "float16", "configs", 0]
BEST = ["dtypes", "float16", "best_by_shape", 0]
REFUSED = {  # a change to the other GPU's section -> the field the refusal names
    "num_warps code": (_set(ENTRY + ["config", "num_warps"], "__import__('os').system('true')"), "num_warps"),
    "num_stages huge": (_set(BEST + ["config", "num_stages"], 10 ** 30), "num_stages"),
    "meta-parameter code": (_set(ENTRY + ["config"], {"X=1)#": 1, "num_warps": 4}), "is not a Python name"),
    "p50 NaN": (_set(ENTRY + ["ok_at", 0, "p50_us"], float("nan")), "p50_us"),
    "p50 text": (_set(BEST + ["p50_us"], "9.0"), "p50_us"),
    "shape text": (_set(ENTRY + ["ok_at", 0, "shape"], [8, "200)]; import os #"]), "shape.1"),
    "sweep ids not text": (_set(["sweep_ids"], [1]), "sweep_ids.0"),
    "trials code": (_set(["trials"], "__import__('os')"), "trials"),
    "tolerance 1e9": (_set(["tolerance"], 1e9), "tolerance"),
    "aligned_apart code": (_set(["dtypes", "float16", "leave_one_out", "aligned_apart"], "x"),
                           "aligned_apart"),
    "dtype code": (lambda s: (s["dtypes"].update({"f)#": s["dtypes"].pop("float16")}), ("B200", "1"))[1],
                   "is not a Python name"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_an_existing_json_of_the_wrong_type_is_refused_before_anything_is_written(tmp_path, capsys, case):
    store = _store(tmp_path / "results.sqlite")
    out = tmp_path / "out"
    assert export_main(["--store", str(store), "--kernel", "softmax", "--out-dir", str(out)]) == 0
    json_path, module = out / "softmax_configs.json", out / "softmax_configs.py"
    change, words = REFUSED[case]
    _other_gpu(json_path, change)
    before = (json_path.read_bytes(), module.read_bytes())
    capsys.readouterr()
    assert export_main(["--store", str(store), "--kernel", "softmax", "--out-dir", str(out)]) == 2
    _one_error_line(capsys.readouterr().err, f"cannot merge into {json_path}", words, "--no-merge")
    assert (json_path.read_bytes(), module.read_bytes()) == before


def test_hostile_text_in_an_existing_json_is_kept_exactly_in_an_inert_module(tmp_path, capsys):
    marker = tmp_path / "RAN"
    store = _store(tmp_path / "results.sqlite")
    modules, expected = [], {}
    for n, text in enumerate(TEXTS):
        value = text.format(marker=marker)
        out = tmp_path / f"out{n}"
        assert export_main(["--store", str(store), "--kernel", "softmax", "--out-dir", str(out)]) == 0

        def change(section):
            section.update(sweep_ids=[value], exported_at=value, driver_version=value, kernel_hash=value)
            return value, value  # the GPU's name and the Triton version too
        _other_gpu(out / "softmax_configs.json", change)
        assert export_main(["--store", str(store), "--kernel", "softmax", "--out-dir", str(out)]) == 0
        _assert_inert(out / "softmax_configs.py")
        modules.append(out / "softmax_configs.py")
        expected[str(out / "softmax_configs.py")] = sorted({"NVIDIA H200", value})
    capsys.readouterr()
    assert _import_all(modules, tmp_path) == expected
    assert not marker.exists()


@pytest.mark.parametrize("changes, words", [({"kernel": "../../softmax"}, "kernel: "),
                                            ({"samples_us": b"\x01\x02\x03"}, "samples_us: a blob of 3")])
def test_a_kernel_name_that_is_a_path_or_a_broken_samples_blob_is_refused(tmp_path, capsys, monkeypatch,
                                                                          changes, words):
    """Rows merged in from someone else's store, exported with every kernel (no --kernel): exit 2, one
    line naming the first row and the field, nothing written anywhere."""
    store = _store(tmp_path / "results.sqlite")
    db = __import__("sqlite3").connect(store)
    for column, value in changes.items():
        db.execute(f"UPDATE trials SET {column} = ?", (value,))  # every row: the kernel has no sound one
    db.commit()
    db.close()
    (tmp_path / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a" / "b")
    assert export_main(["--store", str(store)]) == 2
    out = capsys.readouterr()
    (line,) = out.err.splitlines()
    assert str(store) in line and "row 1" in line and words in line and out.out == ""
    assert [p for p in tmp_path.rglob("*") if p.is_file() and not p.name.startswith("results.sqlite")] == []
