"""Kernels that fail on purpose, each in one way the runner must catch and record."""
import dataclasses
import os
import time

import triton
import triton.language as tl

from kernels import vector_add


@triton.jit
def _add_wrong_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + x, mask=mask)  # wrong: x + x instead of x + y


@triton.jit
def _add_broken_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, undefined_function(offsets))  # noqa: F821 -- fails to compile


def _launch_wrong(inputs, out, config):
    x, y = inputs
    grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)
    _add_wrong_kernel[grid](x, y, out, x.numel(), BLOCK_SIZE=config["BLOCK_SIZE"])


def _launch_unwritten(inputs, out, config):
    x, y = inputs
    grid = lambda meta: (x.numel() // meta["BLOCK_SIZE"],)  # floor: the tail block is never launched
    vector_add._vector_add_kernel[grid](x, y, out, x.numel(), BLOCK_SIZE=config["BLOCK_SIZE"])


def _launch_broken(inputs, out, config):
    x, y = inputs
    _add_broken_kernel[(1,)](x, y, out, x.numel(), BLOCK_SIZE=config["BLOCK_SIZE"])


def _launch_hang_or_die(inputs, out, config):
    if config["BLOCK_SIZE"] == 32:  # what torch raises after an illegal address: the context is lost
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    if config["BLOCK_SIZE"] == 64:
        time.sleep(3600)  # a launch that never returns: the trial must time out
    if config["BLOCK_SIZE"] == 128:
        os._exit(7)  # the worker dies mid-trial: the trial is crashed, the sweep goes on
    vector_add.SPEC.launch(inputs, out, config)


def _variant(name, launch):
    return dataclasses.replace(vector_add.SPEC, name=name, launch=launch, baselines={})


WRONG_VALUES = _variant("add_wrong_values", _launch_wrong)
UNWRITTEN = _variant("add_unwritten_tail", _launch_unwritten)
BROKEN = _variant("add_broken", _launch_broken)
HANG_OR_DIE = _variant("add_hang_or_die", _launch_hang_or_die)


@triton.jit
def _compile_forever_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    acc = tl.load(x_ptr + offsets, mask=offsets < n_elements)
    for _ in tl.static_range(1 << 30):  # unrolled by the compiler's front end: a compile that never ends
        acc = acc * 1.0001
    tl.store(out_ptr + offsets, acc, mask=offsets < n_elements)


def _launch_compile_cases(inputs, out, config):
    """CASE 0 builds; 1 fails to compile; 2 compiles forever; 3 kills the compiler process."""
    x, y = inputs
    case = config["CASE"]
    if case == 1:
        return _launch_broken(inputs, out, config)
    if case == 2:
        return _compile_forever_kernel[(1,)](x, out, x.numel(), BLOCK_SIZE=config["BLOCK_SIZE"])
    if case == 3:
        os._exit(3)
    vector_add.SPEC.launch(inputs, out, {k: v for k, v in config.items() if k != "CASE"})


COMPILE_CASES = dataclasses.replace(vector_add.SPEC, name="add_compile_cases", launch=_launch_compile_cases,
                                    baselines={}, space={"CASE": [0, 1, 2, 3], "BLOCK_SIZE": [256]})


@triton.jit
def _store_far_away_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    far = offsets.to(tl.int64) + (1 << 40)  # 2 TB past the output: unmapped memory on any GPU
    tl.store(out_ptr + far, x + y, mask=mask)


def _launch_illegal_at_512(inputs, out, config):
    if config["BLOCK_SIZE"] != 512:
        return vector_add.SPEC.launch(inputs, out, config)
    x, y = inputs
    grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)
    _store_far_away_kernel[grid](x, y, out, x.numel(), BLOCK_SIZE=512, num_warps=config["num_warps"])


# On a GPU: BLOCK_SIZE 512 performs an illegal memory access (a sticky CUDA error), the others are right.
ILLEGAL_ACCESS = _variant("add_illegal_access", _launch_illegal_at_512)
