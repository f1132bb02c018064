"""A held-out program for the replay benchmark (runners/benchmarks/bench_replay.py): a model step shaped
like a Llama decoder layer's (hidden 4096, 32 query heads and 8 key/value heads of 128, MLP 14336) that
calls Liger-Kernel's RMSNorm, SwiGLU and RoPE forward kernels (through its autograd Functions) and one
Triton kernel of its own (a fused residual add and scale, callable grid). No spec describes any of them.

    python -m triton_sweep.benchmarks.replay_app [--steps 10] [--tokens 1024,2048,4096]
        [--dtypes bfloat16,float16] [--export-dir DIR] [--profile] [--device cpu]

Every result is checked against a PyTorch reference. --export-dir: each kernel launched with the config
its export's config_for() gives (DIR/<kernel>_configs.py; see Exported); --profile: a warm-up pass,
then --steps passes under torch.profiler and one JSON line `PROFILE {...}` of each kernel's summed CUDA
time and launch count; --device cpu: the Triton interpreter, a few tokens, to check the program."""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Optional

import torch
import triton
import triton.language as tl

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN = 4096, 32, 8, 128, 14336
EPS = 1e-6
ROPE_THETA = 500000.0
RESIDUAL_SCALE = 0.5
RESIDUAL_BLOCK, RESIDUAL_WARPS = 1024, 4  # the program's own launch settings
TOLERANCE = {torch.bfloat16: {"rtol": 1.6e-2, "atol": 2e-2}, torch.float16: {"rtol": 2e-3, "atol": 2e-3},
             torch.float32: {"rtol": 1e-4, "atol": 1e-4}}
OPTIONS = ("num_warps", "num_stages")
LAUNCH_DIM = "launch"


