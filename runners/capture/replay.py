"""A kernel a program launched, swept with no spec written. `python -m triton_sweep.capture --replay` records
what each launch of a @triton.jit function needs to run it again (runners/capture/launch_hook/
triton_launch_hook.py); `kernel=external kernel.spec="replay:FILE#FUNCTION"` makes a KernelSpec of the
records of one function in that file (the capture's <out>_launches.json), which sweeps, checks, times and
exports like any kernel. Its shapes are the integer arguments that vary between launches, its inputs
fresh seeded data of each recorded tensor's dtype, shape and strides, its reference the program's own
config on the same inputs, its space the program's @triton.autotune configs or the powers of two around
each launched BLOCK-like value (Replay says each rule); what cannot be replayed is said per kernel
(why_not, in runners/capture/replay_records.py with the rest of what a launch record says). A kernel
with side effects outside its arguments is not detected: its arguments alone are checked."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch
import triton.language as tl

from triton_sweep.kernels.spec import KernelSpec, seeded_randn
from triton_sweep.model.trial import ConfigError
from triton_sweep.capture.replay_expressions import expression
from triton_sweep.capture.replay_kernel import LoadedKernel, load_kernel, source_text, trusted_file
from triton_sweep.capture.replay_records import (LAUNCH_DIM, fixed_grid_refusal, grid_model, grid_names,
                                                 grid_tuple, launched_config, recorded_grid, replay_dtype,
                                                 replay_space, signature, size_at, varying_dims, why_not)
from triton_sweep.measure.check import copy_storage, is_sticky_cuda_error, poison, reorder_bounds

PREFIX = "replay:"  # a kernel.spec of this source (runners/model/spec_sources.py SOURCES)
REPLAY_LAUNCHES = 64  # the hook's bound on launch records per function
ORDER_SPREAD = 4  # times how far the program's own config moves with the order of its sums (num_warps)


def parse_target(target: str) -> tuple[Path, str, Optional[str], tuple[str, ...], Optional[str]]:
    """"replay:FILE#FUNCTION[;flops=EXPR][;allow=DIR]...[;grid=EXPR]" -> (file, function, FLOP
    expression or None, the folders allowed besides the working directory's tree and the import path,
    grid expression or None)."""
    body, *options = target[len(PREFIX):].split(";")
    path, _, function = body.partition("#")
    if not path or not function:
        raise ConfigError(f"kernel.spec: {target!r} must look like replay:FILE#FUNCTION (the capture's "
                          "<out>_launches.json and a function's module.qualname)")
    given: dict[str, list] = {"flops": [], "allow": [], "grid": []}
    for option in options:
        name, _, value = option.partition("=")
        if name not in given or not value:
            raise ConfigError(f"kernel.spec: {target!r}: {option!r} is not ;flops=EXPR, ;allow=DIR or "
                              ";grid=EXPR")
        if name == "allow" and not Path(value).is_dir():
            raise ConfigError(f"kernel.spec: allow={value}: no such folder")
        given[name].append(value)
    last = {name: values[-1] if values else None for name, values in given.items()}
    return Path(path), function, last["flops"], tuple(given["allow"]), last["grid"]


class Replay:
    """The replayable launches of one function, and what a KernelSpec of them does:

    - shape: the integer arguments (not constexprs) that vary from launch to launch, named as the kernel
      names them (so they are the export's key too); where they do not tell two launches of a dtype apart,
      the axes of tensor arguments that do (ARG_shapeN: rows that only the grid and the tensors carry; a
      config_for lookup, not an autotune key), and where those do not either, `launch` (the record's
      number, from 1). dtype: the launch's first floating tensor's
      (else its first tensor's). A (shape, dtype) the program never launched is pruned.
    - inputs: fresh seeded random data of each tensor's recorded dtype, shape, strides and storage offset
      (standard normal for floating tensors, the recorded values for integer and bool ones); numbers, bools
      and None as the program passed them.
    - outputs: every tensor argument (copies of the inputs), compared after the call with the program's own
      config run on the same inputs, in their own dtypes (the reference). Those the program's config writes
      are found by comparing with a snapshot. A floating one whose result does not depend on what it held
      (the reference run again with it poisoned agrees) is poisoned (NaN) before each checked call; every
      other tensor is restored to its inputs (the restore_value of @triton.autotune). An integer or bool
      tensor is never poisoned (it may be an offset: a counter, an index), so an element a config leaves
      unwritten there is caught only where the value it held differs from the program's result; one the
      program's config writes is restored before every call, timed ones too (a count that drifted would
      send later calls off; its copy is in the time).
    - space: the configs of the program's @triton.autotune, else the powers of two around each launched
      BLOCK-like meta-parameter (1/4x to 4x), num_warps 1-32 and num_stages 1-4. The grid of a config is
      the user's where the target gives one (;grid=EXPR, checked against every launch), else the
      program's: a callable grid as evaluated for those configs when it was captured; a fixed grid (a
      tuple, cdiv(n, 256) perhaps) only at the launched blocks or the program's autotune configs. A
      config without a grid is pruned, saying why; one that fails to compile or to match is recorded as
      such.
    - throughput: bytes moved are the tensor arguments' sizes, each once (a bound: a tensor read and
      written counts once, one read twice too); FLOPs 0 unless the target gives a model of the dims:
      "replay:FILE#FUNCTION;flops=2*M*N*K" (evaluated at every launch when the spec is made: its
      terms and powers bounded; replay_expressions.py).
    - imported from: the records' file, only where replay_kernel.trusted_file allows (`allow`: folders
      the user names besides; None, the capture's own records: not checked).
    """

    def __init__(self, path: Path, function: str, flops: Optional[str], allow: Optional[tuple] = (),
                 grid: Optional[str] = None):
        functions = _functions(path)
        if function not in functions:
            raise ConfigError(f"kernel.spec: {path} has no launch of {function} (it has: "
                              f"{', '.join(sorted(functions)) or 'none'})")
        _check_launches(path, functions[function])
        self.file = None if allow is None else {
            trusted_file(launch["replay"], path, allow)[0] for launch in functions[function].values()
            if launch.get("replay")}
        launches = [launch for launch in functions[function].values()
                    if launch.get("replay") and launch["calls"]]
        unrecorded = sum(launch["calls"] for launch in functions[function].values()
                         if launch["calls"] and not launch.get("replay"))
        recorded = [launch["replay"] for launch in launches]
        kept = [launch for launch in launches if why_not(launch["replay"]) is None]
        self.records = [launch["replay"] for launch in kept]
        self.counts = [launch["calls"] for launch in kept]
        self.left_out = [(why_not(launch["replay"]), launch["calls"]) for launch in launches
                         if why_not(launch["replay"]) is not None]  # (why, calls) of the others
        if unrecorded:
            self.left_out.append((f"no launch record (past the {REPLAY_LAUNCHES} a function keeps, or made "
                                  "while a CUDA graph was captured)", unrecorded))
        if not self.records:
            why = why_not(recorded[0]) if recorded else "no launch record (capture with --replay)"
            raise ConfigError(f"kernel.spec: {function} cannot be replayed: {why}")  # capture: "not replayed"
        self.function, self.path, self.allow = function, path, allow or ()
        self.name = kernel_name(function, functions)
        self.dims = varying_dims(self.records)
        self.flops_model = expression("flops", flops, self.dims) if flops else None
        self.grid_model = grid_model(grid, self.records, set(self.space())) if grid else None
        for index, record in enumerate(self.records):
            self.flops(self.shape_of(record, index))  # at the spec, never in a trial: refused here
        self.by_key = {(self.shape_of(record, index), replay_dtype(record)): index
                       for index, record in enumerate(self.records)}
        # the arguments' signature -> its launch: found at every call, timed ones too
        self.by_signature = {signature(record): index for index, record in enumerate(self.records)}
        self.loaded: Optional[LoadedKernel] = None
        # launch index -> {position among the tensor arguments of one the program's config writes: whether
        # it is only written (poisoned before a checked call) rather than read too (restored)}
        self.written: dict[int, dict[int, bool]] = {}
        # launch index -> positions of the integer and bool tensors the program's config writes
        self.counters: dict[int, list] = {}

    @property
    def kernel(self) -> "LoadedKernel":
        """The @triton.jit function, imported on first use (the capture writes sweep files without)."""
        if self.loaded is None:
            self.loaded = load_kernel(self.records[0], self.path, self.allow)
        return self.loaded

    def calls(self) -> dict:
        """(shape, dtype) -> how many times the program launched it."""
        return {key: self.counts[index] for key, index in self.by_key.items()}

    def shape_of(self, record: dict, index: int = 0) -> tuple:
        """The launch's sizes in the dims; its dim `launch` is its record's number, from 1."""
        return tuple(index + 1 if dim == LAUNCH_DIM else size_at(record, dim) for dim in self.dims)

    def index(self, shape, dtype: str) -> Optional[int]:
        return self.by_key.get((tuple(shape), dtype))

    def space(self) -> dict:
        return replay_space(self.records)

    def constraints(self, shape, dtype: str, config) -> Optional[str]:
        index = self.index(shape, dtype)
        if index is None:
            return "the program never launched this shape and dtype"
        record = self.records[index]
        if record["autotune"]:
            if dict(config) not in record["autotune"]:
                return "not one of the program's @triton.autotune configs"
            return None
        if self.grid_at(record, config) is None:
            blocks = ", ".join(f"{b}={config[b]}" for b in record["blocks"])
            return fixed_grid_refusal(record, config) or f"the program's grid was not recorded at {blocks}"
        return None

    def grid_at(self, record: dict, config) -> Optional[tuple]:
        """The launch grid at `config`: the user's (;grid=) where given, else the program's."""
        if self.grid_model is None:
            return recorded_grid(record, config)
        return grid_tuple(self.grid_model({**grid_names(record), **config}))

    def make_inputs(self, shape, dtype, seed: int, device) -> tuple:
        index = self.index(shape, str(dtype).replace("torch.", ""))
        if index is None:
            raise ConfigError(f"{self.function}: no launch at {list(shape)} {dtype}")
        record = self.records[index]
        generator = torch.Generator().manual_seed(seed)
        return tuple(_rebuilt(arg, int(torch.randint(0, 2**31, (1,), generator=generator)), device)
                     for _, arg in record["positional"] + record["keywords"])

    def output_like(self, inputs: tuple) -> tuple:
        return tuple(torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
                     for x in inputs if isinstance(x, torch.Tensor))

    def prepare_output(self, inputs: tuple, out: tuple) -> None:
        """Before a checked call, and the timed calls on buffers placed anew: a floating tensor the kernel
        only writes poisoned (check.poison), every other one restored to its inputs."""
        written = self.written.get(self._index_of(inputs), {})
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
        for position, (source, target) in enumerate(zip(tensors, out)):
            if written.get(position):
                poison(target)
            else:
                copy_storage(target, source)

    def _index_of(self, inputs: tuple) -> Optional[int]:
        """The launch whose arguments these are: tensors by shape, strides and dtype, the other arguments
        by value."""
        return self.by_signature.get(tuple(
            (tuple(x.shape), tuple(x.stride()), str(x.dtype).replace("torch.", ""))
            if isinstance(x, torch.Tensor) else str(x) if type(x) is tl.dtype else x for x in inputs))

    def launch(self, inputs: tuple, out, config) -> None:
        index = self._index_of(inputs)
        if index is None:
            raise ValueError(f"{self.function}: inputs of no recorded launch")
        record = self.records[index]
        outputs = out if isinstance(out, tuple) else (out,)
        counters = self.counters.get(index)
        if counters:  # an integer tensor it writes: restored, every call
            tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
            for position in counters:
                copy_storage(outputs[position], tensors[position])
        tensors = iter(outputs)
        values = [next(tensors) if isinstance(x, torch.Tensor) else x for x in inputs]
        self._call(record, values, config)

    def _call(self, record: dict, values: list, config) -> None:
        """The kernel at `config` on `values` (every argument in the recorded order, passed as the
        program passed it: the first ones by position, the others by name)."""
        names = [name for name, _ in record["positional"] + record["keywords"]]
        named = {**dict(zip(names, values)), **config}
        for name, heuristic in self.kernel.heuristics:  # outermost first, as Triton runs them
            named[name] = heuristic(named)
        positional = [named[name] for name, _ in record["positional"]]
        keywords = {name: value for name, value in named.items() if name not in names[:len(positional)]}
        grid = self.grid_at(record, config)
        if grid is None:
            raise ValueError(f"the program's grid was not recorded for {dict(config)}")
        self.kernel.jit.run(*positional, grid=grid, warmup=False, **keywords)

    def reference(self, *pristine) -> tuple:
        """The program's own config on copies of the inputs (as made: reference_in_float64 is False):
        every tensor argument after the call, floating ones in float64. Finds which tensors the kernel
        writes, and which of those it never reads."""
        index = self._index_of(pristine)
        if index is None:
            raise ValueError(f"{self.function}: inputs of no recorded launch")
        record = self.records[index]
        config = launched_config(record)
        after = _after_call(self._call, record, pristine, config)
        tensors = [x for x in pristine if isinstance(x, torch.Tensor)]
        written = [position for position, (x, y) in enumerate(zip(tensors, after)) if not _same(x, y)]
        only_written = {}
        for position in written:
            if not tensors[position].is_floating_point():
                continue  # never poisoned: an integer it reads may be an offset (a counter, an index)
            poisoned = _after_call(self._call, record, pristine, config, poison=position)
            only_written[position] = all(_same(a, b) for a, b in zip(after, poisoned))
        self.written[index] = only_written
        self.counters[index] = [p for p in written if not tensors[p].is_floating_point()]
        return tuple(y.double() if y.is_floating_point() else y for y in after)

    def accumulation_bound(self, *pristine) -> tuple:
        """Per output, what a config that sums in another order may differ by from the program's own: the
        larger of check.reorder_bounds (fp32's roundoff at the values' scale) and ORDER_SPREAD times how far
        the program's config moves at half and twice its num_warps (its sums in other orders, the same
        arithmetic): a kernel that sums in bf16 moves by bf16's units, and so may any of its configs."""
        record = self.records[self._index_of(pristine)]
        config = launched_config(record)
        own = _after_call(self._call, record, pristine, config)
        bounds = list(reorder_bounds(pristine, tuple(y.double() if y.is_floating_point() else y
                                                     for y in own)))
        warps = config.get("num_warps", 4)
        for other in sorted({max(1, warps // 2), min(32, warps * 2)} - {warps}):
            try:
                moved = _after_call(self._call, record, pristine, {**config, "num_warps": other})
            except Exception as error:  # an order that does not build here: the other, or fp32's rule alone
                if is_sticky_cuda_error(error):
                    raise
                continue
            for position, (a, b) in enumerate(zip(own, moved)):
                if bounds[position] is not None and a.numel():
                    apart = float((a.double() - b.double()).abs().nan_to_num(0.0, 0.0, 0.0).max())
                    bounds[position] = max(bounds[position], ORDER_SPREAD * apart)
        return tuple(bounds)

    def bytes_moved(self, shape, dtype) -> float:
        index = self.index(shape, str(dtype).replace("torch.", ""))
        record = self.records[0 if index is None else index]
        return float(sum(arg["nbytes"] for _, arg in record["positional"] + record["keywords"]
                         if arg["kind"] == "tensor"))

    def flops(self, shape) -> float:
        return float(self.flops_model(dict(zip(self.dims, shape)))) if self.flops_model else 0.0

    def spec(self) -> KernelSpec:
        shapes = sorted({shape for shape, _ in self.by_key})
        dtypes = tuple(sorted({dtype for _, dtype in self.by_key}))
        return KernelSpec(
            name=self.name, dims=tuple(self.dims), dtypes=dtypes, make_inputs=self.make_inputs,
            output_like=self.output_like, launch=self.launch, reference=self.reference,
            flops=self.flops, bytes_moved=self.bytes_moved, space=self.space(),
            constraints=self.constraints, prepare_output=self.prepare_output, reference_in_float64=False,
            accumulation_bound=self.accumulation_bound,
            export_key={dim: dim for dim in self.dims if dim != LAUNCH_DIM and "_shape" not in dim},
            default_shapes=tuple(shapes), default_dtypes=dtypes,
            sources=(source_text(self.records[0]["file"]), json.dumps(self.records, sort_keys=True)),
            imported_from=", ".join(sorted(map(str, self.file or ()))))


def kernel_name(function: str, functions) -> str:
    """The kernel's name: the function's, underscores stripped; with its module's where another function
    the program launched has that name too."""
    def short(name: str) -> str:
        return name.rsplit(".", 1)[-1].strip("_") or "replayed"

    if sum(short(other) == short(function) for other in functions) < 2:
        return short(function)
    module = function.rsplit(".", 1)[0].replace(".", "_").strip("_")
    return f"{module}_{short(function)}"


def replay_spec(target: str) -> KernelSpec:
    """The KernelSpec of a "replay:FILE#FUNCTION[;flops=EXPR][;allow=DIR]" target."""
    return Replay(*parse_target(target)).spec()


def _after_call(call, record: dict, pristine: tuple, config: dict, poison: Optional[int] = None) -> list:
    """The tensor arguments after `call` (Replay._call) at `config` on copies of `pristine` (the one at
    position `poison` among the tensors filled with NaN first)."""
    copies, position = [], 0
    for x in pristine:
        if isinstance(x, torch.Tensor):
            copy = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
            copy_storage(copy, x)
            if position == poison:
                copy.fill_(float("nan"))
            position += 1
            copies.append(copy)
        else:
            copies.append(x)
    call(record, copies, config)
    if torch.cuda.is_available() and any(isinstance(x, torch.Tensor) and x.is_cuda for x in copies):
        torch.cuda.synchronize()
    return [x for x in copies if isinstance(x, torch.Tensor)]


def _rebuilt(arg: dict, seed: int, device):
    """An argument made anew: a tensor of the recorded layout with fresh data, else the value."""
    if arg["kind"] == "tl_dtype":
        return tl.dtype(arg["value"])
    if arg["kind"] != "tensor":
        return arg["value"]
    dtype = getattr(torch, arg["dtype"])
    storage = torch.empty(max(arg["extent"], 1), dtype=dtype, device=device)
    tensor = storage.as_strided(arg["shape"], arg["stride"], arg["offset"])
    if torch.device(device).type == "meta":
        return tensor
    if "values" in arg:
        values = torch.tensor(arg["values"], dtype=dtype).reshape(arg["shape"])
        # An expanded tensor's elements share memory: each written once, through its first index.
        for axis, stride in enumerate(arg["stride"]):
            if stride == 0 and tensor.shape[axis]:
                tensor, values = tensor.narrow(axis, 0, 1), values.narrow(axis, 0, 1)
        tensor.copy_(values.to(device))
        return storage.as_strided(arg["shape"], arg["stride"], arg["offset"])
    else:
        storage.copy_(seeded_randn((storage.numel(),), dtype, seed, torch.device(device)))
    return tensor


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal (NaN where NaN)."""
    if a.is_floating_point():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool(torch.equal(a, b))


def _functions(path: Path) -> dict:
    """The launches file's functions: name -> {key: launch}, each launch an object with its calls."""
    if not path.is_file():
        raise ConfigError(f"kernel.spec: {path} does not exist (triton-sweep-capture --replay writes it)")
    try:
        functions = json.loads(path.read_text()).get("functions", {})
    except (ValueError, AttributeError) as error:
        raise ConfigError(f"kernel.spec: {path} is not a launches file ({error})") from None
    if not isinstance(functions, dict) or not all(isinstance(f, dict) for f in functions.values()):
        raise ConfigError(f"kernel.spec: {path}: its functions are not objects of launches")
    return functions


def _check_launches(path: Path, launches: dict) -> None:
    for launch in launches.values():
        if not (isinstance(launch, dict) and type(launch.get("calls")) is int
                and isinstance(launch.get("replay"), (dict, type(None)))):
            raise ConfigError(f"kernel.spec: {path}: a launch is not an object with calls and replay")
