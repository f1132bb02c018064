"""A small program shaped like a transformer's serving loop, for `triton-sweep-capture`: each step is a
prefill (one or two prompts of 128 to 1024 tokens) or, four times as often, a decode step (24 to 128
single tokens against a context of 128 to 2048), calling the built-in layernorm, matmul and softmax.

    python -m triton_sweep.kernels.examples.transformer_steps [--steps 200]
        [--configs default|autotune|EXPORT_DIR] [--small] [--kernel-time]

--configs: the kernels' default configs; `autotune`: @triton.autotune over each kernel's whole space
(pruned by its constraints at each new key); or a folder of exports (`<kernel>_configs.py` from
triton_sweep.export), whose config_for() picks each call's config. --small: sizes the CPU interpreter runs in
seconds (TRITON_INTERPRET=1). --kernel-time: run the steps twice (the first compiles and tunes), print the
second's total GPU time of the Triton kernels (torch.profiler) and the first's wall time."""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import random
import time
from pathlib import Path

import torch
import triton

from triton_sweep.kernels import layernorm as layernorm_module
from triton_sweep.kernels import matmul as matmul_module
from triton_sweep.kernels import softmax as softmax_module
from triton_sweep.kernels.layernorm import layernorm
from triton_sweep.kernels.matmul import ACTIVATIONS, matmul
from triton_sweep.kernels.softmax import softmax

# Sizes as a serving stack pads them: batches to the sizes it captured CUDA graphs for, contexts to its
# KV-cache blocks of 64 tokens, prompts to a few lengths.
FULL = {"d_model": 1024, "heads": 16, "prompt": (128, 256, 384, 512, 768, 1024),
        "context": range(128, 2049, 64), "decode_batch": (24, 32, 48, 64, 96, 128)}
# SMALL: sizes the interpreter runs in seconds; rows of 12 or more, which a softmax block of 32 (one warp's
# threads, the least its constraints keep) can hold.
SMALL = {"d_model": 32, "heads": 2, "prompt": (12, 16, 24), "context": range(16, 41, 8),
         "decode_batch": (2, 3, 6)}


def workload(steps: int, sizes: dict, seed: int) -> list[tuple[int, int, int]]:
    """(tokens, attention rows, context) of each step: one step in five a prefill of one or two prompts,
    the others a decode step (one token a sequence of the batch)."""
    rng = random.Random(seed)
    plan = []
    for _ in range(steps):
        if rng.random() < 0.2:
            sequences, length = rng.choice([1, 2]), rng.choice(sizes["prompt"])
            plan.append((sequences * length, sequences * sizes["heads"] * length, length))
        else:
            batch = rng.choice(sizes["decode_batch"])
            plan.append((batch, batch * sizes["heads"], rng.choice(sizes["context"])))
    return plan


def _configs(spec) -> list[triton.Config]:
    """Every config of the spec's space, as triton.Configs."""
    configs = []
    for values in itertools.product(*spec.space.values()):
        config = dict(zip(spec.space, values))
        meta = {k: v for k, v in config.items() if k not in ("num_warps", "num_stages")}
        configs.append(triton.Config(meta, num_warps=config["num_warps"], num_stages=config["num_stages"]))
    return configs


def _prune(spec, dtype: str, shape_of):
    """autotune's early_config_prune: the configs the spec's constraints keep at the call's shape."""
    def prune(configs, named, **kwargs):
        shape = shape_of(named)
        kept = [c for c in configs if spec.constraints(
            shape, dtype, {**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}) is None]
        return kept or configs[:1]
    return prune


class Autotuned:
    """The three kernels under @triton.autotune over their whole space, keyed like their exports."""

    def __init__(self, dtype: str):
        def tuned(module, kernel, key, shape_of):
            return triton.autotune(_configs(module.SPEC), key=key, prune_configs_by={
                "early_config_prune": _prune(module.SPEC, dtype, shape_of)})(kernel)

        rows_cols = lambda named: (named["x_ptr" if "x_ptr" in named else "in_ptr"].shape[0], named["n_cols"])
        self.softmax = tuned(softmax_module, softmax_module._softmax_kernel, ["n_cols"], rows_cols)
        single_pass = triton.heuristics({"SINGLE_PASS": lambda a: a["BLOCK_SIZE"] >= a["n_cols"]})
        self.layernorm = tuned(layernorm_module, single_pass(layernorm_module._layernorm_kernel), ["n_cols"],
                               rows_cols)
        self.matmul = tuned(matmul_module, matmul_module._matmul_kernel, ["M", "N", "K"],
                            lambda named: (named["M"], named["N"], named["K"]))

    def run_softmax(self, x):
        out = torch.empty_like(x)
        self.softmax[(x.shape[0],)](out, x, x.shape[1], x.stride(0), out.stride(0))
        return out

    def run_layernorm(self, x, weight, bias):
        rows, cols = x.shape
        y = torch.empty_like(x)
        mean = torch.empty(rows, device=x.device, dtype=torch.float32)
        rstd = torch.empty(rows, device=x.device, dtype=torch.float32)
        self.layernorm[(rows,)](y, mean, rstd, x, weight, bias, cols, x.stride(0), y.stride(0),
                                layernorm_module.EPS)
        return y

    def run_matmul(self, a, b):
        M, K = a.shape
        N = b.shape[1]
        out = torch.empty((M, N), device=a.device, dtype=a.dtype)
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
        self.matmul[grid](out, a, b, a, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                          out.stride(0), out.stride(1), HAS_BIAS=False, ACTIVATION=ACTIVATIONS["none"],
                          EXACT_FP32=a.dtype == torch.float32,
                          INT64_OFFSETS=max(a.numel(), b.numel(), out.numel()) >= 2**31)
        return out


