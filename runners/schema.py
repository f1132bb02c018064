"""Structured schemas for conf/: a misspelled key or a wrong type fails at composition, naming the field.

`shapes`, `dtypes` and the `space` values are typed Any on purpose: each may be one value (one job of a
Hydra multirun, `-m kernel.space.num_warps=4,8`) or a list (expanded inside the job,
`kernel.space.num_warps=[4,8]`); runners/trials.py validates them with messages naming the field.
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
    # nvbench's stopping rule: at least min_samples and min_time_s of measured time, then stop once the
    # relative noise (stdev / mean of the samples) is <= max_noise, or at max_time_s whatever the noise.
    # These defaults are conf/timing/default.yaml's; the presets set every field.
    min_samples: int = 10
    min_time_s: float = 0.25
    max_noise: float = 0.005
    max_time_s: float = 2.0
    warmup_s: float = 0.05
    # A sample is flagged throttled when the SM clock read around it is below this share of max clock.
    throttle_ratio: float = 0.9


@dataclass
class LoggerConf:
    mode: LoggerMode = LoggerMode.offline
    project: str = "triton-sweep"
    entity: Optional[str] = None
    dir: str = "outputs"  # W&B writes <dir>/wandb/


@dataclass
class SweepConf:
    kernel: KernelConf = field(default_factory=KernelConf)
    timing: TimingConf = field(default_factory=TimingConf)
    logger: LoggerConf = field(default_factory=LoggerConf)
    backend: Backend = Backend.cuda
    seed: int = 0
    force: bool = False  # measure again trials the store already holds for this GPU and versions
    sweep_id: Optional[str] = None  # None: the Hydra run/sweep directory's name
    store: str = "outputs/results.sqlite"
    export_dir: str = "outputs/exports"
    trial_timeout_s: float = 300.0  # wall clock for one trial (compile, check, timing) in the worker


def register_configs() -> None:
    ConfigStore.instance().store(name="sweep_schema", node=SweepConf)
