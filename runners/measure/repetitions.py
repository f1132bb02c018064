"""Repetitions: a measurement's samples taken in blocks, each later block on copies of the buffers placed
anew in device memory (Placements), pooled into one Measurement a call (measure_repetitions). Samples of
one placement say nothing of how far a second run may fall (runners/measure/README.md, section 4)."""
from __future__ import annotations

import random
from typing import Callable, Optional

from triton_sweep.measure import check


# A repetition's buffers start at a random offset below PLACEMENT_SPAN_BYTES in an allocation of their
# own, in steps of the caching allocator's 512 bytes (so every pointer keeps the alignment Triton
# specializes on); earlier repetitions' buffers stay allocated, so that later ones land elsewhere,
# while they take at most HELD_SHARE of the free device memory.
PLACEMENT_SPAN_BYTES = 1 << 20
PLACEMENT_ALIGN_BYTES = 512
HELD_SHARE = 0.25


class Placements:
    """Copies of a call's tensors placed anew in device memory, one set per repetition (the module
    docstring: why). The offsets are drawn from the system's entropy, not the sweep's seed: each run
    meets placements of its own, as two runs of a program do."""

    def __init__(self, device):
        self.device = device
        self.random = random.Random()
        self.held: list = []

    def place(self, tensor, copy: bool = True):
        import torch

        if not isinstance(tensor, torch.Tensor):
            return tensor  # a plain number (a scale)
        item = tensor.element_size()
        offset = self.random.randrange(0, PLACEMENT_SPAN_BYTES, PLACEMENT_ALIGN_BYTES) // item
        extent = tensor.untyped_storage().nbytes() // item
        storage = torch.empty(extent + offset, dtype=tensor.dtype, device=tensor.device)
        placed = storage.as_strided(tensor.shape, tensor.stride(), offset + tensor.storage_offset())
        if copy:
            check.copy_storage(placed, tensor)  # an expanded tensor's elements overlap
        self.held.append(storage)
        return placed

    def keep_or_release(self) -> None:
        """After a repetition: keep its buffers (the next set lands elsewhere) while they fit in
        HELD_SHARE of the free memory, else let them go."""
        import torch

        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            if sum(s.untyped_storage().nbytes() for s in self.held) > HELD_SHARE * free:
                self.held.clear()

    def release(self) -> None:
        self.held.clear()


def measure_repetitions(timer, calls_at: Callable[[int], list], rule, placements: Placements,
                        settled: Optional[Callable[[list], bool]] = None) -> list:
    """Time calls_at(r)'s calls round-robin in rule.repetitions blocks, r = 0 on the buffers the gate
    checked, each later one on buffers placed anew; one pooled Measurement a call (timing.pooled).
    `settled`: a block also stops once it holds for each call's samples of all blocks so far."""
    from triton_sweep.measure.timing import pooled

    if rule.repetitions <= 1:
        return timer.measure_interleaved(calls_at(0), rule, settled=settled)
    block = rule.per_repetition()
    blocks = []

    def settled_so_far(samples: list) -> bool:
        return settled([[s for m in blocks for s in m[i].samples_s] + block_samples
                        for i, block_samples in enumerate(samples)])

    try:
        for r in range(rule.repetitions):
            # Repetitions after the first: binaries loaded, one call each touches the new buffers.
            blocks.append(timer.measure_interleaved(calls_at(r), block, warmup_s=None if r == 0 else 0.0,
                                                    settled=settled_so_far if settled else None))
            placements.keep_or_release()
    finally:
        placements.release()
    return [pooled([measured[i] for measured in blocks]) for i in range(len(blocks[0]))]
