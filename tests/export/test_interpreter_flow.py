"""The whole flow on a CPU, on the interpreter: a sweep (no torch.compile baseline, nothing left in
$TMPDIR), its export refused without --interpreter and labelled the interpreter's with it, the module
imported in another directory by the README's consumer code on CPU tensors (checked against the
reference, the interpreter's section picked by itself and never outside the interpreter), and
triton-sweep-revalidate of that export on the interpreter, which writes the interpreter's section again."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from triton_sweep.export import runtime
from triton_sweep.measure.device import INTERPRETER_DEVICE_NAME
from tests.conftest import REPO, run_command, run_sweep, user_env

# Row lengths around the README's 3000 columns, two rows each: the interpreter runs a program a row.
SWEEP = ["kernel=softmax", "kernel.shapes=[[2,2048],[2,4096]]", "kernel.dtypes=[float16]",
         "kernel.space.num_warps=[1,4]", "finalists.top_k=2", "finalists.min_samples=6",
         "finalists.min_time_s=0", "finalists.max_time_s=0.2", "finalists.repetitions=3", "sweep_id=cpu"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """(work directory, the sweep's stdout): an interpreter sweep with the kernel's default baselines and
    a $TMPDIR of its own, which it must leave empty."""
    work = tmp_path_factory.mktemp("flow")
    scratch = work / "tmp"
    scratch.mkdir()
    result = run_sweep(work, *SWEEP, env=user_env(TMPDIR=str(scratch)))
    return work, result.stdout


def _export(work, *flags):
    return run_command(["triton_sweep.export", "--store", work / "results.sqlite", "--kernel", "softmax",
                        "--out-dir", work / "exports", *flags], cwd=work)


@pytest.fixture(scope="module")
def exported(swept):
    work, _ = swept
    result = _export(work, "--interpreter")
    assert result.returncode == 0, result.stdout + result.stderr
    return work / "exports"


def test_the_sweep_leaves_torch_compile_out_and_nothing_in_tmpdir(swept):
    work, out = swept
    assert "kernel.baselines: compile (torch.compile) left out on the interpreter" in out
    assert re.search(r"\d+ baselines \(4 ok\)", out), out  # eager and torch at two shapes
    assert list((work / "tmp").iterdir()) == []
    # the end of the sweep refuses to export, naming the flag and the config key
    assert "export skipped: refusing to export 'softmax'" in out and "export.interpreter=true" in out


def test_interpreter_rows_are_exported_only_when_asked_and_labelled(swept, exported):
    work, _ = swept
    refused = _export(work, "--out-dir", work / "refused")
    assert refused.returncode == 2 and not (work / "refused").exists()
    (line,) = refused.stderr.strip().splitlines()
    assert "interpreter timings" in line and "triton-sweep-export --interpreter" in line
    data = json.loads((exported / "softmax_configs.json").read_text())
    assert list(data["gpus"]) == [INTERPRETER_DEVICE_NAME] == [runtime.INTERPRETER]
    (section,) = data["gpus"][INTERPRETER_DEVICE_NAME].values()
    assert section["backend"] == "interpret" and section["timing_method"] == "wall"
    module = (exported / "softmax_configs.py").read_text()
    assert f"- {INTERPRETER_DEVICE_NAME}, Triton {section['triton_version']}: INTERPRETER TIMINGS" in module
    assert f'INTERPRETER = "{INTERPRETER_DEVICE_NAME}"' in module


def _readme_consumer_code() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("## Use the tuned configs in another repo", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return code


# After the README's code: both of its launches again into outputs poisoned with NaN, against float64.
CHECK = """
reference = torch.softmax(x.double(), dim=1)
tuned = torch.full_like(x, float("nan"))
softmax_kernel[(x.shape[0],)](tuned, x, x.shape[1], x.stride(0), tuned.stride(0))
looked_up = torch.full_like(x, float("nan"))
softmax_kernel.fn[(x.shape[0],)](looked_up, x, x.shape[1], x.stride(0), looked_up.stride(0),
                                 num_warps=config.num_warps, num_stages=config.num_stages, **config.kwargs)
for out in (tuned, looked_up):
    assert x.device.type == "cpu" and (out.double() - reference).abs().max() < 1e-3
best = softmax_kernel.best_config
print("PICKED", config.kwargs["BLOCK_SIZE"], config.num_warps, best.kwargs["BLOCK_SIZE"], best.num_warps)
"""


def test_the_readme_consumer_code_runs_on_cpu_tensors_in_another_directory(exported, tmp_path):
    repo = tmp_path / "my-repo"  # another repository: the module copied next to its code, nothing else
    repo.mkdir()
    shutil.copy(exported / "softmax_configs.py", repo)
    (repo / "use_softmax.py").write_text(_readme_consumer_code() + CHECK)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_EXPORT_GPU", "PYTHONPATH")}
    result = subprocess.run([sys.executable, "use_softmax.py"], cwd=repo, capture_output=True, text=True,
                            env={**env, "TRITON_INTERPRET": "1"}, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    picked = [int(n) for n in result.stdout.split("PICKED", 1)[1].split()]
    data = json.loads((exported / "softmax_configs.json").read_text())
    (section,) = data["gpus"][INTERPRETER_DEVICE_NAME].values()
    of_dtype = section["dtypes"]["float16"]
    block_warps = lambda config: (config["BLOCK_SIZE"], config["num_warps"])
    listed = {block_warps(item["config"]) for item in of_dtype["configs"]}
    winners = {block_warps(best["config"]) for best in of_dtype["best_by_shape"]}
    # autotune's pick of CONFIGS (the list), config_for's of the list or a measured shape's winner; each
    # with a block that holds the 3000 columns
    assert tuple(picked[2:]) in listed and tuple(picked[:2]) in listed | winners, (picked, listed, winners)
    assert min(picked[0], picked[2]) >= 3000


def test_the_interpreter_section_is_never_taken_outside_the_interpreter(exported, monkeypatch):
    namespace = {}
    path = exported / "softmax_configs.py"
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    monkeypatch.delenv("TRITON_EXPORT_GPU", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # kernels compiled for a device: no CUDA one here
    with pytest.raises(namespace["ExportLookupError"], match="no CUDA device to name"):
        namespace["config_for"]("float16", n_cols=2048)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert namespace["config_for"]("float16", n_cols=2048).kwargs["BLOCK_SIZE"] >= 2048
    assert namespace["gpu_name"]() == INTERPRETER_DEVICE_NAME


def _scaled(path, factor: float) -> None:
    """The export's recorded figures times `factor` (a change between the export and now)."""
    data = json.loads(path.read_text())
    for versions in data["gpus"].values():
        for section in versions.values():
            for lists in section["dtypes"].values():
                figures = [at for item in lists["configs"] for at in item["ok_at"]] + lists["best_by_shape"]
                for entry in figures:
                    for name in ("p50_us", "fastest_p50_us", "list_p50_us"):
                        if name in entry:
                            entry[name] *= factor
                    if "rep_p50s_us" in entry:
                        entry["rep_p50s_us"] = [m * factor for m in entry["rep_p50s_us"]]
    path.write_text(json.dumps(data))


def test_revalidate_re_times_the_interpreter_section_and_writes_it_again(exported, tmp_path):
    path = tmp_path / "softmax_configs.json"
    shutil.copy(exported / "softmax_configs.json", path)
    _scaled(path, 0.25)  # recorded at a quarter of its time: every shape now looks 4x as slow
    result = run_command(["triton_sweep.revalidate", path, "--backend", "interpret", "--store",
                          tmp_path / "reval.sqlite"], cwd=tmp_path, env=user_env(TRITON_INTERPRET="1"))
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert f"softmax on {INTERPRETER_DEVICE_NAME}, Triton " in out and "(exact)" in out
    assert "2 to re-screen" in out and "re-screened 2 float16 shape(s)" in out
    assert f"exported: {path}" in out and "refusing" not in out
    data = json.loads(path.read_text())
    (section,) = data["gpus"][INTERPRETER_DEVICE_NAME].values()
    assert section["backend"] == "interpret"
    assert any(sweep.endswith("-screen-float16") for sweep in section["sweep_ids"]), section["sweep_ids"]
    assert "INTERPRETER TIMINGS" in (tmp_path / "softmax_configs.py").read_text()
