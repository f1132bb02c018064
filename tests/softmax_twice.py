"""A deliberately slower revision of softmax: the same kernel, launched twice per call (about 2x the
time, the same result). Its name, space and baselines are softmax's, so its trials match softmax's trial
by trial, and its source hash differs; runners.compare must call our configs SLOW and the baselines SAME:
python -m runners.sweep kernel=external kernel.spec=tests.softmax_twice:SPEC \
    kernel.shapes=[[4096,4096]] kernel.dtypes=[float16]
"""

import dataclasses

from kernels import softmax


def _launch_twice(inputs, out, config):
    softmax.softmax(*inputs, out=out, **config)
    softmax.softmax(*inputs, out=out, **config)


SPEC = dataclasses.replace(softmax.SPEC, launch=_launch_twice)
