"""The record of one output of a sweep: the Output base class, what its `write` is given (Finished), and
the "module:Class" form by which the background finish (runners/outputs/finisher.py) builds one again.
The package's __init__ runs the sweep's outputs together; this module is what an output plug-in and the
finisher import, so neither imports the other's importer."""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    import pandas as pd


DEFAULT_STORE = "outputs/results.sqlite"  # the schema's default: the commands need no --store there


def shown(path) -> str:
    """A path as the lines of a sweep name it: relative to the working directory where it lies inside it
    (outputs/runs/...), else absolute; one form a line, whether the config gave it relative or not."""
    absolute, cwd = os.path.abspath(path), os.getcwd()
    return os.path.relpath(absolute, cwd) if os.path.commonpath([absolute, cwd]) == cwd else absolute


@dataclass
class Finished:
    """What an output's `write` is given at the end of a sweep."""

    cfg: Any  # the sweep's config (its logger, export and export_dir sections)
    sweep_id: str
    output_dir: Path
    store: str  # the store's path
    frame: Optional["pd.DataFrame"] = None  # the sweep's rows
    files: dict = field(default_factory=dict)  # output name -> the files it wrote, for later outputs


class Output:
    """An output of the sweep (runners/outputs/__init__.py). `name` is its key under `output`.

    It may act at five moments: `begin` at the job's very start (the W&B output begins its check of
    wandb there, on a thread, while the job validates its input and its workers start), `check` before
    any launch (the export's settings), `start` before the trials (the W&B output has that check's
    finding and starts its trial runs), `row` for every row the job records, and `write` at the end,
    with the sweep's rows and the files of the outputs written before it."""

    background = False  # written after the others; by a process of its own with finish_in_background

    def __init__(self, **settings):
        self.name = ""
        self.settings = settings
        self.planned = 0  # set before start: the trials the job will measure (not pruned, not kept from
        # the store: runners/engine/job_report.py to_measure)
        self.multirun = False  # set before start: whether the job is one job of a multirun

    def begin(self, cfg) -> None:
        """At the job's very start, before its input is validated and its workers start: work that needs
        the config alone and that `start` would otherwise wait for (W&B: wandb's import tried)."""

    def check(self, cfg, spec) -> None:
        """Before any launch, with the sweep's config and the kernel's spec: a wrong setting of this output
        raises ConfigError (runners/model/trial.py) naming its field, so the sweep stops before it
        measures anything it could not write."""

    def start(self, cfg, sweep_id: str, dims: tuple) -> None:
        """Before the trials, with the job's dims (and self.planned, self.multirun set)."""

    def row(self, trial, row: dict, label: str) -> None:
        """Every row the job records (pruned ones included)."""

    def close(self) -> None:
        """Once the last row is recorded; may be called twice."""

    def handover(self) -> dict:
        """(background) What `write` needs to know of the job, where another process writes it."""
        return {}

    def write(self, done: Finished, handover: Optional[dict] = None) -> list[Path]:
        """The output's files (or nothing: a printed table)."""
        return []

    def seconds(self) -> dict:
        """Figures for the job's summary.json."""
        return {}


def target(output: Output) -> str:
    return f"{type(output).__module__}:{type(output).__qualname__}"


def made(spec: str, name: str, settings: dict) -> Output:
    """An Output from "module:Class" and its settings (in the background finish)."""
    module, _, qualname = spec.partition(":")
    output = getattr(importlib.import_module(module), qualname)(**settings)
    output.name = name
    return output