@triton.jit
def residual_scale_kernel(out_ptr, x_ptr, y_ptr, scale, n, BLOCK: tl.constexpr):
    """out = x + scale * y, elementwise over n elements (computed in fp32)."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (x + scale * y).to(out_ptr.dtype.element_ty), mask=mask)


def liger_modules() -> dict:
    """Liger's op modules, by submodule (always its Triton implementation: liger_kernel.ops itself may swap
    in another one where LIGER_KERNEL_IMPL asks)."""
    try:
        return {name: importlib.import_module(f"liger_kernel.ops.{name}")
                for name in ("rms_norm", "swiglu", "rope")}
    except ImportError as error:
        raise SystemExit(f"replay_app: Liger-Kernel is not importable ({error}): pip install --no-deps "
                         "--target DIR liger_kernel-*.whl and put DIR on PYTHONPATH") from error


def _function(jit) -> str:
    fn = getattr(jit, "fn", jit)
    return f"{fn.__module__}.{fn.__qualname__}"


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _sizes(dims: tuple, named: dict) -> Optional[dict]:
    """The call's size in each of the export's dims: an integer argument by its name, a tensor argument's
    axis by ARG_shapeN (the replay names rows only the tensors carry so); None for a dim neither gives."""
    sizes = {}
    for dim in dims:
        arg, _, axis = dim.rpartition("_shape")
        if type(named.get(dim)) is int:
            sizes[dim] = named[dim]
        elif arg and axis.isdigit() and torch.is_tensor(named.get(arg)):
            sizes[dim] = int(named[arg].shape[int(axis)])
        else:
            return None
    return sizes


class Exported:
    """The configs the runner exported: DIR/<kernel>_configs.py, one per kernel, looked up per call.

    <kernel> is the jit function's name without its leading and trailing underscores. A kernel is then
    launched by calling its @triton.jit function directly, with the arguments, grid and argument order
    Liger's wrapper uses and the exported meta-parameters, num_warps and num_stages; a kernel with no
    export keeps the library's settings. The call's sizes come from its integer arguments and, for a dim
    ARG_shapeN, the axis of a tensor argument (RMSNorm's and SwiGLU's rows are only the grid's and the
    tensors'); where a dim is neither (`launch`), the first config of the covering set is used, and said.
    """

    def __init__(self, folder: str):
        self.folder = Path(folder)
        self.modules: dict = {}
        self.picked: dict = {}  # (kernel, dtype, sizes) -> (config, how)

    def module(self, kernel: str):
        if kernel not in self.modules:
            path = self.folder / f"{kernel}_configs.py"
            module = None
            if path.is_file():
                spec = importlib.util.spec_from_file_location(f"{kernel}_configs", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            else:
                print(f"export: no {path.name} in {self.folder}: {kernel} keeps the library's settings")
            self.modules[kernel] = module
        return self.modules[kernel]

    def config(self, jit, named: dict, dtype) -> Optional[triton.Config]:
        """The exported config of this call (named: its arguments by name), None where none is exported."""
        function = _function(jit)
        kernel = function.rsplit(".", 1)[-1].strip("_")
        module = self.module(kernel)
        if module is None:
            return None
        sizes = _sizes(tuple(module.DIMS), named)
        key = (kernel, _dtype_name(dtype), json.dumps(sizes, sort_keys=True))
        if key not in self.picked:
            try:
                if sizes is None:
                    config, how = module.cover_for(_dtype_name(dtype))[0][0], "first of the covering set"
                else:
                    config, how = module.config_for(_dtype_name(dtype), **sizes), "config_for"
            except LookupError as error:  # ExportLookupError: this GPU or dtype was not exported
                config, how = None, f"library default: {error}"
            self.picked[key] = (config, how)
        return self.picked[key][0]

    def summary(self) -> list[str]:
        lines = []
        for (kernel, dtype, sizes), (config, how) in sorted(self.picked.items()):
            chosen = "the library's settings" if config is None else \
                f"{config.kwargs} num_warps={config.num_warps} num_stages={config.num_stages}"
            lines.append(f"export: {kernel} {dtype} at {sizes}: {chosen} ({how})")
        return lines


class Ops:
    """The step's four kernels: Liger's three through its Functions (library defaults) or, with an export,
    its jit functions called as its wrappers call them at the exported configs; and the program's own."""

    def __init__(self, exported: Optional[Exported]):
        self.liger = liger_modules()
        self.exported = exported

    def _launch(self, jit, grid, named: dict, defaults: dict) -> None:
        config = None if self.exported is None else self.exported.config(jit, named, _first_dtype(named))
        if config is None:
            jit[grid](**named, **defaults)
        else:
            jit[grid](**{**named, **config.kwargs}, num_warps=config.num_warps, num_stages=config.num_stages)

    def rms_norm(self, x, weight):
        module = self.liger["rms_norm"]
        if self.exported is None:
            return module.LigerRMSNormFunction.apply(x, weight, EPS)  # offset 0, casting "llama"
        # rms_norm_forward's row kernel (its block-row kernel is for rows <= 256 wide, 32768 rows or more)
        X = x.reshape(-1, x.shape[-1])
        n_rows, n_cols = X.shape
        block, warps = module.calculate_settings(n_cols)
        Y = torch.empty((n_rows, n_cols), dtype=X.dtype, device=X.device)
        RSTD = torch.empty(n_rows, dtype=torch.float32, device=X.device)
        named = dict(Y_ptr=Y, Y_row_stride=Y.stride(0), X_ptr=X, X_row_stride=X.stride(0), W_ptr=weight,
                     W_row_stride=weight.stride(0), RSTD_ptr=RSTD, RSTD_row_stride=RSTD.stride(0),
                     n_cols=n_cols, eps=EPS, offset=0.0, casting_mode=module._str_to_casting_mode["llama"],
                     elementwise_affine=True, BLOCK_SIZE=block)
        self._launch(module._rms_norm_forward_kernel, (n_rows,), named, {"num_warps": warps})
        return Y.view(x.shape)

    def swiglu(self, gate, up):
        module = self.liger["swiglu"]
        n_cols = gate.shape[-1]
        if self.exported is None or module._should_tile(n_cols):  # tiled: Blackwell's other kernel
            return module.LigerSiLUMulFunction.apply(gate, up)
        a, b = gate.reshape(-1, n_cols), up.reshape(-1, n_cols)
        c = torch.empty_like(a)
        block, warps = module.calculate_settings(n_cols)
        named = dict(a_ptr=a, b_ptr=b, c_ptr=c, stride=c.stride(-2), gate_multiplier=1.0, n_cols=n_cols,
                     BLOCK_SIZE=block)
        self._launch(module._swiglu_forward_kernel, (a.shape[0],), named, {"num_warps": warps})
        return c.view(gate.shape)

    def rope(self, q, k, cos, sin):
        """q (batch, heads, seq, head_dim), k (batch, kv heads, seq, head_dim), cos and sin (1, seq,
        head_dim); rotated in place where q and k are views of contiguous (batch, seq, heads, head_dim)."""
        module = self.liger["rope"]
        if self.exported is None:
            return module.LigerRopeFunction.apply(q, k, cos, sin)
        q, k = q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous()  # no copy where contiguous
        cos, sin = cos.contiguous(), sin.contiguous()
        batch, seq, n_qh, head_dim = q.shape
        n_kh = k.shape[2]
        rotary = module._resolve_rotary_dim(cos, head_dim, None)
        pad_qh, pad_kh = triton.next_power_of_2(n_qh), triton.next_power_of_2(n_kh)
        named = dict(q_ptr=q, q_row_stride=q.stride(1), k_ptr=k, k_row_stride=k.stride(1), cos=cos,
                     cos_row_stride=cos.stride(-2), sin=sin, sin_row_stride=sin.stride(-2), sl=seq, bs=batch,
                     cos_bs=cos.shape[0], n_qh=n_qh, n_kh=n_kh, hd=head_dim, pad_n_qh=pad_qh, pad_n_kh=pad_kh,
                     pad_hd=triton.next_power_of_2(head_dim), pad_rd=triton.next_power_of_2(rotary),
                     rd=rotary, BLOCK_SIZE=max(pad_qh, pad_kh), BACKWARD_PASS=False)
        self._launch(module._triton_rope, (batch * seq,), named, {})  # Liger passes no num_warps
        return q.transpose(1, 2), k.transpose(1, 2)

    def residual(self, x, y, scale: float):
        out = torch.empty_like(x)
        n = x.numel()
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)  # noqa: E731
        if self.exported is None:
            residual_scale_kernel[grid](out, x, y, scale, n, BLOCK=RESIDUAL_BLOCK, num_warps=RESIDUAL_WARPS)
        else:
            named = dict(out_ptr=out, x_ptr=x, y_ptr=y, scale=scale, n=n, BLOCK=RESIDUAL_BLOCK)
            self._launch(residual_scale_kernel, grid, named, {"num_warps": RESIDUAL_WARPS})
        return out


