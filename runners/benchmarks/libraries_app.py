"""A program for runners/benchmarks/bench_replay_libraries.py: it calls the Triton kernels of two public
libraries through their own entry points, every result checked against plain PyTorch (in fp32):
Liger-Kernel's RMSNorm, LayerNorm and Softmax (autograd Functions, forward and backward) and its
cross-entropy (forward, and the backward's scaling kernel); flash-linear-attention's chunk_local_cumsum
(scalar and vector gates, with cu_seqlens and without), chunk_global_cumsum (varlen) and l2norm
(forward and backward): FLA's own CachedAutotuner, @triton.heuristics, variable-length offsets.

    python -m triton_sweep.benchmarks.libraries_app [--small] [--device cuda|cpu] [--steps 2]
        [--shapes 4096x8192,16384x2048] [--dtypes float32,bfloat16] [--ops NAME ...]

--device cpu: the Triton interpreter (TRITON_INTERPRET=1). An op that fails there is tried first in a
child process whose launches are not captured, then skipped with a printed line (see interpreter_probe)."""
from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch

EPS = 1e-6
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 4e-3}  # of the reference's max
SHAPES = {"cuda": ((4096, 8192), (16384, 2048)), "small": ((16, 64), (40, 128))}  # (rows, hidden)
VOCAB = {"cuda": 32000, "small": 96}  # cross-entropy's classes (Llama 2's vocabulary)
HEAD_DIM = {"cuda": 128, "small": 16}  # FLA: heads = hidden // HEAD_DIM
CHUNK = {"cuda": 64, "small": 16}  # FLA's chunk size
SEQ_SHARES = (0.1, 0.35, 0.2, 0.35)  # the varlen batch: rows cut into sequences of these shares
# On the interpreter (no benchmarker to autotune with), FLA's CachedAutotuner kernels take a config from
# FLA's own config cache: one of each kernel's autotune configs, written to a folder of ours.
FLA_INTERPRETER_CONFIGS = {"chunk_local_cumsum_scalar_kernel": ({}, 4),
                           "chunk_local_cumsum_vector_kernel": ({"BS": 16}, 2),
                           "l2norm_fwd_kernel": ({"BT": 16}, 4), "l2norm_bwd_kernel": ({"BT": 16}, 4)}
# Plain @triton.autotune over several configs: the interpreter cannot time them (no driver)
NEEDS_AUTOTUNE = {"fla_global_cumsum": "plain @triton.autotune over 48 configs: the interpreter has no "
                                       "benchmarker to choose one"}


def close(name: str, actual, expected, dtype) -> None:
    """actual against the fp32 reference: within the dtype's tolerance of the reference's largest value."""
    expected = expected.detach().float()
    tol = TOLERANCE[dtype]
    scale = float(expected.abs().max()) or 1.0
    torch.testing.assert_close(actual.detach().float(), expected, rtol=tol, atol=tol * scale,
                               msg=lambda m: f"{name} ({dtype}): {m}")


def leaf(shape, dtype, device, generator, scale=1.0, shift=0.0):
    x = torch.randn(shape, generator=generator, device=device) * scale + shift
    return x.to(dtype).requires_grad_()


def reference(fn, *tensors):
    """fn on fp32 copies of the tensors, with autograd: (output, the copies)."""
    copies = [t.detach().float().requires_grad_() for t in tensors]
    return fn(*copies), copies


def liger_rms_norm(size, dtype, device, generator, in_place=False):
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    rows, hidden = size
    x, w = leaf((rows, hidden), dtype, device, generator), leaf(hidden, dtype, device, generator, 0.1, 1.0)
    dy = torch.randn(rows, hidden, generator=generator, device=device).to(dtype)
    expected, (x32, w32) = reference(
        lambda a, b: a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + EPS) * b, x, w)
    expected.backward(dy.float())
    y = LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", in_place)  # in_place: dX written into dY
    close("rms_norm y", y, expected, dtype)
    y.backward(dy)
    close("rms_norm dx", x.grad, x32.grad, dtype)
    close("rms_norm dw", w.grad, w32.grad, dtype)


