"""Plots of one sweep from the store, as PNG: `triton-sweep-plot --sweep-id ID [--out DIR] [--x K]`.

Writes roofline.png, heatmap_<kernel>.png and speedup_<kernel>.png (runners/outputs/plots/figures.py says what
each shows and how winners and baselines are chosen) into --out, default outputs/plots/<sweep id>. A plot
with nothing to show is skipped with a line saying why. Exit status: 0 with a plot written, 1 without,
2 on bad input (the message names the argument; a row no sweep writes, store/row_model.py, is named).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from triton_sweep import version
from triton_sweep.model.trial import ConfigError, checked_name
from triton_sweep.outputs.plots.figures import PLOT_COLUMNS, PlotError, ceilings, render
from triton_sweep.store.damage import StoreError
from triton_sweep.store.result_store import ResultStore
from triton_sweep.store.row_model import StoredRow, checked_rows

READ = tuple(dict.fromkeys(PLOT_COLUMNS + tuple(StoredRow.model_fields)))  # what is plotted, what is checked


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=version())
    parser.add_argument("--store", default="outputs/results.sqlite")
    parser.add_argument("--sweep-id", required=True, help="the sweep to plot (its rows, measured or reused)")
    parser.add_argument("--kernel", help="only this kernel's rows")
    parser.add_argument("--out", help="directory for the PNG files (default: outputs/plots/<sweep id>)")
    parser.add_argument("--x", help="heatmap x axis: a meta-parameter (default: the two with most values)")
    parser.add_argument("--y", help="heatmap y axis: a meta-parameter")
    args = parser.parse_args(argv)
    if args.out is None:  # the sweep id names the folder
        try:
            checked_name(args.sweep_id, "--sweep-id")
        except ConfigError as error:
            print(f"error: {error}; or give --out", file=sys.stderr)
            return 2
    if not Path(args.store).is_file():
        print(f"error: --store: {args.store} does not exist; run a sweep first", file=sys.stderr)
        return 2
    try:
        store = ResultStore(args.store)
        frame = store.load(sweep_id=args.sweep_id, kernel=args.kernel, columns=READ)
        store.check_samples(sweep_id=args.sweep_id, kernel=args.kernel)  # the blobs not read
        checked_rows(frame, args.store)  # a kernel's name names files: a row merged in may hold any
        peaks = ceilings(frame, store) if not frame.empty else {}
        known = sorted(store.load(columns=["sweep_id"])["sweep_id"].unique()) if frame.empty else []
        store.close()
    except StoreError as error:
        print(f"error: --store: {error}", file=sys.stderr)
        return 2
    if frame.empty:
        which = f"sweep {args.sweep_id!r}" + (f" and kernel {args.kernel!r}" if args.kernel else "")
        print(f"error: --sweep-id: no trials of {which} in {args.store} "
              f"(sweeps with rows there: {', '.join(known) or 'none'})", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path("outputs/plots") / args.sweep_id
    try:
        paths = render(frame, out, peaks, args.x, args.y)
    except PlotError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0 if paths else 1


if __name__ == "__main__":
    sys.exit(main())
