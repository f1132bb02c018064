"""Every config composes against the schema; typos and wrong types fail at composition, naming the field."""
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError

from triton_sweep.kernels import builtin
from triton_sweep.model.schema import KernelConf, register_configs

CONF = Path(__file__).resolve().parents[2] / "conf"


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def _kernels() -> list[str]:
    """Every built-in kernel (found in kernels/, with or without a conf/kernel YAML), and external."""
    return sorted(set(builtin()) | set(_options("kernel")))


@pytest.fixture(scope="module", autouse=True)
def _hydra():
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield


@pytest.mark.parametrize("kernel", _kernels())
@pytest.mark.parametrize("timing", _options("timing"))
@pytest.mark.parametrize("logger", _options("logger"))
def test_every_group_option_composes(kernel, timing, logger):
    overrides = [f"kernel={kernel}", f"timing={timing}", f"logger={logger}"]
    if kernel == "external":
        overrides += ["kernel.spec=tests.fixtures.bad_kernels:WRONG_VALUES", "kernel.shapes=[8]",
                      "kernel.dtypes=[float32]"]
    cfg = compose("config", overrides=overrides)
    resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    assert resolved["kernel"]["name"] == kernel
    # every preset takes enough samples for the median's interval to exclude the extremes (k >= 1)
    assert resolved["timing"]["min_samples"] >= 10


@pytest.mark.parametrize("sweep", _options("sweep"))
def test_every_sweep_file_composes_and_plans_trials(sweep):
    from triton_sweep.model.spec_sources import load_spec
    from triton_sweep.model.space import plan_trials

    cfg = compose("config", overrides=[f"+sweep={sweep}"])
    kernel = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)["kernel"]
    trials = plan_trials(load_spec(kernel["name"], kernel["spec"]), kernel, "cuda")
    assert any(t.pruned_reason is None for t in trials)  # its shapes (or the kernel's defaults) plan
    text = (CONF / "sweep" / f"{sweep}.yaml").read_text()
    assert text.startswith("# @package _global_") and "# to run: triton-sweep " in text  # the console script


def _grid_dims() -> list[tuple[str, str]]:
    """(sweep file, dim) for every dim of a sweep file's kernel.grid."""
    return [(path.stem, dim) for path in sorted((CONF / "sweep").glob("*.yaml"))
            for dim in OmegaConf.load(path).get("kernel", {}).get("grid", {})]


@pytest.mark.parametrize("sweep, dim", _grid_dims())
def test_a_sweep_file_s_grid_dim_is_replaced_from_the_command_line(sweep, dim):
    """Hydra replaces a list by a list, but merges a form ({geom: ...}) into a form and refuses the one
    over the other: sweep files write each dim as a list, so `kernel.grid.<dim>=[...]` replaces it."""
    given = [{"geom": [100, 1000, 3], "multiple_of": 16}, 7]
    cfg = compose("config", overrides=[f"+sweep={sweep}",
                                       f"kernel.grid.{dim}=[{{geom:[100,1000,3],multiple_of:16}},7]"])
    assert OmegaConf.to_container(cfg.kernel.grid[dim]) == given


@pytest.mark.parametrize("override, field", [
    ("kernel.shapez=[1]", "kernel.shapez"),
    ("kernel.space.num_warp=4", "kernel.space.num_warp"),
    ("timing.rel_precison=0.01", "timing.rel_precison"),
    ("timing.max_noise=0.01", "timing.max_noise"),  # the old stopping rule's field is gone
])
def test_typo_fails_naming_the_field(override, field):
    with pytest.raises(ConfigCompositionException) as error:
        compose("config", overrides=[override])
    assert field in str(error.value.__cause__)


def test_typo_in_a_kernel_file_fails_naming_the_field(tmp_path):
    typo = tmp_path / "typo.yaml"
    typo.write_text("name: softmax\nshapes: [[4, 4]]\ndtypez: [float16]\n")
    with pytest.raises(ConfigKeyError, match="dtypez"):
        OmegaConf.merge(OmegaConf.structured(KernelConf), OmegaConf.load(typo))


def test_wrong_type_fails_naming_the_field():
    with pytest.raises(ConfigCompositionException) as error:
        compose("config", overrides=["timing.min_samples=many"])
    assert "min_samples" in str(error.value.__cause__)