class Exported:
    """The kernels with each call's config from the exports' config_for()."""

    def __init__(self, folder: Path):
        self.modules = {}
        for kernel in ("softmax", "layernorm", "matmul"):
            path = folder / f"{kernel}_configs.py"
            spec = importlib.util.spec_from_file_location(f"{kernel}_configs", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            self.modules[kernel] = module

    def _config(self, kernel: str, dtype, **sizes) -> dict:
        """config_for's triton.Config as the wrapper's keyword arguments."""
        config = self.modules[kernel].config_for(dtype, **sizes)
        return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}

    def run_softmax(self, x):
        return softmax(x, **self._config("softmax", x.dtype, cols=x.shape[1]))

    def run_layernorm(self, x, weight, bias):
        return layernorm(x, weight, bias, **self._config("layernorm", x.dtype, cols=x.shape[1]))[0]

    def run_matmul(self, a, b):
        return matmul(a, b, **self._config("matmul", a.dtype, M=a.shape[0], N=b.shape[1], K=a.shape[1]))


class Defaults:
    """The kernels as a user calls them first: their wrappers' default configs."""

    run_softmax = staticmethod(softmax)
    run_matmul = staticmethod(matmul)

    @staticmethod
    def run_layernorm(x, weight, bias):
        return layernorm(x, weight, bias)[0]


def run_steps(kernels, plan, sizes: dict, device: str, dtype: torch.dtype) -> None:
    d = sizes["d_model"]
    generator = torch.Generator(device=device).manual_seed(0)
    weights = {name: torch.randn(shape, generator=generator, device=device).to(dtype) / shape[0] ** 0.5
               for name, shape in (("qkv", (d, 3 * d)), ("up", (d, 4 * d)), ("down", (4 * d, d)))}
    gamma = torch.ones(d, device=device, dtype=dtype)
    beta = torch.zeros(d, device=device, dtype=dtype)
    for tokens, rows, context in plan:
        x = torch.randn((tokens, d), generator=generator, device=device).to(dtype)
        h = kernels.run_layernorm(x, gamma, beta)
        kernels.run_matmul(h, weights["qkv"])
        scores = torch.randn((rows, context), generator=generator, device=device).to(dtype)
        kernels.run_softmax(scores)
        h = kernels.run_layernorm(x, gamma, beta)
        up = kernels.run_matmul(h, weights["up"])
        kernels.run_matmul(up, weights["down"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--configs", default="default", help="default | autotune | a folder of exports")
    parser.add_argument("--small", action="store_true", help="interpreter sizes")
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    parser.add_argument("--kernel-time", action="store_true", help="print the Triton kernels' GPU time")
    args = parser.parse_args(argv)
    sizes = SMALL if args.small else FULL
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.configs in ("default", "autotune"):
        kernels = Defaults() if args.configs == "default" else Autotuned(args.dtype)
    else:
        kernels = Exported(Path(args.configs))
    plan = workload(args.steps, sizes, args.seed)
    dtype = getattr(torch, args.dtype)
    began = time.perf_counter()
    run_steps(kernels, plan, sizes, device, dtype)
    if device == "cuda":
        torch.cuda.synchronize()
    first_s = time.perf_counter() - began
    print(f"{args.steps} steps ({args.configs}): {first_s:.2f} s wall, first pass (compiles, tuning)")
    if args.kernel_time and device == "cuda":
        print(f"{args.steps} steps ({args.configs}): {1e3 * kernel_time(kernels, plan, sizes, dtype):.2f} ms "
              "of Triton kernel time, second pass")
    return 0


def kernel_time(kernels, plan, sizes: dict, dtype) -> float:
    """Seconds of GPU time of the Triton kernels of one pass (the profiler's CUPTI kernel records)."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler import profile

    with profile(use_device="cuda", use_cpu=False, use_kineto=True) as recorder:
        run_steps(kernels, plan, sizes, "cuda", dtype)
        torch.cuda.synchronize()
    names = ("_softmax_kernel", "_layernorm_kernel", "_matmul_kernel")
    return sum(event.end_ns() - event.start_ns() for event in recorder.kineto_results.events()
               if event.device_type() == DeviceType.CUDA and event.name().startswith(names)) * 1e-9


if __name__ == "__main__":
    raise SystemExit(main())
