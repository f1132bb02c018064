"""Structured schemas for conf/: a misspelled key or a wrong type fails at composition, naming the field.

`shapes`, `dtypes` and the `space` values are typed Any on purpose: each may be one value (one job of a
Hydra multirun, `-m kernel.space.num_warps=4,8`) or a list (expanded inside the job,
`kernel.space.num_warps=[4,8]`); runners/model/space.py validates them with messages naming the field.
Hydra's `+key=value` adds a key past the schema: `unknown_field` finds it, and the sweep refuses it.
"""
from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Dict, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from triton_sweep.model.space import MAX_TRIALS

from triton_sweep.measure.stop_rule import StopRule, StopRuleError

# The Hydra config: runners/conf, a link to the checkout's conf/, the folder itself in an installed copy.
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


class Backend(str, Enum):
    """str-valued, so `cfg.backend == "cuda"` holds and it pickles and prints as its name."""

    cuda = "cuda"  # compiled for and timed on the GPU
    interpret = "interpret"  # the Triton interpreter on the CPU; timings exported only when asked


class LoggerMode(str, Enum):
    offline = "offline"  # no account, no network; `wandb sync` later
    online = "online"
    disabled = "disabled"


class LoggerRuns(str, Enum):
    trial = "trial"  # a run per trial, and the sweep's run
    sweep = "sweep"  # the sweep's run alone, holding every trial
    auto = "auto"  # trial runs for one job of at most auto_trials trials; else the sweep's run alone


@dataclass
class KernelConf:
    name: str = MISSING  # a built-in kernel (kernels/__init__.py finds them), or "external" with `spec`
    spec: Optional[str] = None  # "pkg.module:ATTR" of a KernelSpec living in another package
    # One shape or a list of shapes (a shape is an int for 1-D, or a list of ints); None: the kernel's
    # default_shapes.
    shapes: Any = None
    dtypes: Any = None  # one dtype name or a list: float16 | bfloat16 | float32; None: its default_dtypes
    space: Dict[str, Any] = field(default_factory=dict)  # overrides of the kernel's default space
    # dim -> its sizes, crossed into shapes (besides `shapes`): a list, or {pow2: [lo, hi]} (the powers of
    # two between), {geom: [lo, hi, n]} (n sizes in geometric steps), {range: [lo, hi, step]}, a form with
    # multiple_of: m rounding its sizes to multiples of m, or a list of sizes and forms (their union)
    # (runners/model/space.py, grid_shapes).
    grid: Dict[str, Any] = field(default_factory=dict)
    # None: all the kernel declares (with backend=interpret, but its torch.compile ones, whose interpreter
    # timings mean nothing: name them to have them); [] none; or a list of names
    baselines: Any = None
    # How many times a program called each of `shapes`, in order (python -m triton_sweep.capture writes them):
    # the export's covering set then minimises the call-weighted loss. None: every shape alike.
    calls: Any = None


@dataclass
class TimingConf(StopRule):
    """Screening: the stopping rule (runners/measure/stop_rule.py: min_samples, min_time_s, rel_precision,
    max_time_s, repetitions, checked there when a node is made) and the timer's own settings. The
    defaults are conf/timing/default.yaml's; the presets set every field. repetitions is 1 here: the
    finalists, which decide, take several."""

    # Seconds of calls before sampling on a GPU that has been idle (runners/measure/cuda_timer.py).
    warmup_s: float = 0.02
    # A sample is flagged throttled when the SM clock read around it is below this share of max clock.
    throttle_ratio: float = 0.9

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.warmup_s < 0:
            raise StopRuleError(f"warmup_s: {self.warmup_s} must be >= 0")


@dataclass
class LoggerConf:
    mode: LoggerMode = LoggerMode.offline  # offline: no account or network, `wandb sync` later; disabled: off
    # trial: a run per trial besides the sweep's run; sweep: the sweep's run alone; auto: by auto_trials
    runs: LoggerRuns = LoggerRuns.auto
    auto_trials: int = 256  # logger.runs=auto: the most trials a job logs a run each for
    project: str = "triton-sweep"  # the W&B project
    entity: Optional[str] = None  # the W&B user or team; None: the account's default
    dir: str = "${oc.env:WANDB_DIR,outputs}"  # W&B writes <dir>/wandb/; WANDB_DIR where the shell sets it


