"""A trial's inputs: seeded (input_seed), made once per (shape, dtype) with their references and
accumulation bound (ShapeCache), for the gate and the timing of every config of that shape."""
from __future__ import annotations

import hashlib

from triton_sweep.measure import check


def input_seed(seed: int, trial) -> int:
    """Seed of a trial's inputs: the same inputs for every config at a (shape, dtype), fresh elsewhere."""
    payload = f"{seed}:{trial.kernel}:{list(trial.shape)}:{trial.dtype}".encode()
    return int.from_bytes(hashlib.sha256(payload).digest()[:4], "little")


class ShapeCache:
    """Inputs, float64 references and accumulation bound of the last (shape, dtype) seen.

    Every config of a shape is checked on the same inputs, so they are made and the reference computed
    once per shape, not once per trial (a float64 reference of a 4096^3 matmul or of seq-16K attention
    costs far more than the trial it checks). One entry only: the scheduler sends a worker the trials
    of one shape in a row, and a second entry could double the memory of the largest shapes.
    Kernels and baselines must not write to their inputs; one that does fails the gate of later configs.
    """

    def __init__(self, spec, seed: int, device):
        self.spec, self.seed, self.device = spec, seed, device
        self.key = None
        self.inputs = self.references = self.bound = None

    def get(self, trial, with_bound: bool):
        import torch

        key = (trial.shape, trial.dtype)
        if key != self.key:
            self.key = None
            self.inputs = self.references = self.bound = None  # free the old shape before making the new one
            dtype = getattr(torch, trial.dtype)
            self.inputs = self.spec.make_inputs(trial.shape, dtype, input_seed(self.seed, trial), self.device)
            self.references = check.references(self.spec, self.inputs)
            self.key = key
        if with_bound and self.bound is None and self.spec.accumulation_bound:
            self.bound = self.spec.accumulation_bound(*self.inputs)
        elif with_bound and self.bound is None and not self.spec.reference_in_float64:
            self.bound = check.reorder_bounds(self.inputs, self.references)  # its sums in one order of many
        return self.inputs, self.references, (self.bound if with_bound else None)

    def release(self) -> None:
        """Drop the entry and give its memory back to the device (torch's allocator keeps what it freed)."""
        import torch

        self.key = None
        self.inputs = self.references = self.bound = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
