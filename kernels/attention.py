"""FlashAttention forward: softmax(Q·Kᵀ/sqrt(d) + bias) · V without materializing the N×N logits.

Q, K, V and the output are (batch, heads, seq, head_dim), head_dim 64 or 128. One program per BLOCK_M
query rows of one (batch, head) walks K and V in BLOCK_N blocks with the online softmax (running max
and sum, exp2 with the scale folded in); `causal` stops each program at its diagonal block; the optional
relative-position bias adds one learned scalar per offset i - j (2·seq - 1 values) to the logits. Four
specs share the kernel: SPEC, CAUSAL, BIAS, CAUSAL_BIAS.

The K/V walk is two loops over one block helper (`_attend_block`, MASKED a constexpr): only the diagonal
band (causal) and a ragged last block run the masked code. On Hopper and later Q, K, V and O move through
tensor descriptors (TMA), viewed as (batch·heads, seq, head_dim) so that a ragged last block of a head
reads zeros, not the next head; older GPUs take pointer loads. Why: CONTRIBUTING.md, "Design notes"."""
from __future__ import annotations

import math
from typing import Optional

import torch
import triton
import triton.language as tl

from triton_sweep.kernels.spec import KernelSpec, compiled, element_size, is_power_of_two, seeded_randn

SHARED_MEMORY_BYTES = 232448  # one block's shared memory on Hopper (H100, H200)


@triton.jit
def _load_tile(src, batch_head, start, offsets, seq_len, stride_n,
               HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, MASKED: tl.constexpr, TMA: tl.constexpr):
    """BLOCK rows (seq positions start..start+BLOCK) of one (batch, head): `src` is a tensor descriptor
    (TMA; rows past seq_len come back as zeros) or a pointer to this (batch, head) (rows masked when
    MASKED)."""
    # One return after if/else: Triton 3.6 compiles the code after an early return under a constexpr if.
    if TMA:
        tile = src.load([batch_head, start, 0]).reshape(BLOCK, HEAD_DIM)
    else:
        pointers = src + offsets[:, None] * stride_n + tl.arange(0, HEAD_DIM)[None, :]
        if MASKED:
            tile = tl.load(pointers, mask=offsets[:, None] < seq_len, other=0.0)
        else:
            tile = tl.load(pointers)
    return tile


@triton.jit
def _attend_block(
    acc, running_sum, running_max, q, k_src, v_src, bias_ptr, batch_head,
    rows, start_n, seq_len, qk_scale, stride_n,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, TMA: tl.constexpr,
):
    """One K/V block of the online softmax; returns the updated (acc, running_sum, running_max).

    MASKED=False is only for blocks whose columns all lie inside seq_len and (causal) left of every row
    of the program: no column mask, no tl.where."""
    cols = start_n + tl.arange(0, BLOCK_N)
    k = _load_tile(k_src, batch_head, start_n, cols, seq_len, stride_n, HEAD_DIM, BLOCK_N, MASKED, TMA)
    qk = tl.dot(q, tl.trans(k))
    if HAS_BIAS or MASKED:
        logits = qk * qk_scale
        if HAS_BIAS:
            if MASKED:
                offset = rows[:, None] - cols[None, :] + seq_len - 1
                bias = tl.load(bias_ptr + offset, mask=(rows[:, None] < seq_len) & (cols[None, :] < seq_len),
                               other=0.0)
            else:
                # Rows past seq_len (the last program's ragged rows) would read past the 2·seq - 1 values:
                # clamp them to the last row. They are never stored, so their bias does not matter, and
                # with every row < seq_len and every column < seq_len each offset lies in [0, 2·seq - 2].
                offset = tl.minimum(rows, seq_len - 1)[:, None] - cols[None, :] + seq_len - 1
                bias = tl.load(bias_ptr + offset)
            logits += bias.to(tl.float32) * 1.4426950408889634
        if MASKED:
            keep = cols[None, :] < seq_len
            if CAUSAL:
                keep = keep & (rows[:, None] >= cols[None, :])
            logits = tl.where(keep, logits, -float("inf"))
        # A row may have no kept column in this block (causal, BLOCK_M > BLOCK_N) but running_max is
        # finite by then: the first block processed holds column 0, which every row keeps (see the kernel).
        new_max = tl.maximum(running_max, tl.max(logits, axis=1))
        p = tl.exp2(logits - new_max[:, None])
    else:
        # max(qk) * scale == max(qk * scale) for a positive scale: the scale and the subtraction become
        # one FMA per logit.
        new_max = tl.maximum(running_max, tl.max(qk, axis=1) * qk_scale)
        p = tl.exp2(qk * qk_scale - new_max[:, None])
    correction = tl.exp2(running_max - new_max)
    running_sum = running_sum * correction + tl.sum(p, axis=1)
    v = _load_tile(v_src, batch_head, start_n, cols, seq_len, stride_n, HEAD_DIM, BLOCK_N, MASKED, TMA)
    acc = tl.dot(p.to(v.dtype), v, acc * correction[:, None])  # accumulated in the dot, not added after
    return acc, running_sum, new_max