@pytest.mark.parametrize("override, message", [
    ("timing.rel_precision=0", "timing.rel_precision: 0.0 must be in (0, 1)"),
    ("timing.min_samples=3", "timing.min_samples: 3 must be >= 6"),
    ("timing.min_time_s=2", "timing.min_time_s: 2.0 is past max_time_s (1.0)"),
    ("finalists.min_samples=2", "finalists.min_samples: 2 must be >= 6"),
    ("finalists.repetitions=0", "finalists.repetitions: 0 must be >= 1"),
    ("finalists.top_k=-1", "finalists.top_k: -1 and tie_floor: 0.005 must be >= 0"),
    ("timing.warmup_s=-1", "timing.warmup_s: -1.0 must be >= 0"),
])
def test_bad_values_fail_before_any_launch_naming_the_field(override, message):
    from triton_sweep.model.trial import ConfigError
    from triton_sweep.model.plan import validate

    cfg = compose("config", overrides=["backend=interpret", "kernel.shapes=[[4,100]]", override])
    with pytest.raises(ConfigError) as error:
        validate(cfg)
    assert message in str(error.value)


@pytest.mark.parametrize("override, message", [
    ("export.tolerance=3", "export.tolerance: 3.0 must be a share in [0, 1)"),
    ("+export.key.softmax.n_cols=columns",
     "export.key.softmax: n_cols=columns: 'columns' is not a dim of softmax"),
])
def test_bad_export_settings_fail_before_any_launch_naming_the_field(override, message):
    """The export's settings are its output's (runners/outputs/export_files.py), checked by the job
    right after validate; a sweep that writes no export does not need them right."""
    from triton_sweep.model.plan import validate
    from triton_sweep.model.trial import ConfigError
    from triton_sweep.outputs import Outputs

    cfg = compose("config", overrides=["backend=interpret", "kernel.shapes=[[4,100]]", override])
    spec = validate(cfg).spec
    with pytest.raises(ConfigError) as error:
        Outputs.from_config(cfg).check(cfg, spec)
    assert message in str(error.value)
    without = compose("config", overrides=["backend=interpret", "kernel.shapes=[[4,100]]", override,
                                           "output=[parquet,table]"])
    Outputs.from_config(without).check(without, spec)


def test_an_output_whose_class_cannot_be_found_names_its_field():
    """A conf/output/<name>.yaml of a user's naming a class that moved or never was: one line naming the
    field and the cause, not Hydra's pointer to HYDRA_FULL_ERROR."""
    from omegaconf import OmegaConf

    from triton_sweep.model.trial import ConfigError
    from triton_sweep.outputs import Outputs

    cfg = OmegaConf.create({"output": {"mine": {"_target_": "triton_sweep.results.outputs.table.Table"}}})
    with pytest.raises(ConfigError) as error:
        Outputs.from_config(cfg)
    assert str(error.value) == ("output.mine._target_: 'triton_sweep.results.outputs.table.Table' cannot be "
                                "made (ModuleNotFoundError: No module named 'triton_sweep.results')")


def test_a_bad_export_setting_stops_the_sweep_before_any_launch(tmp_path):
    from tests.conftest import run_sweep

    result = run_sweep(tmp_path, "kernel=softmax", "kernel.shapes=[[4,100]]",
                       "+export.key.softmax.n_cols=columns", check=False)
    assert result.returncode == 2
    assert "export.key.softmax: n_cols=columns: 'columns' is not a dim of softmax" in result.stderr
    assert "worker(s)" not in result.stdout  # the job stopped before it started the trial workers' work
    assert not (tmp_path / "results.sqlite").exists()


def _planned_shapes(overrides):
    from triton_sweep.model.spec_sources import load_spec
    from triton_sweep.model.space import plan_trials

    kernel = OmegaConf.to_container(compose("config", overrides=overrides), resolve=True)["kernel"]
    trials = plan_trials(load_spec(kernel["name"], kernel["spec"]), kernel, "interpret")
    return sorted({t.shape for t in trials})


