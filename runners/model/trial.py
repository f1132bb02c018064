"""The trial: the unit everything is keyed by (pruning, compile, check, timing, the store, W&B, the export),
and the error of bad user input. Imports neither torch nor Triton: the results side (report, plots, W&B
tables, the export, compare) reads trials without loading either.

A trial is (kernel, provider, shape, dtype, config). `provider` is "triton" for the kernel itself and a
baseline's name (e.g. "torch") for the kernel's baselines, which run once per (shape, dtype).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Optional

TRITON_PROVIDER = "triton"
NUM_WARPS_ALLOWED = (1, 2, 4, 8, 16, 32)  # what Triton launches


class ConfigError(ValueError):
    """Bad user input, found before anything is launched; the message names the field."""


def counted(count: int, noun: str) -> str:
    """'1 baseline', '2 baselines'."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def aligned(rows: list[tuple[str, ...]], left: int) -> list[str]:
    """Rows of text as columns two spaces apart: the first `left` left-aligned, the others right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) if i < left else cell.rjust(width)
                      for i, (cell, width) in enumerate(zip(row, widths))).rstrip() for row in rows]


def checked_name(value: str, field: str) -> str:
    """A name that becomes one component of a path (a sweep id: outputs/plots/<sweep id>): ConfigError
    naming `field` unless it is one, printable, and neither '.' nor '..'."""
    if value in ("", ".", "..") or "/" in value or "\\" in value or not value.isprintable():
        raise ConfigError(f"{field}: {value!r} cannot name a folder: give letters, digits and marks such as "
                          "- _ . (no / or \\, no control characters, not . or ..)")
    return value


@dataclass(frozen=True)
class Trial:
    kernel: str
    provider: str
    shape: tuple[int, ...]
    dtype: str
    config: dict = field(hash=False)
    pruned_reason: Optional[str] = None

    @property
    def key(self) -> str:
        """Stable identity of the trial: the same trial planned in-job or across jobs has one key."""
        payload = json.dumps(
            [self.kernel, self.provider, list(self.shape), self.dtype, sorted(self.config.items())]
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:20]

    @property
    def label(self) -> str:
        shape = "x".join(map(str, self.shape))
        settings = " ".join(f"{k}={v}" for k, v in self.config.items())
        return f"{self.kernel}[{self.provider}] {shape} {self.dtype} {settings}".strip()
