"""The contract every kernel in kernels/ (and every kernel a user brings) fulfils: a `KernelSpec`.

A kernel module builds one `KernelSpec` named `SPEC`, and the runner knows nothing else about it
(KernelSpec's docstring says what each field must do). A module of kernels/ is found by its assignment
of a spec to an UPPER_CASE name (kernels/__init__.py): a kernel there is one file, with no list to add it
to. Also here, the helpers kernel modules share: seeded inputs, the pruning rules of row-wise kernels
and the torch.compile baseline (`compiled`)."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence

import torch

Shape = tuple[int, ...]
Config = Mapping[str, int]


@dataclass(frozen=True)
class KernelSpec:
    """What the runner calls and reads of a kernel; `dims` names the shape's dimensions (e.g. ("rows",
    "cols")), and shapes have exactly len(dims) entries.

    - `make_inputs(shape, dtype, seed, device)` -> tuple of tensors: fresh seeded random data, never zeros.
      It is also called with device "meta" (the compile pool builds binaries from shapes and dtypes alone);
      `seeded_randn` handles that. A launcher that cannot run on meta tensors still works: its configs
      are then compiled by the GPU worker instead of the pool.
    - `output_like(inputs)` -> an empty output tensor, or a tuple of them for a kernel with several outputs
      (layernorm: y, mean, rstd); the runner poisons each (NaN) before the check.
    - `launch(inputs, out, config)` writes the result into `out`; `config` holds the meta-parameters
      (BLOCK sizes) and `num_warps` / `num_stages`, exactly the keys of `space`.
    - `reference(*inputs)` is plain PyTorch returning what `output_like` allocates; the runner calls it on
      the inputs with floating-point tensors upcast to float64. Inputs may include plain numbers (a scale).
    - `accumulation_bound(*inputs)`, for kernels that sum long products (matmul, attention): the float64
      elementwise error a correct kernel may reach in its sums, from the inputs as made (not upcast); the
      gate adds it to the absolute tolerance (see runners/measure/check.py).
    - `flops(shape)` and `bytes_moved(shape, dtype)`: the FLOP count and the fewest bytes the op must move
      (each input read once, each output written once). Throughput is computed from these, never from
      launching extra work.
    - `space`: the default search space, a dict of name -> list of values.
    - `constraints(shape, dtype, config)` -> None when the config can run at that shape, else the reason it
      is pruned (e.g. "BLOCK_SIZE 1024 < row length 4096").
    - `baselines`: name -> callable(inputs) -> output, the same result computed the way a user otherwise
      would (e.g. torch.softmax); measured in the same sweep so speedups come from one run. A baseline
      returns the main output only; it is checked against the reference's first output.
    - `export_key`: argument of the kernel's @triton.jit function -> the dim it gives (softmax: n_cols ->
      cols), stored in its export: what `@triton.autotune(key=...)` and the export's prune read the call's
      sizes from. Empty where the arguments are named like the dims (matmul's M, N, K).
    - `launch_shape(args)`, for `python -m triton_sweep.capture`: the shape (in `dims`) of a launch of the
      kernel's @triton.jit function, from its arguments by name (an int or bool argument as its value, a
      tensor as (dtype name, shape)), or None when the launch is not this kernel's (one jit function serving
      several specs: matmul with and without its epilogue). Without it, the dims come from the integer
      arguments `export_key` names and those named like a dim.
    - `prepare_output(inputs, out)`, for a kernel whose outputs are also read (one writing in place): fills
      `out` before each checked call, and before the timed calls on buffers placed anew, in place of the
      NaN poison (runners/capture/replay.py: a floating tensor only written is poisoned, the others
      restored).
    - `reference_in_float64`: False for a reference that runs in the inputs' own dtypes (a replayed kernel's
      is the program's own config): it then gets the inputs as made, not upcast.
    - `sources`: texts that define the kernel besides its launcher's module (a replayed kernel: the
      program's module and its launch records), hashed into every row's kernel_hash.
    - `imported_from`: the file the kernel's code is imported from where the sweep says it on its first
      lines (a replayed kernel's: the program's file).
    - `default_shapes`, `default_dtypes`: what `python -m triton_sweep.sweep kernel=<name>` sweeps when
      kernel.shapes / kernel.dtypes are not given.
    """
    name: str
    dims: tuple[str, ...]
    dtypes: tuple[str, ...]
    make_inputs: Callable[[Shape, torch.dtype, int, torch.device], tuple[torch.Tensor, ...]]
    output_like: Callable[[tuple[torch.Tensor, ...]], torch.Tensor]
    launch: Callable[[tuple[torch.Tensor, ...], torch.Tensor, Config], None]
    reference: Callable[..., torch.Tensor]
    flops: Callable[[Shape], float]
    bytes_moved: Callable[[Shape, torch.dtype], float]
    space: Mapping[str, Sequence[int]]
    constraints: Callable[[Shape, str, Config], Optional[str]] = lambda shape, dtype, config: None
    baselines: Mapping[str, Callable[[tuple[torch.Tensor, ...]], torch.Tensor]] = field(
        default_factory=dict
    )
    accumulation_bound: Optional[Callable[..., torch.Tensor]] = None
    export_key: Mapping[str, str] = field(default_factory=dict)
    launch_shape: Optional[Callable[[Mapping[str, object]], Optional[Shape]]] = None
    default_shapes: tuple = ()
    default_dtypes: tuple = ("float16",)
    prepare_output: Optional[Callable[[tuple, object], None]] = None
    reference_in_float64: bool = True
    sources: tuple[str, ...] = ()
    imported_from: str = ""


def is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def seeded_randn(shape: Shape, dtype: torch.dtype, seed: int, device: torch.device) -> torch.Tensor:
    """Standard-normal data drawn in float32 from a seeded generator, then cast.

    Never zeros: zeros hide unwritten outputs and wrong indexing, and can run faster than real data.
    On the meta device (the compile pool: shapes and dtypes only) there is no data to draw.
    """
    if torch.device(device).type == "meta":
        return torch.empty(shape, dtype=dtype, device=device)
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return torch.randn(shape, generator=generator, device=device, dtype=torch.float32).to(dtype)


# A program holds a block of its row in registers, BLOCK_SIZE / (32 * num_warps) fp32 values a thread.
# Past 128 the block spills to local memory. softmax (one block a row), on an H200 at fp16 4096x4096 and
# 2048x16384: each such config 1.9x to 12.7x slower than the best at its shape, its first call up to
# 6.5 s. layernorm (blocks looped over the row), on an H100 over 104 (shape, dtype)s of its export sweep:
# at 256 values a thread never within 2.0x of the best, at 512 never within 10x, compiles up to 39 s and
# 8 past the 60 s timeout; every winner held 64 or fewer (BENCHMARKS.md, O).
MAX_VALUES_PER_THREAD = 128


def spilled_block_reason(config: Config):
    """Why to prune a config whose block holds more fp32 values a thread than registers do, else None."""
    block, warps = config["BLOCK_SIZE"], config.get("num_warps", 4)  # the launcher's default warps
    per_thread = block // (32 * warps)
    if per_thread > MAX_VALUES_PER_THREAD:
        return (f"BLOCK_SIZE {block} over {warps} warps is {per_thread} values a thread "
                f"(> {MAX_VALUES_PER_THREAD}): the block spills out of registers")
    return None


def looped_row_reason(config: Config, n_cols: int):
    """Why to prune a config of a kernel that loops over a row in BLOCK_SIZE blocks, or reads it in one
    pass when a block holds it (softmax_online, layernorm): None if it is worth trying."""
    block = config["BLOCK_SIZE"]
    if block >= 2 * (1 << max(n_cols - 1, 0).bit_length()):  # 2x the next power of 2 of the row
        return f"BLOCK_SIZE {block} >= 2x the {n_cols} columns: half of every load masked off"
    spilled = spilled_block_reason(config)
    if spilled:
        return spilled
    if block >= n_cols and config.get("num_stages", 1) > 1:
        # num_stages pipelines loads across loop iterations; the single pass has no loop.
        return (f"num_stages {config['num_stages']}: BLOCK_SIZE {block} holds the {n_cols} columns,"
                " no loop to pipeline")
    return None


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


class _CompiledOnly(Exception):
    """Raised by a prepared graph while its compile ahead runs, in place of running it."""


def _signature(inputs: tuple) -> tuple:
    return tuple((tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else x for x in inputs)


def compiled(fn: Callable[..., torch.Tensor]) -> Callable[[tuple], torch.Tensor]:
    """A baseline that runs torch.compile(fn) on the inputs, as a user would compile the eager code.

    Compiled on the first call for each input signature (never at import time). Dynamo is reset
    between signatures: otherwise a sweep over many shapes hits its recompile limit and silently falls
    back to eager, or compiles a dynamic-shape kernel that is slower than the specialized one.

    `prepare(inputs)` compiles for the inputs' signature without running anything (their values are
    never read), so that the first call at that signature runs what was compiled: no trace, no compile,
    no lookup in inductor's caches (each a cache hit after a compile ahead that kept nothing: 0.05-0.13 s
    a shape under the GPU's lock on an H100, BENCHMARKS.md, O). The graph is inductor's, as
    torch.compile's default backend makes it (`compile_fx` with no options: the same key in inductor's
    cache). The worker of these baselines prepares while the GPU measures others, and holds the GPU for
    the first call only (runners/engine/trial_run.py).
    """
    state = {"signature": None, "function": None}

    def run(inputs):
        signature = _signature(inputs)
        if signature != state["signature"]:
            torch.compiler.reset()
            state.update(signature=signature, function=torch.compile(fn, dynamic=False))
        return state["function"](*inputs)

    def prepare(inputs):
        # torch's private compile_fx (runners/engine/internals.py lists it): without it, nothing is
        # compiled ahead, and the first call compiles as it always could.
        compile_fx = getattr(importlib.import_module("torch._inductor.compile_fx"), "compile_fx", None)
        if compile_fx is None:
            raise NotImplementedError("this torch has no torch._inductor.compile_fx.compile_fx")
        torch.compiler.reset()
        state.update(signature=None, function=None)
        ahead = [True]  # while the compile ahead runs, the graph it compiled refuses to run

        def inductor(graph, example_inputs):
            compiled_graph = compile_fx(graph, example_inputs)

            def call(*args):
                if ahead[0]:
                    raise _CompiledOnly
                return compiled_graph(*args)

            return call

        function = torch.compile(fn, dynamic=False, backend=inductor)
        try:
            function(*inputs)
        except _CompiledOnly:
            pass  # compiled, and nothing ran
        ahead[0] = False
        state.update(signature=_signature(inputs), function=function)

    run.compiles = True  # its first call at a signature compiles: a worker of its own does it (trial_run.py)
    run.prepare = prepare
    return run
