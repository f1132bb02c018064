"""The triton.Config export of every kernel of the sweep (runners/export/), with the settings of
the config's `export` section, into `export_dir`; those settings checked before anything is launched."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from triton_sweep.outputs.output import Finished, Output, shown


class Export(Output):
    def check(self, cfg, spec) -> None:
        from triton_sweep.export.settings import check_sweep

        check_sweep(cfg, spec)

    def write(self, done: Finished, handover: Optional[dict] = None) -> list[Path]:
        from triton_sweep.export import export_kernel
        from triton_sweep.export.settings import ExportError, from_sweep

        paths = []
        for kernel in done.frame["kernel"].unique():
            try:
                settings = from_sweep(done.cfg, kernel)
                paths += export_kernel(done.frame, kernel, done.cfg.export_dir, source=done.store, **settings)
            except ExportError as error:
                print(f"export skipped: {error}")
        if paths:
            print(f"exported: {', '.join(map(shown, paths))}")
        return paths
