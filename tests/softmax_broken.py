"""softmax after a change that broke one config: BLOCK_SIZE 16384 with 32 warps now returns the wrong
result. Its name, space and baselines are softmax's, so its trials match softmax's; the GPU benchmark of
re-validation (runners/benchmarks/bench_revalidate.py) re-validates an export of softmax with it
(`--spec tests.softmax_broken:SPEC`): the config is reported broken, and its shape re-screened."""

import dataclasses

from kernels import softmax

BROKEN = {"BLOCK_SIZE": 16384, "num_warps": 32}


def _launch(inputs, out, config):
    softmax.SPEC.launch(inputs, out, config)
    if all(config.get(name) == value for name, value in BROKEN.items()):
        out.mul_(2)  # the regression: rows no longer sum to 1


SPEC = dataclasses.replace(softmax.SPEC, launch=_launch)