@dataclass
class SearchConf:
    """A search strategy (runners/model/search/): the fields every strategy takes, and its own under
    `settings`, which the strategy checks (a name it does not declare fails, naming it)."""

    _target_: str = "triton_sweep.model.search.guided.Guided"  # "pkg.module.Class" of a Strategy
    budget_trials: Optional[int] = None  # configs measured per (shape, dtype); None: no limit
    budget_s: Optional[float] = None  # stop handing out new trials after this many seconds; None: no limit
    seed: int = 0  # random order / Optuna sampler seed (the inputs use the top-level seed)
    batch: int = 8  # optuna: configs asked a round per (shape, dtype); guided: at most in flight per one
    settings: Dict[str, Any] = field(default_factory=dict)  # the strategy's own: name -> value


@dataclass
class CompileConf:
    # compile processes; None: one per CPU core; 0: no pool (the GPU worker compiles)
    workers: Optional[int] = None
    timeout_s: float = 60.0  # per config; past it the compiler's whole process group is killed


@dataclass
class FinalistsConf(StopRule):
    """The top_k configs of each (shape, dtype) within screen_margin of the screened best (at least two)
    re-timed round-robin on one GPU until the stopping rule holds for each, or the decision is settled
    (min_samples is rounds: one sample of each finalist a round); ties, the choice and what they cost
    follow runners/model/finalists.py. top_k 0 or 1: no finalists. The rounds are taken in
    `repetitions` blocks, each on buffers placed anew: the winners' and baselines' between-run noise,
    which runners/compare/command.py judges a change by."""

    min_time_s: float = 0.02  # seconds of a group's rounds before it may stop
    max_time_s: float = 0.5  # a group's rounds stop after this many seconds, whatever the precision
    repetitions: int = 5  # blocks of rounds, each on buffers placed anew: the noise compare judges by
    top_k: int = 8  # configs re-timed per (shape, dtype); 0 or 1: no finalists
    tie_floor: float = 0.005  # differences below this share of the fastest p50 are ties
    screen_margin: float = 0.10  # finalists screened within this share of the screened best
    # A group's rounds stop once they took this multiple of the seconds its screening took (None: max_time_s
    # alone).
    of_screening: Optional[float] = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.of_screening is not None and not self.of_screening > 0:
            raise StopRuleError(f"of_screening: {self.of_screening} must be > 0 (1.0: the finalists of a "
                                "(shape, dtype) take at most as long as its screening did), or null")
        if self.top_k < 0 or self.tie_floor < 0:
            raise StopRuleError(f"top_k: {self.top_k} and tie_floor: {self.tie_floor} must be >= 0")
        if self.screen_margin < 0:
            raise StopRuleError(f"screen_margin: {self.screen_margin} must be >= 0 (0.10: within 10% of "
                                "the screened best)")


@dataclass
class ExportConf:
    # A covering set per (kernel, GPU, dtype): at every measured shape the fastest config of the list
    # that was ok there is within this share of the fastest measured there; then the alternates, every
    # other config within it at one measured shape at least (runners/export/cover.py). This
    # section and export.key are checked, before any launch, by the export output (export/settings.py).
    tolerance: float = 0.03
    # kernel -> {argument of its @triton.jit kernel: dim of its shapes}, stored in the export: the prune
    # function reads the call's sizes from these arguments. Replaces the kernel's own KernelSpec.export_key.
    key: Dict[str, Dict[str, str]] = field(default_factory=dict)
    merge: bool = True  # keep other GPUs' sections already in <export_dir>/<kernel>_configs.json
    # True: export interpreter rows (backend=interpret) too, as the interpreter's section, to try the flow on
    # a CPU (its lookups apply only under TRITON_INTERPRET=1); False: refused, they say nothing of a GPU.
    interpreter: bool = False