@triton.jit
def _attention_fwd_kernel(
    out_dst, q_src, k_src, v_src, bias_ptr,
    seq_len, sm_scale,
    stride_bh, stride_n,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, TMA: tl.constexpr,
):
    """out_dst, q_src, k_src, v_src: tensor descriptors when TMA, else pointers to the whole tensors."""
    start_m = tl.program_id(0)
    batch_head = tl.program_id(1)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    if not TMA:  # pointers to this (batch, head)
        base = batch_head.to(tl.int64) * stride_bh
        q_src += base
        k_src += base
        v_src += base
        out_dst += base
    # Ragged rows load zeros: their logits stay finite (0 plus a bias) and they are never stored.
    q = _load_tile(q_src, batch_head, start_m * BLOCK_M, rows, seq_len, stride_n, HEAD_DIM, BLOCK_M, True,
                   TMA)
    running_max = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    running_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # exp(x) = exp2(x * log2(e)): fold log2(e) into the scale
    if CAUSAL:
        # Blocks whose last column is left of this program's first row: every row keeps every column.
        # The program's first row is < seq_len, so these columns are too.
        unmasked_end = (start_m * BLOCK_M) // BLOCK_N * BLOCK_N
        end = tl.minimum((start_m + 1) * BLOCK_M, seq_len)  # nothing right of the diagonal block
    else:
        unmasked_end = seq_len // BLOCK_N * BLOCK_N  # all but a ragged last block
        end = seq_len
    # The unmasked blocks first. Whichever loop runs first starts at column 0, which every row keeps, so
    # running_max is finite after the first block and exp2(running_max - new_max) never sees -inf - -inf.
    for start_n in range(0, unmasked_end, BLOCK_N):
        acc, running_sum, running_max = _attend_block(
            acc, running_sum, running_max, q, k_src, v_src, bias_ptr, batch_head,
            rows, start_n, seq_len, qk_scale, stride_n,
            HEAD_DIM, BLOCK_N, False, CAUSAL, HAS_BIAS, TMA)
    # Then the diagonal band (causal) and the ragged last block, with the column and causal masks.
    for start_n in range(unmasked_end, end, BLOCK_N):
        acc, running_sum, running_max = _attend_block(
            acc, running_sum, running_max, q, k_src, v_src, bias_ptr, batch_head,
            rows, start_n, seq_len, qk_scale, stride_n,
            HEAD_DIM, BLOCK_N, True, CAUSAL, HAS_BIAS, TMA)
    out = (acc / running_sum[:, None]).to(q.dtype)
    if TMA:  # the store clips the rows past seq_len
        out_dst.store([batch_head, start_m * BLOCK_M, 0], out.reshape(1, BLOCK_M, HEAD_DIM))
    else:
        tl.store(out_dst + rows[:, None] * stride_n + tl.arange(0, HEAD_DIM)[None, :], out,
                 mask=rows[:, None] < seq_len)


def has_tma(device: torch.device) -> bool:
    """Whether the kernel loads tiles through TMA on `device`: CUDA GPUs of compute capability 9 and up
    (Hopper). On the meta device (the compile pool) the target being compiled for decides; the
    interpreter runs either path (the tests run both)."""
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device)[0] >= 9
    if device.type == "meta":
        target = triton.runtime.driver.active.get_current_target()
        return target.backend == "cuda" and target.arch >= 90
    return True