@pytest.mark.parametrize("cols, expected", [
    ("[3000,1000,1000]", [1000, 3000]),  # a list: sorted, once each
    ("{pow2:[256,4096]}", [256, 512, 1024, 2048, 4096]),
    ("{pow2:[300,5000]}", [512, 1024, 2048, 4096]),  # the powers of two between the bounds
    ("{geom:[256,32768,8]}", [256, 512, 1024, 2048, 4096, 8192, 16384, 32768]),
    ("{geom:[1000,8000,4]}", [1000, 2000, 4000, 8000]),
    ("{range:[1000,3500,1000]}", [1000, 2000, 3000]),
    # 1000, 1587, 2520, 4000 each to its nearest multiple of 16 (a half to the even: 157.5 -> 158)
    ("{geom:[1000,4000,4],multiple_of:16}", [992, 1584, 2528, 4000]),
    ("[{geom:[1000,4000,4]},{geom:[1000,4000,4],multiple_of:16},300]",  # a union, each size once
     [300, 992, 1000, 1584, 1587, 2520, 2528, 4000]),
    ("{range:[1000,1040,12],multiple_of:16}", [992, 1008, 1024, 1040]),
])
def test_a_grid_crosses_its_dims_into_the_shapes(cols, expected):
    shapes = _planned_shapes(["kernel=softmax", "kernel.grid.rows=[8,16]", f"kernel.grid.cols={cols}",
                              "kernel.space.BLOCK_SIZE=[256,512,1024,2048,4096,8192,16384,32768]"])
    assert shapes == [(rows, c) for rows in (8, 16) for c in expected]


def test_a_plan_past_max_trials_is_refused_before_any_trial_is_built():
    from triton_sweep.model.spec_sources import load_spec
    from triton_sweep.model.space import plan_trials
    from triton_sweep.model.trial import ConfigError

    kernel = OmegaConf.to_container(compose("config", overrides=[
        "kernel=softmax", "kernel.shapes=[[8,1024],[8,2048]]", "kernel.grid.rows=[4]",
        "kernel.grid.cols=[512,100000]"]), resolve=True)["kernel"]
    spec = load_spec("softmax", None)
    planned = len(plan_trials(spec, kernel, "interpret"))  # the grid's 4x100000 dropped: nothing runs it
    counted = planned // 3 * 4  # the cap counts every shape of the grid, before dropping
    assert len(plan_trials(spec, kernel, "interpret", max_trials=counted)) == planned
    with pytest.raises(ConfigError, match=rf"^max_trials: the job plans {counted} trials \(4 shape\(s\) x 1 "
                                          rf"dtype\(s\) x .*, over max_trials={counted - 1}: narrow"):
        plan_trials(spec, kernel, "interpret", max_trials=counted - 1)


def test_a_grid_adds_to_the_listed_shapes_and_drops_what_nothing_can_run(capsys):
    shapes = _planned_shapes(["kernel=softmax", "kernel.shapes=[[4,100]]", "kernel.grid.rows=[8]",
                              "kernel.grid.cols={pow2:[1024,8192]}", "kernel.space.BLOCK_SIZE=[1024,2048]"])
    assert shapes == [(4, 100), (8, 1024), (8, 2048)]  # no block holds 4096 or 8192 columns
    assert "kernel.grid: 2 shape(s) no config of the space can run, left out: 8x4096, 8x8192" in (
        capsys.readouterr().out)


@pytest.mark.parametrize("overrides, message", [
    (["kernel.grid.cols=[1024]"], "kernel.grid.rows: give sizes for every dim of softmax (rows, cols; "
                                  "given: cols)"),
    (["kernel.grid.rows=[8]", "kernel.grid.cols={pow2:[4096,256]}"],
     "kernel.grid.cols.pow2: the bounds 4096 > 256 are the wrong way round"),
    (["kernel.grid.rows=[8]", "kernel.grid.cols={geom:[256,4096]}"],
     "kernel.grid.cols.geom: [256, 4096] must be 3 positive integers"),
    (["kernel.grid.rows=[8]", "kernel.grid.cols={geom:[256,4096,1]}"],
     "kernel.grid.cols.geom: 1 sizes: give at least 2"),
    (["kernel.grid.rows=[8]", "kernel.grid.cols={log:[256,4096]}"], "kernel.grid.cols: {'log': [256, 4096]} "
                                                                     "is not a list of sizes"),
    (["kernel.grid.rows=[0,8]", "kernel.grid.cols=[1024]"],
     "kernel.grid.rows: [0, 8] is not a list of sizes"),
    (["kernel.grid.rows=[8]", "kernel.grid.cols={pow2:[3000,4000]}"], "kernel.grid.cols.pow2: [3000, 4000] "
                                                                       "gives no size"),
    (["kernel.grid.rows=[8]", "kernel.grid.cols=[100000]"], "kernel.grid: no config of the space can run"),
    (["kernel.grid.rows=[8]", "kernel.grid.cols={geom:[256,4096,5],multiple_of:0}"],
     "kernel.grid.cols.multiple_of: 0 must be a positive integer"),
    (["kernel.grid.rows=[8]", "kernel.grid.cols={geom:[256,4096,5],pow2:[256,4096]}"],
     "kernel.grid.cols: {'geom': [256, 4096, 5], 'pow2': [256, 4096]} is not a list of sizes"),
    (["kernel.grid.rows=[8]", "kernel.grid.cols=[1024,{geom:[4096,256,3]}]"],
     "kernel.grid.cols[1].geom: the bounds 4096 > 256 are the wrong way round"),
    (["kernel.grid.rows=[8]", "kernel.grid.cols=[1024,{multiple_of:16}]"],
     "kernel.grid.cols[1]: {'multiple_of': 16} is not a list of sizes"),
])
def test_a_wrong_grid_fails_naming_the_field(overrides, message):
    from triton_sweep.model.trial import ConfigError

    with pytest.raises(ConfigError) as error:
        _planned_shapes(["kernel=softmax", *overrides])
    assert message in str(error.value)


