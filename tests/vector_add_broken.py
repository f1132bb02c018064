"""tests/vector_add_steady.py after a change that broke one config: BLOCK_SIZE 512 now writes x - y. Its
name, space and baselines are vector_add's, so its trials match vector_add's; tests/test_revalidate.py
re-validates an export of the steady vector_add with it (`--spec tests.vector_add_broken:SPEC`) and finds
that config broken."""

import dataclasses

from tests import vector_add_steady


def _launch(inputs, out, config):
    vector_add_steady.SPEC.launch(inputs, out, config)
    if config["BLOCK_SIZE"] == 512:
        x, y = inputs
        out.copy_(x - y)  # the regression


SPEC = dataclasses.replace(vector_add_steady.SPEC, launch=_launch)
