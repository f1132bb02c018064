"""Structured schemas for conf/: a misspelled key or a wrong type fails at composition, naming the field.

`shapes`, `dtypes` and the `space` values are typed Any on purpose: each may be one value (one job of a
Hydra multirun, `-m kernel.space.num_warps=4,8`) or a list (expanded inside the job,
`kernel.space.num_warps=[4,8]`); runners/engine/trials.py validates them with messages naming the field.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


class Backend(str, Enum):
    """str-valued, so `cfg.backend == "cuda"` holds and it pickles and prints as its name."""

    cuda = "cuda"  # compiled for and timed on the GPU
    interpret = "interpret"  # the Triton interpreter on the CPU; timings never exported


class SearchMethod(str, Enum):
    grid = "grid"  # every config of the space
    random = "random"  # a seeded random sample of the configs that pass the constraints
    optuna = "optuna"  # Optuna's TPE sampler, ask-and-tell inside the job (runners/engine/search.py says why)


class LoggerMode(str, Enum):
    offline = "offline"  # no account, no network; `wandb sync` later
    online = "online"
    disabled = "disabled"


@dataclass
class KernelConf:
    name: str = MISSING  # a kernel of kernels/__init__.py BUILTIN, or "external" with `spec`
    spec: Optional[str] = None  # "pkg.module:ATTR" of a KernelSpec living in another package
    shapes: Any = MISSING  # one shape or a list of shapes; a shape is an int (1-D) or a list of ints
    dtypes: Any = MISSING  # one dtype name or a list: float16 | bfloat16 | float32
    space: Dict[str, Any] = field(default_factory=dict)  # overrides of the kernel's default space
    baselines: Any = None  # None: all the kernel declares; [] none; or a list of names


@dataclass
class TimingConf:
    # The stopping rule (runners/measure/timing.py): at least min_samples and min_time_s of sampling, then
    # stop once the median is known to rel_precision (half-width of its 95% confidence interval, relative), or
    # at max_time_s whatever the precision. These defaults are conf/timing/default.yaml's; the presets set
    # every field.
    min_samples: int = 20
    min_time_s: float = 0.01
    rel_precision: float = 0.005
    max_time_s: float = 1.0
    warmup_s: float = 0.02
    # A sample is flagged throttled when the SM clock read around it is below this share of max clock.
    throttle_ratio: float = 0.9
    # Blocks of samples, each on buffers placed anew in device memory: their spread is the noise a second
    # run meets (runners/measure/timing.py). 1 here: the finalists, which decide, take several.
    repetitions: int = 1


@dataclass
class LoggerConf:
    mode: LoggerMode = LoggerMode.offline
    project: str = "triton-sweep"
    entity: Optional[str] = None
    dir: str = "outputs"  # W&B writes <dir>/wandb/


@dataclass
class SearchConf:
    method: SearchMethod = SearchMethod.grid
    budget_trials: Optional[int] = None  # configs measured per (shape, dtype); None: no limit
    budget_s: Optional[float] = None  # stop handing out new trials after this many seconds; None: no limit
    seed: int = 0  # random order / Optuna sampler seed (the inputs use the top-level seed)
    batch: int = 8  # optuna: configs asked per round, compiled and timed in parallel


@dataclass
class CompileConf:
    # compile processes; None: one per CPU core; 0: no pool (the GPU worker compiles)
    workers: Optional[int] = None
    timeout_s: float = 60.0  # per config; past it the compiler's whole process group is killed


@dataclass
class FinalistsConf:
    # The top_k configs of each (shape, dtype) are re-timed round-robin on one GPU until the stopping
    # rule of the trials holds for each (at least min_rounds and min_time_s, then every median known to
    # rel_precision, or max_time_s); ties and the choice follow runners/engine/finalists.py. top_k 0 or 1:
    # no finalists.
    top_k: int = 8
    min_rounds: int = 20
    min_time_s: float = 0.02
    rel_precision: float = 0.005
    max_time_s: float = 0.5
    tie_floor: float = 0.005  # differences below this share of the fastest p50 are ties
    # Blocks of rounds, each on buffers placed anew: the winners' and baselines' between-run noise, which
    # runners/compare.py judges a change by (the blocks share the rule's samples and seconds).
    repetitions: int = 5


@dataclass
class ExportConf:
    # A covering set per (kernel, GPU, dtype): at every measured shape the fastest config of the list
    # that was ok there is within this share of the fastest measured there (runners/export.py).
    tolerance: float = 0.03
    # kernel -> {argument of its @triton.jit kernel: dim of its shapes}, stored in the export: the prune
    # function reads the call's sizes from these arguments.
    key: Dict[str, Dict[str, str]] = field(default_factory=dict)
    merge: bool = True  # keep other GPUs' sections already in <export_dir>/<kernel>_configs.json


@dataclass
class SweepConf:
    kernel: KernelConf = field(default_factory=KernelConf)
    timing: TimingConf = field(default_factory=TimingConf)
    logger: LoggerConf = field(default_factory=LoggerConf)
    search: SearchConf = field(default_factory=SearchConf)
    compile: CompileConf = field(default_factory=CompileConf)
    finalists: FinalistsConf = field(default_factory=FinalistsConf)
    export: ExportConf = field(default_factory=ExportConf)
    backend: Backend = Backend.cuda
    # Trial workers: None = one per visible GPU (CUDA_VISIBLE_DEVICES) of the first GPU's model;
    # with backend=interpret, the number of interpreter processes (None = 1).
    gpu_workers: Optional[int] = None
    seed: int = 0
    force: bool = False  # measure again trials the store already holds for this GPU and versions
    sweep_id: Optional[str] = None  # None: the Hydra run/sweep directory's name
    store: str = "outputs/results.sqlite"
    export_dir: str = "outputs/exports"
    trial_timeout_s: float = 300.0  # wall clock for one trial (load or compile, check, timing) in a worker


def register_configs() -> None:
    ConfigStore.instance().store(name="sweep_schema", node=SweepConf)