def attention(q, k, v, bias=None, *, causal=False, BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2,
              tma: Optional[bool] = None, out=None):
    """`tma`: None picks TMA where the GPU has it (has_tma); True / False force one path."""
    if not (q.shape == k.shape == v.shape and q.ndim == 4 and q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a (batch, heads, seq, head_dim) shape and dtype, got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
        raise ValueError("attention needs contiguous q, k, v")
    batch, heads, seq_len, head_dim = q.shape
    if not is_power_of_two(head_dim) or head_dim < 16:
        raise ValueError(f"head_dim must be a power of 2 >= 16, got {head_dim}")
    if bias is not None and bias.shape != (2 * seq_len - 1,):
        raise ValueError(f"bias must hold 2*seq-1 = {2 * seq_len - 1} values, got {tuple(bias.shape)}")
    out = torch.empty_like(q) if out is None else out
    if not out.is_contiguous() or out.shape != q.shape:
        raise ValueError(f"out must be a contiguous tensor of q's shape {tuple(q.shape)}")
    tma = has_tma(q.device) if tma is None else tma
    if tma:
        if any(t.data_ptr() % 16 for t in (q, k, v, out)):
            raise ValueError("attention with TMA needs q, k, v and out at 16-byte aligned addresses")
        from triton.tools.tensor_descriptor import TensorDescriptor

        def tiles(tensor, block):  # (batch·heads, seq, head_dim): a tile never crosses into the next head
            return TensorDescriptor(tensor, shape=[batch * heads, seq_len, head_dim],
                                    strides=[seq_len * head_dim, head_dim, 1],
                                    block_shape=[1, block, head_dim])

        operands = (tiles(out, BLOCK_M), tiles(q, BLOCK_M), tiles(k, BLOCK_N), tiles(v, BLOCK_N))
    else:
        operands = (out, q, k, v)
    grid = lambda meta: (triton.cdiv(seq_len, meta["BLOCK_M"]), batch * heads)
    _attention_fwd_kernel[grid](
        *operands, bias if bias is not None else q,  # an unused pointer when HAS_BIAS is False
        seq_len, 1.0 / math.sqrt(head_dim), q.stride(1), q.stride(2),
        HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CAUSAL=causal, HAS_BIAS=bias is not None,
        TMA=tma, num_warps=num_warps, num_stages=num_stages,
    )
    return out


def relative_bias_matrix(bias, seq_len):
    """The (seq, seq) matrix bias[i - j + seq - 1] that the kernel adds without materializing it."""
    positions = torch.arange(seq_len, device=bias.device)
    return bias[positions[:, None] - positions[None, :] + seq_len - 1]


def attention_ref(q, k, v, bias=None, causal=False):
    """Naive attention: the N x N logits materialized (B·H·N² elements written and read 3 times)."""
    logits = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if bias is not None:
        logits = logits + relative_bias_matrix(bias, q.shape[-2])
    if causal:
        future = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool, device=q.device).triu(1)
        logits = logits.masked_fill(future, float("-inf"))
    # The softmax in at least fp32, as eager attention code usually runs it; float64 stays float64.
    weights = torch.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
    return weights.to(v.dtype) @ v


def _sdpa_baseline(causal, backend=None):
    """SDPA as a user calls it; with a bias, the (seq, seq) float mask is built once per input, as a
    model builds it once per sequence length, not inside every timed call."""
    masks = {}

    def run(inputs):
        q, k, v, *bias = inputs
        mask = None
        if bias:
            key = (bias[0].data_ptr(), q.shape[-2], q.dtype)
            if key not in masks:
                masks.clear()
                mask = relative_bias_matrix(bias[0], q.shape[-2]).to(q.dtype)
                if causal:  # SDPA takes either a mask or is_causal: fold causality into the mask
                    mask = mask.masked_fill(torch.ones_like(mask, dtype=torch.bool).triu(1), float("-inf"))
                masks[key] = mask
            mask = masks[key]
        attend = lambda: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal and mask is None)
        if backend is None:
            return attend()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(getattr(SDPBackend, backend)):
            return attend()

    return run


def _accumulation_bound(q, k, v, bias=None, causal=False):
    """P is rounded to the input dtype before P·V: up to half an ulp of each weight, so the output can
    be off by u · (P @ |V|), u the input dtype's unit roundoff (fp16 2**-11, bf16 2**-8)."""
    unit_roundoff = torch.finfo(q.dtype).eps / 2
    weights = torch.softmax(_logits64(q, k, bias, causal), dim=-1)
    return unit_roundoff * (weights @ v.double().abs())