def _first_dtype(named: dict):
    """The dtype of the call's first floating tensor argument (what the replay files a launch under)."""
    tensors = [value for value in named.values() if torch.is_tensor(value)]
    return next((t.dtype for t in tensors if t.is_floating_point()), tensors[0].dtype)


def reference_rms_norm(x, weight):
    """Llama's RMSNorm: the statistics in fp32, the weight applied in the input's dtype."""
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def reference_rope(q, k, cos, sin):
    """HF Llama's apply_rotary_pos_emb, in the inputs' dtype as HF computes it (cos, sin: (1, seq, dim))."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def reference_swiglu(gate, up):
    """SiLU of the gate in fp32, cast back, times up (as Liger and HF's LlamaMLP round)."""
    return torch.nn.functional.silu(gate.float()).to(gate.dtype) * up


def reference_residual(x, y, scale: float):
    return (x.float() + scale * y.float()).to(x.dtype)


def rotary_tables(seq: int, dtype, device) -> tuple:
    """cos and sin of HF Llama's rotary embedding for positions 0..seq-1: (1, seq, HEAD_DIM)."""
    even = torch.arange(0, HEAD_DIM, 2, device=device, dtype=torch.float32)
    inv_freq = 1.0 / ROPE_THETA ** (even / HEAD_DIM)
    freqs = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat((freqs, freqs), dim=-1)[None]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def make_weights(dtype, device, seed: int = 0) -> dict:
    generator = torch.Generator(device=device).manual_seed(seed)

    def linear(fan_in: int, fan_out: int):
        return (torch.randn(fan_in, fan_out, generator=generator, device=device) / fan_in ** 0.5).to(dtype)

    return {"norm1": (1 + 0.1 * torch.randn(HIDDEN, generator=generator, device=device)).to(dtype),
            "norm2": (1 + 0.1 * torch.randn(HIDDEN, generator=generator, device=device)).to(dtype),
            "q": linear(HIDDEN, HEADS * HEAD_DIM), "k": linear(HIDDEN, KV_HEADS * HEAD_DIM),
            "o": linear(HEADS * HEAD_DIM, HIDDEN), "gate": linear(HIDDEN, FFN), "up": linear(HIDDEN, FFN),
            "down": linear(FFN, HIDDEN)}


def layer_step(ops: Ops, weights: dict, x, check: bool):
    """One decoder layer's forward over x (tokens, HIDDEN), batch 1; attention itself is left out (its
    output is the rotated queries, projected): the kernels around it are the point. check: each kernel's
    result against its reference."""
    tokens = x.shape[0]

    def verify(name, actual, expected):
        if check:
            torch.testing.assert_close(actual, expected, **TOLERANCE[x.dtype],
                                       msg=lambda m: f"{name}, {tokens} tokens, {x.dtype}: {m}")

    h = ops.rms_norm(x, weights["norm1"])
    verify("rms_norm", h, reference_rms_norm(x, weights["norm1"]))
    q = (h @ weights["q"]).view(1, tokens, HEADS, HEAD_DIM).transpose(1, 2)
    k = (h @ weights["k"]).view(1, tokens, KV_HEADS, HEAD_DIM).transpose(1, 2)
    cos, sin = rotary_tables(tokens, x.dtype, x.device)
    expected = reference_rope(q, k, cos, sin) if check else (None, None)  # before the kernel rotates in place
    q, k = ops.rope(q, k, cos, sin)
    verify("rope q", q, expected[0])
    verify("rope k", k, expected[1])
    attention = q.transpose(1, 2).reshape(tokens, HEADS * HEAD_DIM) @ weights["o"]
    h = ops.residual(x, attention, RESIDUAL_SCALE)
    verify("residual", h, reference_residual(x, attention, RESIDUAL_SCALE))
    g = ops.rms_norm(h, weights["norm2"])
    verify("rms_norm", g, reference_rms_norm(h, weights["norm2"]))
    gate, up = g @ weights["gate"], g @ weights["up"]
    c = ops.swiglu(gate, up)
    verify("swiglu", c, reference_swiglu(gate, up))
    down = c @ weights["down"]
    out = ops.residual(h, down, RESIDUAL_SCALE)
    verify("residual", out, reference_residual(h, down, RESIDUAL_SCALE))
    return out


def run_steps(ops: Ops, plan: list, weights: dict, steps: int, check: bool, device: str) -> None:
    """`steps` passes over every (tokens, dtype) of the plan, each on fresh inputs."""
    generator = torch.Generator(device=device).manual_seed(1)
    for _ in range(steps):
        for tokens, dtype in plan:
            x = torch.randn(tokens, HIDDEN, generator=generator, device=device).to(dtype)
            layer_step(ops, weights[dtype], x, check)


def kernel_times(ops: Ops, plan: list, weights: dict, steps: int) -> dict:
    """dtype -> kernel name -> {"us": summed CUDA time of its launches, "calls"} over `steps` passes of the
    dtype's token counts, one profiler session a dtype (the profiler's CUPTI kernel records, as
    kernels/examples/transformer_steps.py reads them)."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler import profile

    by_dtype: dict = {}
    for dtype in dict.fromkeys(dtype for _, dtype in plan):
        with profile(use_device="cuda", use_cpu=False, use_kineto=True) as recorder:
            run_steps(ops, [(t, d) for t, d in plan if d == dtype], weights, steps, False, "cuda")
            torch.cuda.synchronize()
        times = by_dtype.setdefault(_dtype_name(dtype), {})
        for event in recorder.kineto_results.events():
            if event.device_type() == DeviceType.CUDA:
                entry = times.setdefault(event.name(), {"us": 0.0, "calls": 0})
                entry["us"] += (event.end_ns() - event.start_ns()) / 1e3
                entry["calls"] += 1
    return by_dtype


def summed(by_dtype: dict) -> dict:
    """kernel name -> {"us", "calls"} over every dtype."""
    total: dict = {}
    for times in by_dtype.values():
        for name, entry in times.items():
            into = total.setdefault(name, {"us": 0.0, "calls": 0})
            into["us"] += entry["us"]
            into["calls"] += entry["calls"]
    return total


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="passes over every (tokens, dtype)")
    parser.add_argument("--tokens", type=lambda text: [int(t) for t in text.split(",")],
                        default=[1024, 2048, 4096], help="token counts of a pass, comma-separated (batch 1)")
    parser.add_argument("--dtypes", type=lambda text: text.split(","), default=["bfloat16", "float16"],
                        help="comma-separated: bfloat16, float16 (float32 on the CPU)")
    parser.add_argument("--export-dir", help="launch with the configs exported there (<kernel>_configs.py)")
    parser.add_argument("--profile", action="store_true",
                        help="print each kernel's CUDA time as PROFILE {json}")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = parser.parse_args(argv)
    for name in args.dtypes:
        if name not in ("bfloat16", "float16", "float32"):
            parser.error(f"--dtypes: {name} is not bfloat16, float16 or float32")
    if args.profile and args.device != "cuda":
        parser.error("--profile needs --device cuda")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    exported = Exported(args.export_dir) if args.export_dir else None
    ops = Ops(exported)
    plan = [(tokens, getattr(torch, name)) for name in args.dtypes for tokens in args.tokens]
    weights = {dtype: make_weights(dtype, args.device) for dtype in {dtype for _, dtype in plan}}
    mode = "exported" if exported else "default"
    if args.device == "cuda":
        print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}, "
              f"triton {triton.__version__}")
    began = time.perf_counter()
    if args.profile:
        run_steps(ops, plan, weights, 1, True, args.device)  # compiles, and checks every kernel once
        print(f"warm-up ({mode}): {time.perf_counter() - began:.2f} s wall, every result checked", flush=True)
        began = time.perf_counter()
        by_dtype = kernel_times(ops, plan, weights, args.steps)
        print(f"steps ({mode}): {time.perf_counter() - began:.2f} s wall under the profiler")
        record = {"mode": mode, "steps": args.steps, "plan": [[t, _dtype_name(d)] for t, d in plan],
                  "kernels": summed(by_dtype), "by_dtype": by_dtype}
        print("PROFILE " + json.dumps(record))
    else:
        run_steps(ops, plan, weights, args.steps, True, args.device)
        if args.device == "cuda":
            torch.cuda.synchronize()
        print(f"steps ({mode}): {time.perf_counter() - began:.2f} s wall, {args.steps} x {len(plan)} layer "
              "passes, every result checked")
    for line in exported.summary() if exported else ():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
