"""Search strategies as plug-ins: the built-in ones hand out the trials the single Search class
they replaced did, a strategy from outside the project runs a sweep, and a bad target or
setting stops the job before any launch, naming the field."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from triton_sweep.model.search.grid import Grid
from triton_sweep.model.search.optuna import Optuna
from triton_sweep.model.search.random import Random
from triton_sweep.model.schema import register_configs
from triton_sweep.model.spec_sources import load_spec
from triton_sweep.model.trial import ConfigError
from triton_sweep.model.space import plan_trials
from triton_sweep.store.result_store import ResultStore
from tests.conftest import REPO, run_sweep

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.fixture
def hydra_conf():
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield


def _matmul_trials():
    """Two groups: at M=N=16 BLOCK_M or BLOCK_N 64 is pruned (8 of 12 configs), at 96x200 none is."""
    space = {"BLOCK_M": [16, 32, 64], "BLOCK_N": [32, 64], "BLOCK_K": [32], "GROUP_M": [8], "num_warps": [4],
             "num_stages": [2, 3]}
    kernel = {"shapes": [[16, 16, 64], [96, 200, 64]], "dtypes": ["float16"], "space": space}
    return plan_trials(load_spec("matmul", None), kernel, "cuda")


def _rounds(search) -> list[list[tuple]]:
    """Every batch the search hands out, each trial as (M, BLOCK_M, BLOCK_N, num_stages) or (M, baseline),
    told a p50 that grows with BLOCK_M."""
    rounds = []
    while batch := search.ask():
        rounds.append([(t.shape[0], t.config["BLOCK_M"], t.config["BLOCK_N"], t.config["num_stages"])
                       if t.provider == "triton" else (t.shape[0], t.provider) for t in batch])
        for trial in batch:
            config = trial.config
            p50 = config.get("BLOCK_M", 1) * 1000 + config.get("BLOCK_N", 0) + config.get("num_stages", 0)
            search.tell(trial, {"status": "ok", "p50_us": float(p50)})
    return rounds


BASELINES = [(16, "torch"), (96, "torch")]
# Recorded from the single Search class (one class, method="grid" | "random" | "optuna") before the
# strategies were split into modules; optuna's with Optuna 5.0.0, whose TPE sampler they depend on.
BEFORE = [
    (Grid, 2, 0, 8, [[(16, 16, 64, 2), (16, 16, 64, 3), (16, 32, 64, 2), (16, 32, 64, 3), (16, 64, 32, 2),
                      (16, 64, 32, 3), (16, 64, 64, 2), (16, 64, 64, 3), (16, 16, 32, 2), (16, 16, 32, 3),
                      (96, 16, 32, 2), (96, 16, 32, 3), *BASELINES]]),
    (Random, 5, 1, 8, [[(16, 16, 32, 2), (16, 32, 32, 2), (16, 16, 32, 3), (16, 32, 32, 3), (96, 16, 64, 2),
                        (96, 32, 32, 3), (96, 16, 64, 3), (96, 32, 64, 2), (96, 64, 32, 3), *BASELINES]]),
    (Optuna, 6, 0, 4, [[*BASELINES, (16, 32, 32, 2), (16, 32, 32, 3), (16, 16, 32, 2), (16, 16, 32, 3),
                        (96, 32, 32, 3), (96, 64, 64, 3), (96, 16, 64, 2), (96, 32, 64, 3)],
                       [(96, 64, 64, 2), (96, 32, 64, 2)]]),
    (Optuna, None, 3, 5, [[*BASELINES, (16, 16, 32, 2), (16, 32, 32, 3), (16, 32, 32, 2), (16, 16, 32, 3),
                           (96, 64, 32, 3), (96, 32, 32, 2), (96, 16, 32, 2), (96, 16, 32, 3),
                           (96, 64, 64, 3)],
                          [(96, 16, 64, 3), (96, 16, 64, 2), (96, 64, 32, 2), (96, 64, 64, 2),
                           (96, 32, 64, 2)],
                          [(96, 32, 64, 3), (96, 32, 32, 3)]]),
]


@pytest.mark.parametrize("strategy, budget, seed, batch, rounds", BEFORE,
                         ids=[f"{s.__name__}-budget{b}-seed{seed}" for s, b, seed, _, _ in BEFORE])
def test_built_in_strategies_hand_out_what_they_did_before(strategy, budget, seed, batch, rounds):
    assert _rounds(strategy(_matmul_trials(), budget_trials=budget, seed=seed, batch=batch)) == rounds


def test_a_new_strategy_is_a_class_and_a_config_node(tmp_path):
    """tests/fixtures/search_plugin.py is a strategy the project does not know, with a setting of its own:
    named on the command line (as a conf/search/<name>.yaml would name it), it decides which configs are
    measured. At 200 elements BLOCK_SIZE 2048 is pruned; of the 6 others, every second one from the last.
    The end table and the export say so: 3 configs measured of the 6 that pass the constraints."""
    result = run_sweep(tmp_path, "kernel=vector_add", "kernel.shapes=[200]",
                       "kernel.space.BLOCK_SIZE=[256,512,1024,2048]", "kernel.space.num_warps=[2,4]",
                       "kernel.baselines=[]", "sweep_id=backwards", "export.interpreter=true",
                       "search._target_=tests.fixtures.search_plugin.Backwards", "+search.settings.step=2")
    store = ResultStore(tmp_path / "results.sqlite")
    rows = store.load(sweep_id="backwards").sort_values("id")
    store.close()
    configs = [json.loads(config) for config in rows["config"]]
    measured = [(config["BLOCK_SIZE"], config["num_warps"]) for config in configs]
    assert measured == [(1024, 4), (512, 4), (256, 4)]  # in the order the strategy handed them out
    assert set(rows["status"]) == {"ok"}  # the pruned configs were never handed out, so never recorded
    assert "Backwards search)" in result.stdout  # the start line names the strategy
    header, row = [line.split() for line in result.stdout.splitlines() if "best config" in line
                   or line.startswith("vector_add   float16")]
    assert header[3] == "measured" and row[3] == "3/6"
    module = (tmp_path / "exports" / "vector_add_configs.py").read_text()
    assert "; 3 of 6 configs measured" in module


def test_a_bad_target_stops_the_sweep_before_any_launch(tmp_path):
    result = run_sweep(tmp_path, "kernel=vector_add", "kernel.shapes=[200]",
                       "search._target_=triton_sweep.model.search.grid.Gird", check=False)
    assert result.returncode == 2
    assert "search._target_: 'triton_sweep.model.search.grid.Gird' cannot be imported" in result.stderr
    assert "worker(s)" not in result.stdout  # no worker was started, so nothing was launched
    assert not (tmp_path / "results.sqlite").exists()


@pytest.mark.parametrize("overrides, message", [
    (["search._target_=triton_sweep.model.trial.Trial"],
     "search._target_: 'triton_sweep.model.trial.Trial' is not a Strategy"),
    (["search._target_=Grid"], "search._target_: 'Grid' cannot be imported"),
    (["search=random", "search.budget_trials=0"], "search.budget_trials: 0 must be >= 1"),
    (["search=optuna", "search.batch=0"], "search.batch: 0 must be >= 1"),
    (["search=random", "+search.settings.step=2"], "search.settings.step: not a setting of Random"),
    (["search._target_=tests.fixtures.search_plugin.Backwards", "+search.settings.step=0"],
     "search.settings.step: 0 must be >= 1"),
])
def test_bad_search_fails_before_any_launch_naming_the_field(hydra_conf, overrides, message):
    from triton_sweep.model.plan import validate

    cfg = compose("config", overrides=["backend=interpret", "kernel.shapes=[[4,100]]", *overrides])
    with pytest.raises(ConfigError) as error:
        validate(cfg)
    assert message in str(error.value)


def test_a_typo_in_search_fails_at_composition(hydra_conf):
    with pytest.raises(ConfigCompositionException) as error:
        compose("config", overrides=["search=optuna", "search.budget_trails=4"])
    assert "search.budget_trails" in str(error.value.__cause__)


def test_the_search_imports_no_optuna_unless_chosen():
    """The sweep imports the engine before torch is loaded; Optuna's import is paid by its strategy alone."""
    probe = ("import sys; from triton_sweep.model.search import grid, random; "
             "print(sorted(name for name in ('torch', 'optuna') if name in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True,
                            check=True, timeout=120)
    assert result.stdout.strip() == "[]"