def _logits64(q, k, bias, causal):
    logits = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if bias is not None:
        logits = logits + relative_bias_matrix(bias.double(), q.shape[-2])
    if causal:
        logits = logits.masked_fill(torch.ones_like(logits, dtype=torch.bool).triu(1), float("-inf"))
    return logits


def _make_inputs(shape, dtype, seed, device):
    return tuple(seeded_randn(shape, dtype, seed + i, device) for i in range(3))


def _constraints(shape, dtype, config):
    batch, heads, seq_len, head_dim = shape
    if not is_power_of_two(head_dim) or head_dim < 16:
        return f"head_dim {head_dim} is not a power of 2 >= 16"
    shared = (config["BLOCK_M"] + 2 * config["num_stages"] * config["BLOCK_N"]) * head_dim * element_size(
        getattr(torch, dtype))
    if shared > SHARED_MEMORY_BYTES:
        return f"Q tile and {config['num_stages']} stages of K and V tiles need {shared} B of shared memory"
    if config["BLOCK_M"] >= 4 * max(triton.next_power_of_2(seq_len), 16):
        return f"BLOCK_M {config['BLOCK_M']} >= 4x seq {seq_len}: most rows masked off"
    return None


def _spec(name, causal, has_bias):
    def make_inputs(shape, dtype, seed, device):
        inputs = _make_inputs(shape, dtype, seed, device)
        # One learned scalar per offset, in the model's dtype.
        return (*inputs, seeded_randn((2 * shape[2] - 1,), dtype, seed + 3, device)) if has_bias else inputs

    def eager(q, k, v, bias=None):
        return attention_ref(q, k, v, bias, causal)

    def flops(shape):
        batch, heads, seq_len, head_dim = shape
        return 4 * batch * heads * seq_len**2 * head_dim * (0.5 if causal else 1.0)

    def bytes_moved(shape, dtype):
        batch, heads, seq_len, head_dim = shape
        bias_bytes = (2 * seq_len - 1) * element_size(dtype) if has_bias else 0
        return 4 * batch * heads * seq_len * head_dim * element_size(dtype) + bias_bytes

    baselines = {"eager": lambda inputs: eager(*inputs), "sdpa": _sdpa_baseline(causal),
                 "compile": compiled(eager)}
    if not has_bias:  # cuDNN and FlashAttention-2 in SDPA take no float mask
        baselines["sdpa_cudnn"] = _sdpa_baseline(causal, "CUDNN_ATTENTION")
        baselines["sdpa_flash"] = _sdpa_baseline(causal, "FLASH_ATTENTION")
    return KernelSpec(
        name=name,
        dims=("batch", "heads", "seq", "head_dim"),
        dtypes=("float16", "bfloat16"),
        make_inputs=make_inputs,
        output_like=lambda inputs: torch.empty_like(inputs[0]),
        launch=lambda inputs, out, config: attention(*inputs, causal=causal, out=out, **config),
        reference=eager,
        flops=flops,
        bytes_moved=bytes_moved,
        space={"BLOCK_M": [64, 128], "BLOCK_N": [32, 64, 128], "num_warps": [4, 8], "num_stages": [2, 3, 4]},
        constraints=_constraints,
        baselines=baselines,
        accumulation_bound=lambda q, k, v, bias=None: _accumulation_bound(q, k, v, bias, causal),
        export_key={"seq_len": "seq"},
        # triton_sweep.capture: q's (batch, heads, seq, head_dim), for launches with this mask and bias
        launch_shape=lambda args: (tuple(args["q_src"][1]) if (args.get("CAUSAL"), args.get("HAS_BIAS"))
                                   == (causal, has_bias) else None),
        default_shapes=((4, 16, 4096, 64), (4, 16, 4096, 128), (1, 16, 16384, 128)),
        default_dtypes=("float16", "bfloat16"),
    )


SPEC = _spec("attention", causal=False, has_bias=False)
CAUSAL = _spec("attention_causal", causal=True, has_bias=False)
BIAS = _spec("attention_bias", causal=False, has_bias=True)
CAUSAL_BIAS = _spec("attention_causal_bias", causal=True, has_bias=True)
