"""Kernels that fail on purpose, each in one way the runner must catch and record."""
import dataclasses
import os
import time

import torch
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
