"""Merge result stores into one:

    python -m triton_sweep.merge A.sqlite B.sqlite ... --into outputs/results.sqlite
    triton-sweep-merge --recover outputs/results.sqlite --into outputs/recovered.sqlite

SQLite must not be shared over a network filesystem, so the jobs of a multirun (hydra/launcher=local,
slurm, ray_gpus) each write a store of their own, merged at its end into the store of record
(triton_sweep.sweep.SweepEndCallback); this command does it by hand (a launcher died, several clusters).
A row the target already holds is skipped, every other row copied with its sweeps and the device
ceilings, nothing overwritten (ResultStore.merge_from); it prints per source what it kept and skipped. A
damaged store is refused in one line; `--recover` copies out the rows SQLite can still read, and says how
many were lost. A row no sweep writes (store/row_model.py) refuses the merge, exit 2, before any write."""
from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path
from typing import Collection, Iterable

from triton_sweep import version
from triton_sweep.store.damage import DamagedStore, StoreError, reading
from triton_sweep.store.merging import MergeCounts
from triton_sweep.store.result_store import ResultStore
from triton_sweep.store.row_model import MalformedRow, checked_rows
from triton_sweep.store.sources import StoredColumns, open_source

JOB_STORE = "results.sqlite"  # a job's own store, in its job directory
PRIOR_STORE = "prior.sqlite"  # the store of record when the multirun started, in its sweep directory


def describe(source: str | Path, counts: MergeCounts) -> str:
    kernels = ", ".join(f"{kernel} {n}" for kernel, n in sorted(counts.kept_by_kernel.items()))
    text = (f"{source}: kept {counts.kept} rows" + (f" ({kernels})" if kernels else "")
            + f", skipped {counts.skipped} the target already held; "
            f"{counts.memberships} sweep memberships added; "
            f"device ceilings: kept {counts.peaks_kept}, skipped {counts.peaks_skipped}")
    if counts.moved:
        text += (f"; {counts.moved} rows of the target inserted again after older arrivals of their trial "
                 "(new ids, same content: the newest row of a trial keeps the largest id)")
    if counts.unreadable:
        text += f"; {counts.unreadable} rows SQLite could not read (lost)"
    if counts.unknown_columns:
        text += ("; warning: columns this version does not know, not copied: "
                 f"{', '.join(counts.unknown_columns)} (merge with the version that wrote them)")
    return text


def merge_stores(sources: Iterable[str | Path], into: str | Path, recover: bool = False,
                 checked: Collection[str] = ()) -> tuple[list[MergeCounts], list[str]]:
    """Merge each source into `into`, one transaction per source, printing what each gave; a source
    that cannot be read is reported and left out, the others are merged. recover: the sources are
    damaged stores, of which the rows SQLite can read are copied; checked: sources found sound, every row
    well-formed, just before (malformed), not checked again. Returns the counts and the sources left out.
    A damaged target raises DamagedStore before anything is written."""
    store = ResultStore(into)
    results, failed = [], []
    try:
        for source in sources:
            try:
                counts = store.merge_from(source, recover=recover, checked=str(source) in checked)
            except (OSError, ValueError, sqlite3.DatabaseError) as error:
                detail = error.detail if isinstance(error, DamagedStore) else error
                said = error if isinstance(error, MalformedRow) else f"{source}: not merged: {detail}"
                print(f"error: {said}", file=sys.stderr)
                failed.append(str(source))
                continue
            print(describe(source, counts))
            results.append(counts)
    finally:
        store.close()
    return results, failed


def malformed(sources: Iterable[str | Path]) -> tuple[str | None, set[str]]:
    """The first row of the sources that no sweep writes (store/row_model.py), named in one line (None
    where there is none), and the sources found sound with every row checked. A source that cannot be read
    is left to merge_stores, which names it."""
    checked = set()
    for source in sources:
        try:
            src = open_source(Path(source), immutable=False)
            try:
                with reading(source):
                    checked_rows(StoredColumns(src, "main.trials", "timestamp, id"), str(source))
            finally:
                src.close()
        except MalformedRow as error:
            return str(error), checked
        except (OSError, ValueError, sqlite3.DatabaseError):
            continue
        checked.add(str(source))
    return None, checked


def job_stores(sweep_dir: str | Path, exclude: str | Path | None = None) -> list[Path]:
    """The job stores under a sweep directory (job subdirectories at any depth), in job order."""
    sweep_dir = Path(sweep_dir)
    skip = Path(exclude).resolve() if exclude is not None else None
    found = [path for path in sweep_dir.rglob(JOB_STORE)
             if path.parent != sweep_dir and ".submitit" not in path.parts and path.resolve() != skip]

    def job_order(path: Path):
        parts = path.relative_to(sweep_dir).parts[:-1]
        return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in parts]

    return sorted(found, key=job_order)


def gather(sweep_dir: str | Path, into: str | Path) -> list[str]:
    """Merge every job store of a sweep directory into the store of record `into`; returns the job
    stores that could not be merged."""
    stores = job_stores(sweep_dir, exclude=into)
    if not stores:
        return []
    print(f"merging the {len(stores)} job store(s) of {sweep_dir} into {into}")
    results, failed = merge_stores(stores, into)
    kept, skipped = sum(c.kept for c in results), sum(c.skipped for c in results)
    print(f"merged into {into}: kept {kept} rows, skipped {skipped} (already held), from {len(results)} of "
          f"{len(stores)} job store(s)")
    return failed


STARTED: list = []  # (sweep directory, store of record) of each multirun this process started, jobs apart


def gather_stopped() -> None:
    """A multirun was stopped (its launcher stopped its jobs and waited for them): the rows its jobs stored
    go into the store of record, as at its end, where the same command run again finds them."""
    for sweep_dir, store in STARTED:
        gather(sweep_dir, store)
        (Path(sweep_dir) / PRIOR_STORE).unlink(missing_ok=True)


def write_prior(store_path: str | Path, sweep_dir: str | Path) -> Path | None:
    """Copy the store of record into the sweep directory for the jobs to resume from; None without one.

    A file nobody writes while the jobs run, on the filesystem they share; the rows a job reuses are
    copied into its own store, so that its store alone holds every row of its part of the sweep."""
    if not Path(store_path).is_file():
        return None
    store = ResultStore(store_path)
    try:
        return store.snapshot(Path(sweep_dir) / PRIOR_STORE)
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="triton-sweep-merge",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=version())
    parser.add_argument("sources", nargs="+", help="store files to merge (a job's results.sqlite, ...)")
    parser.add_argument("--into", required=True, help="the store that receives them (created if missing)")
    parser.add_argument("--recover", action="store_true",
                        help="the sources are damaged stores: copy the rows SQLite can still read")
    args = parser.parse_args(argv)
    problem, checked = (None, set()) if args.recover else malformed(args.sources)
    if problem:
        print(f"error: {problem}; nothing was merged (merge the other stores without it)", file=sys.stderr)
        return 2
    try:
        results, failed = merge_stores(args.sources, args.into, args.recover, checked)
    except StoreError as error:  # the target: nothing was written to it
        print(f"error: --into: {error}", file=sys.stderr)
        return 2
    print(f"{args.into}: kept {sum(c.kept for c in results)} rows, skipped {sum(c.skipped for c in results)} "
          f"(already held), from {len(results)} of {len(args.sources)} source(s)")
    if failed:
        print(f"error: {len(failed)} source(s) not merged: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
