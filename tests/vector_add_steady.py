"""vector_add whose every launch also sleeps SLEEP_S, so that on the interpreter its wall time is mostly a
sleep, which a busy machine stretches far less than it stretches the interpreter's work (2.4-10 ms a
launch at 300 and 900 elements on this project's CPU-only host with a CI run beside it).
tests/test_revalidate.py re-times an export of it minutes after the sweep it was made from and expects
the verdicts that the factors it scales the recorded figures by set; with vector_add itself the second
timing of a shape on a busy 2-core CI box ran up to twice as fast as the first, and the test failed in
CI. Its name and baselines are vector_add's, so its trials match vector_add's
(`kernel=external kernel.spec=tests.vector_add_steady:SPEC`); its space is a part of vector_add's, for a
re-screen of a few configs (each of whose samples sleeps)."""

import dataclasses
import time

from kernels import vector_add

SLEEP_S = 0.02  # above the interpreter's 2.4-10 ms a launch; the verdicts' factors (0.25, 3) stay far apart


def _launch(inputs, out, config):
    vector_add.SPEC.launch(inputs, out, config)
    time.sleep(SLEEP_S)


SPEC = dataclasses.replace(vector_add.SPEC, launch=_launch,
                           space={"BLOCK_SIZE": [256, 512, 1024], "num_warps": [2, 4], "num_stages": [1]})
