"""Tiled matmul with a fused epilogue: C = act(A·B + bias), act in none | relu | gelu (tanh).

Programs walk the C tiles in groups of GROUP_M tile rows, so the B columns a group reads stay in L2
while its rows of A stream through. fp32 accumulator; fp16 and bf16 inputs on the tensor cores; fp32
inputs computed exactly (input_precision "ieee", not tf32), so they meet the fp32 tolerance.
Shapes that are not multiples of the blocks are masked. Three specs share the kernel: SPEC (C = A·B),
BIAS_RELU and BIAS_GELU.
"""
from __future__ import annotations

import dataclasses
import math

import torch
import triton
import triton.language as tl

from triton_sweep.kernels.spec import KernelSpec, compiled, element_size, seeded_randn

ACTIVATIONS = {"none": 0, "relu": 1, "gelu": 2}
# Shared memory one block may use on Hopper (H100, H200): 227 KB. Configs whose pipelined A and B
# tiles need more are pruned before they compile; on other GPUs the launch reports out_of_resources.
SHARED_MEMORY_BYTES = 232448


@triton.jit
def _matmul_kernel(
    c_ptr, a_ptr, b_ptr, bias_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, EXACT_FP32: tl.constexpr, INT64_OFFSETS: tl.constexpr,
):
    # Grouped ordering: consecutive programs cover GROUP_M tile rows of one band of tile columns.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * tiles_n
    first_m = (pid // tiles_per_group) * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % tiles_per_group) % group_rows
    pid_n = (pid % tiles_per_group) // group_rows

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    # Rows and columns past the edge wrap around (% M, % N): the loads stay unmasked in M and N and in
    # bounds; the store below masks what they computed.
    a_rows = rows % M
    b_cols = cols % N
    if INT64_OFFSETS:  # A or B past 2**31 elements: int32 offsets overflow (an illegal address on an H200)
        a_rows = a_rows.to(tl.int64)
        b_cols = b_cols.to(tl.int64)
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + b_cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=ks[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=ks[:, None] < k_left, other=0.0)
        if EXACT_FP32:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    if ACTIVATION == 1:
        acc = tl.maximum(acc, 0.0)
    elif ACTIVATION == 2:
        inner = 0.7978845608 * (acc + 0.044715 * acc * acc * acc)
        acc = 0.5 * acc * (1.0 + (2.0 * tl.sigmoid(2.0 * inner) - 1.0))  # tanh(u) = 2*sigmoid(2u) - 1
    c_ptrs = c_ptr + rows[:, None].to(tl.int64) * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def matmul(a, b, bias=None, *, activation="none", BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8,
           num_warps=8, num_stages=3, out=None):
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul expects A (M, K) and B (K, N), got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype != b.dtype or (bias is not None and bias.shape != (b.shape[1],)):
        raise ValueError("A and B must share a dtype; bias, if given, must have shape (N,)")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    M, K = a.shape
    N = b.shape[1]
    out = torch.empty((M, N), device=a.device, dtype=a.dtype) if out is None else out
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    _matmul_kernel[grid](
        out, a, b, bias if bias is not None else a,  # an unused pointer when HAS_BIAS is False
        M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
        HAS_BIAS=bias is not None, ACTIVATION=ACTIVATIONS[activation], EXACT_FP32=a.dtype == torch.float32,
        # Only where needed: 64-bit offsets everywhere cost 3-6% at 4096^3 on an H200 (0.92x cuBLAS, from
        # 0.98x).
        INT64_OFFSETS=max(a.numel(), b.numel(), out.numel()) >= 2**31,
        num_warps=num_warps, num_stages=num_stages,
    )
    return out


def matmul_ref(a, b, bias=None, activation="none"):
    c = a @ b  # read MK + KN, write MN
    if bias is not None:
        c = c + bias  # read MN + N, write MN
    if activation == "relu":
        c = torch.relu(c)  # read MN, write MN
    elif activation == "gelu":
        c = torch.nn.functional.gelu(c, approximate="tanh")  # read MN, write MN
    return c


def _accumulation_bound(a, b, bias=None, activation_slope=1.0):
    """sqrt(K) * 2**-23 * (|A| @ |B|): what fp32 accumulation of K products may cost
    (runners/measure/check.py). The epilogue keeps it: a bias shifts both sides alike, relu has slope
    <= 1, gelu_tanh <= 1.13."""
    return activation_slope * math.sqrt(a.shape[1]) * 2.0**-23 * (a.double().abs() @ b.double().abs())


def _make_inputs(shape, dtype, seed, device):
    M, N, K = shape
    # A scaled by 1/sqrt(K): outputs of unit size whatever K, as with initialized weights.
    a = seeded_randn((M, K), torch.float32, seed, device).mul_(1 / math.sqrt(K)).to(dtype)
    b = seeded_randn((K, N), dtype, seed + 1, device)
    return a, b


def _with_bias(make_inputs):
    def make(shape, dtype, seed, device):
        return (*make_inputs(shape, dtype, seed, device), seeded_randn((shape[1],), dtype, seed + 2, device))
    return make


def _constraints(shape, dtype, config):
    M, N, K = shape
    tiles = config["num_stages"] * (config["BLOCK_M"] + config["BLOCK_N"]) * config["BLOCK_K"]
    shared = tiles * element_size(getattr(torch, dtype))
    if shared > SHARED_MEMORY_BYTES:
        return (f"{config['num_stages']} stages of A and B tiles need {shared} B of shared memory > "
                f"{SHARED_MEMORY_BYTES}")
    for block, size, name in ((config["BLOCK_M"], M, "M"), (config["BLOCK_N"], N, "N")):
        if block >= 4 * max(triton.next_power_of_2(size), 16):
            return f"BLOCK_{name} {block} >= 4x {name}={size}: most of every tile masked off"
    return None


def _launch_shape(has_bias, activation):
    """triton_sweep.capture: (M, N, K) of a launch of _matmul_kernel with this epilogue, else None."""
    def shape(args):
        if args.get("HAS_BIAS") == has_bias and args.get("ACTIVATION") == ACTIVATIONS[activation]:
            return args["M"], args["N"], args["K"]
        return None
    return shape


def _bytes_moved(shape, dtype, has_bias):
    M, N, K = shape
    return (M * K + K * N + M * N + (N if has_bias else 0)) * element_size(dtype)


SPEC = KernelSpec(
    name="matmul",
    dims=("M", "N", "K"),
    dtypes=("float16", "bfloat16", "float32"),
    make_inputs=_make_inputs,
    output_like=lambda inputs: torch.empty((inputs[0].shape[0], inputs[1].shape[1]), device=inputs[0].device,
                                           dtype=inputs[0].dtype),
    launch=lambda inputs, out, config: matmul(*inputs, out=out, **config),
    reference=matmul_ref,
    flops=lambda shape: 2 * shape[0] * shape[1] * shape[2],
    bytes_moved=lambda shape, dtype: _bytes_moved(shape, dtype, False),
    space={"BLOCK_M": [64, 128], "BLOCK_N": [128, 256], "BLOCK_K": [64], "GROUP_M": [8], "num_warps": [4, 8],
           "num_stages": [3, 4]},
    constraints=_constraints,
    baselines={"torch": lambda inputs: torch.matmul(*inputs)},  # cuBLAS
    accumulation_bound=_accumulation_bound,
    # no export_key: the kernel's arguments are named like the dims (M, N, K)
    launch_shape=_launch_shape(False, "none"),
    default_shapes=((4096, 4096, 4096), (8192, 8192, 8192), (4096, 4096, 11008)),
    default_dtypes=("float16", "bfloat16"),
)


def _epilogue_spec(name, activation):
    eager = lambda a, b, bias: matmul_ref(a, b, bias, activation)
    return dataclasses.replace(
        SPEC,
        name=name,
        make_inputs=_with_bias(_make_inputs),
        launch=lambda inputs, out, config: matmul(*inputs, activation=activation, out=out, **config),
        reference=eager,
        bytes_moved=lambda shape, dtype: _bytes_moved(shape, dtype, True),
        launch_shape=_launch_shape(True, activation),
        baselines={"eager": lambda inputs: eager(*inputs), "compile": compiled(eager)},
        accumulation_bound=lambda a, b, bias: _accumulation_bound(a, b, bias,
                                                                  1.13 if activation == "gelu" else 1.0),
    )


BIAS_RELU = _epilogue_spec("matmul_bias_relu", "relu")
BIAS_GELU = _epilogue_spec("matmul_bias_gelu", "gelu")
