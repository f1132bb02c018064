"""A row softmax of another repository, tuned by the runner's export (softmax_configs on sys.path).

Two ways in: `softmax_autotuned` (@triton.autotune over CONFIGS, the export's prune keeping the configs
verified around the call's row length that hold the row, timed by the export's do_bench on a GPU) and
`softmax_looked_up` (config_for, no autotune: the vLLM pattern). Imports torch, triton and the exported
module only.
"""
import time

import torch
import triton
import triton.language as tl

from softmax_configs import CONFIGS, config_for, do_bench, make_prune


def holds_row(config, sizes):
    """The kernel's own rule: one program reads a whole row, so a block shorter than it is wrong."""
    return config.kwargs["BLOCK_SIZE"] >= sizes["n_cols"]


def _host_bench(fn, quantiles=None, **kwargs):
    """autotune's timer on a machine without a GPU (the Triton interpreter): median of 3 wall times, ms."""
    times = []
    for _ in range(3):
        began = time.perf_counter()
        fn()
        times.append((time.perf_counter() - began) * 1e3)
    return sorted(times)[1]


@triton.jit
def _row_softmax(y_ptr, x_ptr, n_cols, x_stride, y_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    inside = offsets < n_cols
    x = tl.load(x_ptr + row * x_stride + offsets, mask=inside, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * y_stride + offsets, y.to(y_ptr.dtype.element_ty), mask=inside)


_row_softmax_tuned = triton.autotune(
    configs=CONFIGS, key=["n_cols"], prune_configs_by={"early_config_prune": make_prune(check=holds_row)},
    do_bench=do_bench if torch.cuda.is_available() else _host_bench,
)(_row_softmax)


def _launch(kernel, x, y, **options):
    kernel[(x.shape[0],)](y, x, x.shape[1], x.stride(0), y.stride(0), **options)
    return y


def softmax_autotuned(x, y):
    """Softmax of x's rows into y, the config chosen by autotune among those the export keeps."""
    _launch(_row_softmax_tuned, x, y)
    return _row_softmax_tuned.best_config


def softmax_looked_up(x, y, gpu=None):
    """Softmax of x's rows into y with the export's config for this row length, without autotune."""
    config = config_for(x.dtype, n_cols=x.shape[1], gpu=gpu, check=holds_row)
    _launch(_row_softmax, x, y, num_warps=config.num_warps, num_stages=config.num_stages, **config.kwargs)
    return config
