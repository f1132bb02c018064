"""The clean L2 flush: a kernel that reads a buffer of twice the L2 before every sample, so that the L2
holds only clean lines (a writing flush leaves dirty lines the timed kernel then pays to write back:
CONTRIBUTING.md, "Design notes"; BENCHMARKS.md, T)."""
from __future__ import annotations

import math
from typing import Optional

import triton
import triton.language as tl

# 2x the L2: H100/H200 split their L2 in two partitions, and a read of exactly L2 bytes can leave
# lines of the inputs resident. Reading 4x gave the same kernel times as 2x on an H200 (4.19 us for a
# 2^20 vector add, 30.43 us for softmax 8192x4096) at twice the cost (60 us a flush against 31-37).
FLUSH_L2_MULTIPLE = 2
FLUSH_MIN_BYTES = 16 << 20  # GPUs with a small or unreported L2 still get a real flush
FLUSH_BLOCK = 4096  # int32 elements a program reads per step: 16 KB
FLUSH_PROGRAMS_PER_SM = 4
FLUSH_KERNEL_NAME = "_l2_flush_read_kernel"  # how the flush is found among the CUPTI records


@triton.jit
def _l2_flush_read_kernel(buffer_ptr, partial_ptr, n_elements, BLOCK: tl.constexpr):
    # A grid-stride read of the whole buffer; one int32 written per program, so the L2 holds clean
    # lines only once it ends (a sum the compiler cannot drop, as it would an unused load).
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    total = tl.zeros([BLOCK], dtype=tl.int32)
    for start in range(pid * BLOCK, n_elements, step):
        offsets = start + tl.arange(0, BLOCK)
        total += tl.load(buffer_ptr + offsets, mask=offsets < n_elements, other=0)
    tl.store(partial_ptr + pid, tl.sum(total, axis=0))


def flush_elements(l2_bytes: Optional[int]) -> int:
    """int32 elements of the flush buffer: FLUSH_L2_MULTIPLE x the L2 (at least FLUSH_MIN_BYTES),
    rounded up to whole blocks."""
    n_bytes = max(FLUSH_L2_MULTIPLE * (l2_bytes or 0), FLUSH_MIN_BYTES)
    return math.ceil(n_bytes / 4 / FLUSH_BLOCK) * FLUSH_BLOCK


class L2Flush:
    """Evicts the L2 without leaving dirty lines: reads a buffer of 2x the L2 (see above)."""

    def __init__(self, torch, device, l2_bytes: Optional[int], sm_count: int):
        self.buffer = torch.ones(flush_elements(l2_bytes), dtype=torch.int32, device=device)
        self.partials = torch.empty(max(1, sm_count) * FLUSH_PROGRAMS_PER_SM, dtype=torch.int32,
                                    device=device)

    def __call__(self) -> None:
        _l2_flush_read_kernel[(self.partials.numel(),)](self.buffer, self.partials, self.buffer.numel(),
                                                        BLOCK=FLUSH_BLOCK, num_warps=8)