def liger_rms_norm_in_place(size, dtype, device, generator):
    """Liger's default (LigerRMSNorm's in_place=True): the backward kernel gets dY as dX too."""
    liger_rms_norm(size, dtype, device, generator, in_place=True)


def liger_layer_norm(size, dtype, device, generator):
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction

    rows, hidden = size
    x, w = leaf((rows, hidden), dtype, device, generator), leaf(hidden, dtype, device, generator, 0.1, 1.0)
    b = leaf(hidden, dtype, device, generator, 0.1)
    dy = torch.randn(rows, hidden, generator=generator, device=device).to(dtype)
    expected, (x32, w32, b32) = reference(
        lambda a, c, d: torch.nn.functional.layer_norm(a, (hidden,), c, d, EPS), x, w, b)
    expected.backward(dy.float())
    y = LigerLayerNormFunction.apply(x, w, b, EPS)
    close("layer_norm y", y, expected, dtype)
    y.backward(dy)
    for name, got, want in (("dx", x.grad, x32.grad), ("dw", w.grad, w32.grad), ("db", b.grad, b32.grad)):
        close(f"layer_norm {name}", got, want, dtype)


def liger_softmax(size, dtype, device, generator):
    from liger_kernel.ops.softmax import LigerSoftmaxFunction

    x = leaf(size, dtype, device, generator)
    dy = torch.randn(size, generator=generator, device=device).to(dtype)
    expected, (x32,) = reference(lambda a: torch.softmax(a, -1), x)
    expected.backward(dy.float())
    y = LigerSoftmaxFunction.apply(x)
    close("softmax y", y, expected, dtype)
    y.backward(dy)
    close("softmax dx", x.grad, x32.grad, dtype)


def liger_cross_entropy(size, dtype, device, generator, mode="cuda"):
    """Mean over the rows not ignored (every 7th is); the loss scaled by 0.5 so that the backward runs
    Liger's element_mul_kernel (a gradient of exactly 1 skips it)."""
    from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction

    rows, vocab = size[0], VOCAB[mode]
    logits = leaf((rows, vocab), dtype, device, generator, 2.0)
    target = torch.randint(0, vocab, (rows,), generator=generator, device=device)
    target[::7] = -100
    expected, (x32,) = reference(lambda a: 0.5 * torch.nn.functional.cross_entropy(a, target), logits)
    expected.backward()
    loss = LigerCrossEntropyFunction.apply(logits, target, None, -100, 0.0, 0.0, "mean", None, False)[0]
    close("cross_entropy loss", 0.5 * loss, expected, dtype)
    (0.5 * loss).backward()
    close("cross_entropy dlogits", logits.grad, x32.grad, dtype)


def sequences(rows: int, device) -> torch.Tensor:
    """cu_seqlens of one varlen batch of `rows` tokens (SEQ_SHARES of it each)."""
    ends = [round(rows * sum(SEQ_SHARES[:i + 1])) for i in range(len(SEQ_SHARES))]
    return torch.tensor([0, *ends[:-1], rows], dtype=torch.long, device=device)


def cumsum_reference(g, cu_seqlens, chunk):
    """g's cumulative sum in fp32 within each chunk of `chunk` tokens of each sequence (chunk=None: the
    whole sequence); sequences: cu_seqlens over the one batch row, else each batch row."""
    out = torch.empty(g.shape, dtype=torch.float32, device=g.device)
    bounds = cu_seqlens.tolist() if cu_seqlens is not None else [0, g.shape[1]]
    for b in range(g.shape[0]):
        for bos, eos in zip(bounds[:-1], bounds[1:]):
            for start in range(bos, eos, chunk or max(eos - bos, 1)):
                end = min(eos, start + chunk) if chunk else eos
                out[b, start:end] = g[b, start:end].float().cumsum(0)
    return out


