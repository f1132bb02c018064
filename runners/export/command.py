"""Export the tuned configs of a store: `triton-sweep-export --kernel softmax [--key n_cols=cols]
[--tolerance 0.03] [--sweep-id ID] [--interpreter]` writes `<kernel>_configs.json` and `<kernel>_configs.py`
(runners/export/ says what they hold and how the configs are chosen).

The command takes its settings from the sweep's own config (conf/config.yaml's export section: the
built-in kernels' keys, the tolerance, merge), so that it writes the files the end of a sweep writes;
--key, --tolerance, --no-merge and --interpreter override them (runners/export/settings.py resolves them
all).
An external kernel's export takes its dims and key from its KernelSpec with `--spec pkg.module:SPEC` (or
--dims and --key).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from triton_sweep import version
from triton_sweep.model.trial import ConfigError
from triton_sweep.export import STORE_COLUMNS, export_kernel
from triton_sweep.export.settings import ExportError, from_command
from triton_sweep.store.damage import StoreError
from triton_sweep.store.result_store import ResultStore


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=version())
    parser.add_argument("--store", default="outputs/results.sqlite")
    parser.add_argument("--kernel", help="kernel name; default: every kernel with ok GPU trials")
    parser.add_argument("--sweep-id", help="only this sweep's trials (measured or reused by it)")
    parser.add_argument("--out-dir", default="outputs/exports")
    parser.add_argument("--key", nargs="+", default=[], metavar="ARG=DIM",
                        help="the kernel's argument that gives each dim, stored for the prune: n_cols=cols "
                             "(default: the sweep's export.key of the kernel)")
    parser.add_argument("--tolerance", type=float,
                        help="share of the best p50 the covering set may lose at a measured shape "
                             "(default: the sweep's export.tolerance)")
    parser.add_argument("--dims", help="names of the shape dims, comma-separated, for a kernel not built in")
    parser.add_argument("--spec", metavar="PKG.MODULE:ATTR",
                        help="an external kernel's KernelSpec: its dims and export key (as kernel.spec)")
    parser.add_argument("--calls", metavar="SWEEP.yaml",
                        help="weigh the covering set by call counts: a sweep file of triton-sweep-capture "
                             "(its kernel.shapes and kernel.calls)")
    parser.add_argument("--no-merge", action="store_true",
                        help="rewrite the files from this export alone (default: keep other GPUs' sections)")
    parser.add_argument("--interpreter", action="store_true",
                        help="export interpreter timings (backend=interpret) too, as the interpreter's "
                             "section: to try the flow on a CPU, never a GPU's configs (export.interpreter)")
    args = parser.parse_args(argv)
    if not Path(args.store).exists():
        print(f"error: --store: {args.store} does not exist; run a sweep first", file=sys.stderr)
        return 2
    if args.calls and not args.kernel:
        print("error: --calls: name the kernel its shapes are of with --kernel", file=sys.stderr)
        return 2
    if args.key and not args.kernel:
        print("error: --key: name the kernel it belongs to with --kernel", file=sys.stderr)
        return 2
    try:
        store = ResultStore(args.store)
        frame = store.load(sweep_id=args.sweep_id, kernel=args.kernel, columns=STORE_COLUMNS)
        store.check_samples(sweep_id=args.sweep_id, kernel=args.kernel)  # the blobs not read
        store.close()
    except StoreError as error:
        print(f"error: --store: {error}", file=sys.stderr)
        return 2
    kernels = [args.kernel] if args.kernel else sorted(frame["kernel"].unique())
    if not kernels:
        print("error: no trials in the store for that selection", file=sys.stderr)
        return 2
    dims = tuple(d.strip() for d in args.dims.split(",")) if args.dims else None
    status = 0
    for kernel in kernels:
        try:
            settings = from_command(kernel, args.spec, args.key, args.tolerance, not args.no_merge, dims,
                                    args.calls, args.interpreter)
            for path in export_kernel(frame, kernel, args.out_dir, source=args.store, **settings):
                print(path)
        except (ExportError, ConfigError) as error:  # ConfigError: a --spec that cannot be loaded
            print(f"error: {error}", file=sys.stderr)
            status = 2
    return status