@dataclass
class SweepConf:
    kernel: KernelConf = field(default_factory=KernelConf)
    timing: TimingConf = field(default_factory=TimingConf)
    logger: LoggerConf = field(default_factory=LoggerConf)
    search: SearchConf = field(default_factory=SearchConf)
    compile: CompileConf = field(default_factory=CompileConf)
    finalists: FinalistsConf = field(default_factory=FinalistsConf)
    export: ExportConf = field(default_factory=ExportConf)
    # name -> an output (conf/output/<name>.yaml: `_target_` and its settings), written in this order
    output: Dict[str, Any] = field(default_factory=dict)
    # cuda: timed on the GPU; interpret: the Triton interpreter, exported only when asked (export.interpreter)
    backend: Backend = Backend.cuda
    # Trial workers: None = one per visible GPU (CUDA_VISIBLE_DEVICES) of the first GPU's model;
    # with backend=interpret, the number of interpreter processes (None = 1).
    gpu_workers: Optional[int] = None
    # A job plans at most this many trials (shapes x dtypes x (configs + baselines), pruned ones included);
    # more is refused in one line before any is built (runners/model/space.py: plan_trials)
    max_trials: int = MAX_TRIALS
    seed: int = 0  # the inputs' seed: every config of a shape gets the same inputs
    force: bool = False  # measure again trials the store already holds for this GPU and versions
    sweep_id: Optional[str] = None  # None: the Hydra run/sweep directory's name
    store: str = "outputs/results.sqlite"  # the SQLite store of record: every row, and what resume skips
    export_dir: str = "outputs/exports"  # <kernel>_configs.json and .py, every GPU of a kernel in one pair
    trial_timeout_s: float = 300.0  # wall clock for one trial (load or compile, check, timing) in a worker
    # True: the plots and the W&B summary run are left to a process of their own (its finish.log in the run
    # directory says what it did), and the command exits once its other outputs are written.
    finish_in_background: bool = False
    verbose: bool = False  # print the time accounting and each phase's detail at the end of a sweep
    # True: print the plan (per shape and dtype: configs to measure, pruned and why, kept from the store;
    # the time it would take) and exit, starting no worker and writing nothing (runners/engine/dry_run.py)
    dry_run: bool = False


def unknown_field(cfg, schema: type = SweepConf, prefix: str = "") -> Optional[str]:
    """The dotted name of the first key of a composed config that its schema does not declare (a typo
    added with Hydra's `+`, which the sweep would ignore); None when there is none. The sections typed as
    dicts (kernel.space, output, ...) hold names of their own."""
    fields = typing.get_type_hints(schema)
    for key in cfg:
        if key not in fields:
            if not (key == "hydra" and not prefix):  # Hydra's own node, where the config still has it
                return f"{prefix}{key}"
        elif dataclasses.is_dataclass(fields[key]):
            found = unknown_field(cfg[key], fields[key], f"{prefix}{key}.")
            if found:
                return found
    return None


KERNEL_CONF = CONF_DIR / "kernel"


def register_configs() -> None:
    """The schema, and `kernel=<name>` for every built-in kernel without a conf/kernel/<name>.yaml: its
    shapes and dtypes are then its KernelSpec's defaults (a YAML, where there is one, sets others). And
    the tool's Hydra plugins (hydra_plugins/: the user's sweeps/ and conf/, the launchers), where Hydra's
    scan of hydra_plugins missed them: it lists folders, not an editable install's import hook."""
    from hydra.core.plugins import Plugins
    from hydra.plugins.search_path_plugin import SearchPathPlugin
    from hydra_plugins.triton_sweep_home import SweepFolder, UserRepository

    from triton_sweep.kernels import builtin, dim_names, space_names  # read from kernels/*.py, none imported

    plugins = Plugins.instance()
    if not any(c.__module__ == UserRepository.__module__ for c in plugins.discover(SearchPathPlugin)):
        from hydra_plugins.triton_sweep_launcher.launchers import LocalLauncher, RayLauncher, SlurmLauncher

        for plugin in (SweepFolder, UserRepository, LocalLauncher, SlurmLauncher, RayLauncher):
            if plugin is not None:  # RayLauncher: where the [ray] extra is installed
                plugins.register(plugin)
    store = ConfigStore.instance()
    store.store(name="sweep_schema", node=SweepConf)
    for name in builtin():
        if not (KERNEL_CONF / f"{name}.yaml").exists():
            space = dict.fromkeys(space_names(name))  # None: the kernel's default values
            grid = dict.fromkeys(dim_names(name))  # None: no grid along that dim
            store.store(group="kernel", name=name, node=KernelConf(name=name, space=space, grid=grid))


