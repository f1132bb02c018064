"""Every config composes against the schema; typos and wrong types fail at composition, naming the field."""
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError

from kernels import builtin
from runners.engine.schema import KernelConf, register_configs

CONF = Path(__file__).resolve().parent.parent / "conf"


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
        overrides += ["kernel.spec=tests.bad_kernels:WRONG_VALUES", "kernel.shapes=[8]",
                      "kernel.dtypes=[float32]"]
    cfg = compose("config", overrides=overrides)
    resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    assert resolved["kernel"]["name"] == kernel
    # every preset takes enough samples for the median's interval to exclude the extremes (k >= 1)
    assert resolved["timing"]["min_samples"] >= 10


@pytest.mark.parametrize("sweep", _options("sweep"))
def test_every_sweep_file_composes_and_plans_trials(sweep):
    from runners.engine.trials import load_spec, plan_trials

    cfg = compose("config", overrides=[f"+sweep={sweep}"])
    kernel = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)["kernel"]
    trials = plan_trials(load_spec(kernel["name"], kernel["spec"]), kernel, "cuda")
    assert any(t.pruned_reason is None for t in trials)  # its shapes (or the kernel's defaults) plan
    text = (CONF / "sweep" / f"{sweep}.yaml").read_text()
    assert text.startswith("# @package _global_") and "# to run:" in text


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
    ("timing.min_samples=3", "timing.min_samples: 3 must be >= 4"),
    ("timing.min_time_s=2", "timing.min_time_s: 2.0 is past max_time_s (1.0)"),
    ("finalists.min_samples=2", "finalists.min_samples: 2 must be >= 4"),
    ("finalists.repetitions=0", "finalists.repetitions: 0 must be >= 1"),
    ("finalists.top_k=-1", "finalists.top_k: -1 and tie_floor: 0.005 must be >= 0"),
    ("timing.warmup_s=-1", "timing.warmup_s: -1.0 must be >= 0"),
    ("export.tolerance=3", "export.tolerance: 3.0 must be a share in [0, 1)"),
    ("+export.key.softmax.n_cols=columns",
     "export.key.softmax: n_cols=columns: 'columns' is not a dim of softmax"),
])
def test_bad_values_fail_before_any_launch_naming_the_field(override, message):
    from runners.engine.trials import ConfigError
    from runners.engine.plan import validate

    cfg = compose("config", overrides=["backend=interpret", "kernel.shapes=[[4,100]]", override])
    with pytest.raises(ConfigError) as error:
        validate(cfg)
    assert message in str(error.value)