def fla_local_cumsum(size, dtype, device, generator, mode="cuda", vector=False, varlen=True):
    from fla.ops.utils.cumsum import chunk_local_cumsum

    rows, hidden = size
    heads, batch = hidden // HEAD_DIM[mode], 1 if varlen else 4
    shape = (batch, rows // batch, heads, HEAD_DIM[mode]) if vector else (batch, rows // batch, heads)
    g = torch.randn(shape, generator=generator, device=device).to(dtype)
    cu_seqlens = sequences(rows, device) if varlen else None
    o = chunk_local_cumsum(g, CHUNK[mode], cu_seqlens=cu_seqlens)
    close(f"chunk_local_cumsum {'vector' if vector else 'scalar'}{' varlen' * varlen}", o,
          cumsum_reference(g, cu_seqlens, CHUNK[mode]), dtype)


def fla_local_cumsum_fixed(size, dtype, device, generator, mode="cuda"):
    fla_local_cumsum(size, dtype, device, generator, mode, varlen=False)


def fla_local_cumsum_vector(size, dtype, device, generator, mode="cuda"):
    fla_local_cumsum(size, dtype, device, generator, mode, vector=True)


def fla_global_cumsum(size, dtype, device, generator, mode="cuda"):
    from fla.ops.utils.cumsum import chunk_global_cumsum

    rows, hidden = size
    g = torch.randn((1, rows, hidden // HEAD_DIM[mode]), generator=generator, device=device).to(dtype)
    cu_seqlens = sequences(rows, device)
    close("chunk_global_cumsum varlen", chunk_global_cumsum(g, cu_seqlens=cu_seqlens),
          cumsum_reference(g, cu_seqlens, None), dtype)


def fla_l2norm(size, dtype, device, generator, mode="cuda"):
    """q or k normalized over the head dim (rows, heads, HEAD_DIM): FLA's blocked kernels (dim <= 512)."""
    from fla.modules.l2norm import l2norm

    rows, hidden = size
    x = leaf((rows, hidden // HEAD_DIM[mode], HEAD_DIM[mode]), dtype, device, generator)
    dy = torch.randn(x.shape, generator=generator, device=device).to(dtype)
    expected, (x32,) = reference(lambda a: a / torch.sqrt(a.pow(2).sum(-1, keepdim=True) + EPS), x)
    expected.backward(dy.float())
    y = l2norm(x, EPS)
    close("l2norm y", y, expected, dtype)
    y.backward(dy)
    close("l2norm dx", x.grad, x32.grad, dtype)


OPS = {"liger_rms_norm": liger_rms_norm, "liger_rms_norm_in_place": liger_rms_norm_in_place,
       "liger_layer_norm": liger_layer_norm, "liger_softmax": liger_softmax,
       "liger_cross_entropy": liger_cross_entropy, "fla_local_cumsum": fla_local_cumsum,
       "fla_local_cumsum_fixed": fla_local_cumsum_fixed, "fla_local_cumsum_vector": fla_local_cumsum_vector,
       "fla_global_cumsum": fla_global_cumsum, "fla_l2norm": fla_l2norm}
# At the first shape and dtype only: Liger's default beside the others; a kernel whose @triton.autotune
# compiles and times 48 configs at every (heads, dtype) it meets
ONE_CALL = {"liger_rms_norm_in_place", "fla_global_cumsum"}


def call(name: str, size, dtype, device, generator, mode: str) -> None:
    op = OPS[name]
    if "mode" in op.__code__.co_varnames[:op.__code__.co_argcount]:
        op(size, dtype, device, generator, mode=mode)
    else:
        op(size, dtype, device, generator)


def fla_interpreter_cache() -> str:
    """FLA_CACHE_MODE=default and FLA_CONFIG_DIR: a folder of FLA_INTERPRETER_CONFIGS (set before fla is
    imported, which reads the mode once)."""
    folder = tempfile.mkdtemp(prefix="fla_configs_")
    atexit.register(shutil.rmtree, folder, True)
    for kernel, (kwargs, warps) in FLA_INTERPRETER_CONFIGS.items():
        config = {"kwargs": kwargs, "num_warps": warps, "num_stages": 3, "num_ctas": 1}
        with open(os.path.join(folder, f"{kernel}.json"), "w") as handle:
            json.dump({"kernel_name": kernel, "default_config": config}, handle)
    os.environ.setdefault("FLA_CACHE_MODE", "default")
    os.environ.setdefault("FLA_CONFIG_DIR", folder)
    return folder


def interpreter_probe(names: list[str], mode: str) -> dict:
    """name -> why it cannot run on the interpreter, for the ops among `names` that fail there: each tried
    once at the first small shape in float32, in a child process whose launches no capture records (its
    TRITON_CAPTURE_DIR unset), so a launch that fails is not swept."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_CAPTURE")}
    command = [sys.executable, "-m", "triton_sweep.benchmarks.libraries_app", "--device", "cpu",
               "--probe", "--ops", *names, *(["--small"] if mode == "small" else [])]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    failed = {}
    for line in done.stdout.splitlines():
        if line.startswith("PROBE "):
            name, _, why = line[len("PROBE "):].partition(" ")
            if why != "ok":
                failed[name] = why
    missing = [name for name in names if name not in failed and f"PROBE {name} ok" not in done.stdout]
    for name in missing:
        failed[name] = f"the probe did not report it (exit {done.returncode}): {done.stderr[-300:]!r}"
    return failed


def probe(names: list[str], mode: str) -> None:
    for name in names:
        try:
            call(name, SHAPES[mode][0], torch.float32, "cpu", torch.Generator().manual_seed(0), mode)
            print(f"PROBE {name} ok", flush=True)
        except Exception as error:
            first = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
            print(f"PROBE {name} {type(error).__name__}: {first}", flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="tiny sizes, for the interpreter")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--steps", type=int, default=2, help="passes over every op, shape and dtype")
    parser.add_argument("--shapes", help="ROWSxHIDDEN,... (default 4096x8192,16384x2048; --small "
                                         "16x64,40x128)")
    parser.add_argument("--dtypes", help="comma-separated torch dtypes (default: float32,bfloat16; --small "
                                         "float32,float16: the interpreter's bf16 sums give NaN)")
    parser.add_argument("--ops", nargs="+", choices=sorted(OPS), help="only these (default: all)")
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.mode = "small" if args.small else "cuda"
    args.sizes = [tuple(int(n) for n in text.split("x")) for text in args.shapes.split(",")] \
        if args.shapes else list(SHAPES[args.mode])
    dtypes = args.dtypes or ("float32,float16" if args.small else "float32,bfloat16")
    args.dtype_list = [getattr(torch, name) for name in dtypes.split(",")]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    names = args.ops or list(OPS)
    if args.device == "cpu":
        folder = fla_interpreter_cache()
        if not args.probe:
            print(f"interpreter: FLA's CachedAutotuner kernels take one of their configs from FLA's config "
                  f"cache (FLA_CACHE_MODE={os.environ['FLA_CACHE_MODE']}, FLA_CONFIG_DIR={folder})")
        for name in [name for name in names if name in NEEDS_AUTOTUNE]:
            print(f"skipped on the interpreter: {name}: {NEEDS_AUTOTUNE[name]}")
            names.remove(name)
    if args.probe:
        probe(names, args.mode)
        return 0
    if args.device == "cpu":
        for name, why in interpreter_probe(names, args.mode).items():
            print(f"skipped on the interpreter: {name}: {why}")
            names.remove(name)
    else:
        import triton

        print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}, "
              f"triton {triton.__version__}")
    failed = run(args, names)
    print(f"ops run: {', '.join(names)}" + (f"; {failed} result(s) FAILED their check" if failed else ""))
    return 1 if failed else 0


def run(args, names: list[str]) -> int:
    """--steps passes over every op, shape and dtype; a result off its reference is printed (`check
    failed: ...`) and the program goes on. The number of failed checks."""
    generator = torch.Generator(device=args.device).manual_seed(0)
    began, failed = time.perf_counter(), 0
    for step in range(args.steps):
        for name in names:
            for size in args.sizes[:1] if name in ONE_CALL else args.sizes:
                for dtype in args.dtype_list[:1] if name in ONE_CALL else args.dtype_list:
                    try:
                        call(name, size, dtype, args.device, generator, args.mode)
                    except AssertionError as error:
                        failed += 1
                        print(f"check failed: {name} {size} {dtype}: {' '.join(str(error).split())[:300]}")
        print(f"step {step}: {len(names)} ops x {len(args.sizes)} shapes x {len(args.dtype_list)} dtypes, "
              f"every result checked ({time.perf_counter() - began:.1f} s)", flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