# The meaning of the stopping rule's fields, which `timing` and `finalists` inherit from
# runners/measure/stop_rule.py; the fields declared here say theirs in the comment beside or above them.
STOP_RULE_DOCS = {
    "min_samples": "samples (finalists: rounds, one sample of each finalist a round) before it may stop",
    "min_time_s": "seconds of sampling, flushes and enqueueing included, before it may stop",
    "rel_precision": "stop once the half-width of the median's 95% interval is within this share of it",
    "max_time_s": "stop after this many seconds of sampling, whatever the precision",
    "repetitions": "blocks of samples, each on buffers placed anew; every sample pooled, each block's median "
                   "kept",
}


def _comments() -> dict:
    """(class, field) -> the comment of each dataclass field declared in this file: the one on its line,
    else the comment lines right above it, joined."""
    import ast
    import io
    import tokenize

    source = Path(__file__).read_text()
    lines = source.splitlines()
    on_line = {token.start[0]: token.string.lstrip("#").strip()
               for token in tokenize.generate_tokens(io.StringIO(source).readline)
               if token.type == tokenize.COMMENT}
    found = {}
    for node in ast.parse(source).body:
        for item in node.body if isinstance(node, ast.ClassDef) else ():
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                above, line = [], item.lineno - 1
                while line in on_line and lines[line - 1].lstrip().startswith("#"):
                    above.insert(0, on_line[line])
                    line -= 1
                found[node.name, item.target.id] = on_line.get(item.lineno) or " ".join(above)
    return found


def _type_name(hint) -> str:
    if isinstance(hint, type) and issubclass(hint, Enum):
        return "one of " + ", ".join(member.value for member in hint)
    if typing.get_origin(hint) is typing.Union:
        return " or ".join(_type_name(arg) for arg in typing.get_args(hint))
    if typing.get_origin(hint) is dict:
        return "dict"
    return {Any: "any", type(None): "null"}.get(hint) or hint.__name__


def _rows(schema: type, prefix: str, comments: dict) -> tuple[list, list]:
    """The table rows of a schema's own fields, and its sections: (dotted name, schema)."""
    hints, rows, nested = typing.get_type_hints(schema), [], []
    for item in dataclasses.fields(schema):
        name, hint = prefix + item.name, hints[item.name]
        if dataclasses.is_dataclass(hint):
            nested.append((name, hint))
            continue
        doc = next((comments[klass.__name__, item.name] for klass in schema.__mro__
                    if comments.get((klass.__name__, item.name))), STOP_RULE_DOCS.get(item.name, ""))
        value = item.default_factory() if item.default_factory is not dataclasses.MISSING else item.default
        value = value.value if isinstance(value, Enum) else value
        shown = value if isinstance(value, str) else json.dumps(value)
        doc = doc.replace("|", "\\|").replace("<", "&lt;")  # a table's cell, not a tag
        rows.append(f"| `{name}` | {_type_name(hint)} | `{shown}` | {doc} |")
    return rows, nested


def reference() -> str:
    """The field tables of conf/README.md: every field of the composed config (SweepConf, its sections
    in turn) with its type, default and meaning (python -m triton_sweep.model.schema prints them)."""
    comments, out, todo = _comments(), [], [("", SweepConf)]
    while todo:
        name, schema = todo.pop(0)
        rows, nested = _rows(schema, f"{name}." if name else "", comments)
        todo += nested
        out += [f"### `{name}`" if name else "### Top level", "", "| field | type | default | meaning |",
                "| --- | --- | --- | --- |", *rows, ""]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(reference(), end="")