def test_a_grid_dim_the_kernel_lacks_fails_at_composition():
    with pytest.raises(ConfigCompositionException) as error:
        compose("config", overrides=["kernel=softmax", "kernel.grid.colz=[1024]"])
    assert "kernel.grid.colz" in str(error.value.__cause__)


def _export_sweeps() -> dict[str, list[str]]:
    """sweeps/<name>_export.yaml -> the kernels its header says it serves ("for: a, b (...)" or "... .")."""
    import re

    served = {}
    for path in sorted((CONF / "sweep").glob("*_export.yaml")):
        header = " ".join(line.lstrip("# ").strip() for line in path.read_text().splitlines()
                          if line.startswith("#"))
        served[path.stem] = re.search(r"for: ([\w, ]+?)[.(]", header).group(1).replace(" ", "").split(",")
    return served


def test_every_built_in_kernel_has_an_export_grade_sweep():
    served = [kernel for kernels in _export_sweeps().values() for kernel in kernels]
    assert sorted(served) == sorted(builtin())


@pytest.mark.parametrize("sweep, kernel", [(sweep, kernel) for sweep, kernels in _export_sweeps().items()
                                           for kernel in kernels])
def test_export_sweeps_screen_a_grid_dense_along_the_export_key(sweep, kernel):
    """Each composes for every kernel it serves, screens with finalists in float16 and bfloat16, and plans
    at least 6 points of the export key (every key dim at 2 sizes or more)."""
    from triton_sweep.model.spec_sources import load_spec
    from triton_sweep.model.space import plan_trials

    cfg = compose("config", overrides=[f"+sweep={sweep}", f"kernel={kernel}"])
    screen = OmegaConf.load(CONF / "timing" / "screen.yaml")
    assert (cfg.kernel.name, cfg.timing.max_time_s) == (kernel, screen.max_time_s)
    assert cfg.finalists.top_k > 0
    resolved = OmegaConf.to_container(cfg, resolve=True)["kernel"]
    spec = load_spec(kernel, None)
    trials = [t for t in plan_trials(spec, resolved, "cuda") if t.pruned_reason is None]
    key_dims = [spec.dims.index(d) for d in (set(spec.export_key.values()) or spec.dims)]
    points = {tuple(t.shape[i] for i in key_dims) for t in trials}
    assert len(points) >= 6 and all(len({p[j] for p in points}) >= 2 for j in range(len(key_dims)))
    assert {"float16", "bfloat16"} <= {t.dtype for t in trials}


def test_a_kernel_spec_whose_name_cannot_name_a_file_is_refused_naming_it(monkeypatch):
    """A kernel's name names files (plots/heatmap_<kernel>.png, exports/<kernel>_configs.json): one that
    holds / or .. is refused where it enters, with the check sweep ids have."""
    import dataclasses
    import types

    from triton_sweep.model.spec_sources import load_spec
    from triton_sweep.model.trial import ConfigError

    module = types.ModuleType("evil_spec")
    module.SPEC = dataclasses.replace(load_spec("softmax", None), name="../../evil")
    monkeypatch.setitem(__import__("sys").modules, "evil_spec", module)
    with pytest.raises(ConfigError, match=r"kernel.spec: evil_spec:SPEC's name: '../../evil' cannot name"):
        load_spec("external", "evil_spec:SPEC")
