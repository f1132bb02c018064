"""What a sweep writes besides its store: one module an output, chosen by the config group `output`.

Each `conf/output/<name>.yaml` names an Output class (`_target_`) and its settings under the key <name>;
conf/config.yaml selects `output: [parquet, table, export, plots, wandb]`, in that order, and
`python -m runners.sweep 'output=[parquet,table]'` selects others. A new output is a module here with an
Output subclass and a YAML beside the others: the job calls it (runners/engine/job.py), whatever it is.

An output may act at five moments: `begin` at the job's very start (the W&B output begins its check
of wandb there, on a thread, while the job validates its input and its workers start), `check` before
any launch (the export's settings), `start` before the trials (the W&B output has that check's finding
and starts its trial runs), `row` for every row the job records, and `write` at the end, with the
sweep's rows. Outputs marked `background` are written by the finishing
process (runners/results/finisher.py), off the critical path: the plots, drawn while the foreground
outputs write; the W&B summary run, once the foreground outputs' files exist (`needs_foreground`). The
store, and so every result, never depends on an output: a failing output says so in a line and the
others go on.
"""
from __future__ import annotations

import time
from pathlib import Path

from runners.results.outputs.output import Finished, Output, target


class Outputs:
    """The sweep's outputs in their configured order, and the finishing process that writes the
    background ones."""

    def __init__(self, outputs: dict[str, Output]):
        for name, output in outputs.items():
            output.name = name
        self.all = list(outputs.values())
        self.finisher = None

    @classmethod
    def from_config(cls, cfg) -> "Outputs":
        """Each `output.<name>` node instantiated (hydra.utils.instantiate: `_target_` and settings, as
        plain values, which the finishing process is sent)."""
        from hydra.utils import instantiate
        from omegaconf import OmegaConf

        nodes = OmegaConf.to_container(cfg.output, resolve=True, enum_to_str=True)
        return cls({name: instantiate(node, _convert_="all") for name, node in nodes.items()})

    def _background(self, needs_foreground: bool) -> list[dict]:
        return [{"name": o.name, "target": target(o), "settings": o.settings, "handover": o.handover()}
                for o in self.all if o.background and o.needs_foreground == needs_foreground]

    def start_finisher(self) -> None:
        """The finishing process, importing what the background outputs need while the job goes on."""
        from runners.results.finisher import Finisher

        background = [o for o in self.all if o.background]
        if background and self.finisher is None:
            self.finisher = Finisher.start([{"name": o.name, "target": target(o), "settings": o.settings}
                                            for o in background])

    def begin(self, cfg) -> None:
        for output in self.all:
            output.begin(cfg)

    def check(self, cfg, spec) -> None:
        for output in self.all:
            output.check(cfg, spec)

    def start(self, cfg, sweep_id: str, dims: tuple, planned: int = 0, multirun: bool = False) -> None:
        for output in self.all:
            output.planned, output.multirun = planned, multirun
            output.start(cfg, sweep_id, dims)

    def row(self, trial, row: dict, label: str) -> None:
        for output in self.all:
            output.row(trial, row, label)

    def close(self) -> None:
        for output in self.all:
            output.close()

    def abandon(self) -> None:
        """The job ends without its finish: the finishing process is told so and exits."""
        if self.finisher is not None:
            self.finisher.abandon()
            self.finisher = None

    def finish(self, cfg, sweep_id: str, output_dir: Path) -> dict:
        """Every output written: the background ones that need no foreground file start at once in the
        finishing process, the foreground ones are written here in order, then the rest of the
        background ones, left to that process (or, with wait_for_background, each waited for a bounded
        time). Returns what was written and `finish_seconds`:
        where the finish's seconds went, in the order they were spent."""
        from runners.results.store import ResultStore

        seconds: dict[str, float] = {}
        clock = [time.perf_counter()]

        def lap(name: str) -> None:
            now = time.perf_counter()
            seconds[name], clock[0] = now - clock[0], now

        done = Finished(cfg, sweep_id, Path(output_dir), str(cfg.store))
        if any(o.background for o in self.all):
            self.start_finisher()
            self.finisher.begin(done.store, sweep_id, done.output_dir, self._background(False))
        store = ResultStore(cfg.store)
        done.frame = store.load(sweep_id=sweep_id)
        store.close()
        lap("load")
        for output in self.all:
            if not output.background:
                done.files[output.name] = output.write(done)
                lap(output.name)
        self.close()  # the trial-time work (W&B trial runs) is over before the background outputs end
        lap("closing")
        background = {}
        if self.finisher is not None:
            self.finisher.then(done.files, self._background(True))
            background = self.finisher.wait() if cfg.wait_for_background else self.finisher.leave()
            self.finisher = None
            done.files.update(background["files"])
            lap("background")
        written = {name: [str(p) for p in paths] for name, paths in done.files.items()}
        return {"written": written, "background_seconds": background.get("seconds", {}),
                "finish_in_background": background.get("background", False), "finish_seconds": seconds,
                **{key: value for o in self.all for key, value in o.seconds().items()}}
