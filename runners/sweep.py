"""Sweep a Triton kernel's configs: `python -m triton_sweep.sweep [overrides]` (add -m for a Hydra multirun).

The Hydra entry: it composes the config (the tool's conf/ and, where the command runs, its sweeps/ and
conf/: hydra_plugins/triton_sweep_home), runs one job (runners/engine/job.py) into the store it should
write with the outputs the config selects (runners/outputs/), and reports a bad input, a YAML
error, an unread `+` field or a damaged store in one line naming it (exit 2). At a multirun's end
SweepEndCallback merges the jobs' own stores into the store of record (runners/merge.py) and writes the
outputs once for all of them. Once the input is checked, the command imports torch and Triton and forks
the home server its workers are forked from (runners/engine/fork_server.py), with them imported once."""
from __future__ import annotations

import contextlib
import difflib
import itertools
import json
import os
import shutil
import sys
import traceback
from pathlib import Path
from typing import Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from triton_sweep import version
from triton_sweep.engine.hydra_jobs import runs_jobs_apart, stop_on_signals, stopped_status
from triton_sweep.model.files import write_atomic
from triton_sweep.model.schema import CONF_DIR

NESTING_LIMIT = 32  # levels of lists and mappings in an override or a config file; Hydra recurses per level

def sweep_id_of(cfg: DictConfig) -> str:
    """cfg.sweep_id (checked: it names folders), else the name of the Hydra run directory (multirun: the
    sweep directory)."""
    from triton_sweep.model.trial import checked_name

    if cfg.sweep_id is not None:
        return checked_name(str(cfg.sweep_id), "sweep_id")
    hydra_conf = HydraConfig.get()
    directory = hydra_conf.sweep.dir if hydra_conf.mode == RunMode.MULTIRUN else hydra_conf.run.dir
    return Path(directory).name


WRITER = ".writer"  # in a run (or multirun) folder: the lock its sweep holds while it runs


def claim_folder(folder: Path) -> Optional[str]:
    """One writer a run folder: None, or the refusal of a second sweep into it while the first runs (two
    that start in the same second get the same timestamped folder, and would share its files)."""
    from triton_sweep.model.files import claim
    from triton_sweep.outputs.output import shown

    other = claim(folder / WRITER)
    return other and (f"{shown(folder)} is being written by another sweep (pid {other}), started in the same "
                      "second: run this one again, or give it a hydra.run.dir of its own")


def check_fields(cfg: DictConfig) -> None:
    """ConfigError naming a field the schema does not declare (added with `+`) and the sweep would ignore."""
    from triton_sweep.model.schema import unknown_field
    from triton_sweep.model.trial import ConfigError

    name = unknown_field(cfg)
    if name:
        parent, _, leaf = name.rpartition(".")
        known = set(OmegaConf.select(cfg, parent).keys() if parent else cfg.keys()) - {leaf, "hydra"}
        raise ConfigError(not_a_field(name, known, " (a `+` adds it, and nothing reads it)"))


def not_a_field(name: str, known, why: str = "") -> str:
    """The line for a dotted name the sweep's config does not declare, with the near one and the known."""
    parent, _, leaf = name.rpartition(".")
    near = difflib.get_close_matches(leaf, known, n=1)
    if not known:  # an open mapping (an external kernel's kernel.space): its keys come with a `+`
        return f"{name}: not a field of the sweep's config{why}; {parent} has none yet: +{name}=... adds one"
    return (f"{name}: not a field of the sweep's config{why}"
            + (f" (did you mean {parent + '.' if parent else ''}{near[0]}?)" if near else "")
            + f"; {parent or 'the config'} has: {', '.join(sorted(known))}")


def config_folders(group: str) -> list[Path]:
    """Where Hydra looks for a config group's files, first to last: this directory's sweeps/ (the group
    sweep), the tool's conf/, this directory's conf/ (hydra_plugins/triton_sweep_home)."""
    here = Path.cwd()
    return ([here / "sweeps"] if group == "sweep" else []) + [CONF_DIR / group, here / "conf" / group]


def config_file(group: str, name: str) -> Optional[Path]:
    """The file Hydra takes for `group=name`, or None."""
    return next((f / f"{name}.yaml" for f in config_folders(group) if (f / f"{name}.yaml").is_file()), None)


def depth(value) -> int:
    """Levels of lists and mappings in a value loaded from YAML."""
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
    return 0 if items is None else 1 + max(map(depth, items), default=0)


def check_yaml_files(argv: list[str]) -> None:
    """A YAML error in a config file the command line picks (+sweep=NAME, kernel=NAME), or its nesting
    past NESTING_LIMIT, in one line, file:line:column, exit 2: Hydra would end in a traceback."""
    import yaml

    for arg in argv:
        group, sep, value = arg.lstrip("+~").partition("=")
        if not sep or not group or group.startswith("hydra"):
            continue
        for name in value.strip("[]").split(","):
            path = config_file(group, name.strip())
            if path is None:
                continue
            try:
                levels = depth(yaml.safe_load(path.read_text()))
            except RecursionError:
                levels = sys.getrecursionlimit()
            except yaml.YAMLError as error:
                mark = getattr(error, "problem_mark", None)
                where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
                said = ": ".join(filter(None, (getattr(error, n, None) for n in ("context", "problem"))))
                refuse(f"{arg}: {where}: {said or error}")
                sys.exit(2)
            if levels > NESTING_LIMIT:
                refuse(f"{arg}: {path}: nested {'past ' if levels == sys.getrecursionlimit() else ''}"
                       f"{levels} deep; at most {NESTING_LIMIT} levels")
                sys.exit(2)


def say_sweep_file() -> None:
    """Which file +sweep=NAME took: this directory's, where it has one (over the tool's own)."""
    name = HydraConfig.get().runtime.choices.get("sweep")
    path = config_file("sweep", name) if name else None
    if path is not None:
        own = CONF_DIR / "sweep" / f"{name}.yaml"
        over = own.is_file() and own.resolve() != path.resolve()
        print(f"+sweep={name}: {path}" + (" (over the tool's own file of that name)" if over else ""))


def process_age_s() -> Optional[float]:
    """Seconds since this process started (Linux /proc, to 10 ms); None where that cannot be read."""
    try:
        with open("/proc/self/stat") as stat:
            start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime") as uptime:
            return float(uptime.read().split()[0]) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def job_store_paths(cfg: DictConfig) -> tuple[str, Optional[Path]]:
    """Where this job writes its rows, and the store it also resumes from (None: none). cfg.store, except
    in a multirun whose launcher runs the jobs apart, perhaps on several machines, where an SQLite file
    must not be shared: there a store of the job's own in its job directory (merged into cfg.store at
    the multirun's end), and the copy of cfg.store that the multirun's start left in the sweep directory."""
    from triton_sweep.merge import JOB_STORE, PRIOR_STORE

    hydra_conf = HydraConfig.get()
    if hydra_conf.mode != RunMode.MULTIRUN or not runs_jobs_apart(hydra_conf):
        return str(cfg.store), None
    prior = Path(hydra_conf.sweep.dir) / PRIOR_STORE
    return str(Path(hydra_conf.runtime.output_dir) / JOB_STORE), (prior if prior.is_file() else None)


def run_job(cfg: DictConfig, sweep_id: str, output_dir: Path, finish: bool) -> dict:
    """Measure every trial of one job (runners/engine/job.py) into its store, with the outputs the config
    selects; returns the job summary (also written to output_dir/summary.json)."""
    from triton_sweep.model.plan import check_early

    check_fields(cfg)
    check_early(cfg)  # before torch is imported: a refusal in about a second
    from triton_sweep.engine.job import Job
    from triton_sweep.outputs import Outputs
    from triton_sweep.store.result_store import ResultStore

    say_sweep_file()
    store_path, prior = job_store_paths(cfg)
    before_job_s = process_age_s() if HydraConfig.get().mode != RunMode.MULTIRUN else None
    outputs = Outputs.from_config(cfg)
    if cfg.dry_run:  # the plan printed, nothing launched or written (runners/engine/dry_run.py)
        from triton_sweep.engine.dry_run import dry_run
        from triton_sweep.store.reader import StoreReader

        return dry_run(cfg, sweep_id, StoreReader, outputs.check)
    from triton_sweep.engine.fork_server import start_wanted_home_server
    from triton_sweep.model.files import claim_sweep_id

    if finish:  # a job of its own; a multirun's start claims its sweep id for all its jobs
        claim_sweep_id(cfg.store, sweep_id)
    start_wanted_home_server()
    job = Job(cfg, sweep_id, output_dir, store_path, prior, ResultStore, outputs, before_job_s)
    return job.run(finish)


class SweepEndCallback(Callback):
    """At the end of a multirun: one table, parquet file, export and W&B summary for all its jobs; exit 1
    if a job failed. Where the launcher runs the jobs apart (runners/engine/hydra_jobs.py), each with a store
    of its own: at the start, the rows that an earlier run into the same sweep directory left in its job
    stores
    are merged into the store of record (its end may never have come), which is then copied into the sweep
    directory for the jobs to resume from; at the end, the job stores are merged into it first."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        from triton_sweep.model.trial import ConfigError, checked_name
        from triton_sweep.merge import STARTED, gather, write_prior
        from triton_sweep.model.files import claim_sweep_id
        from triton_sweep.store.damage import DamagedStore, StoreError, damage_of

        try:  # every job would stop on these: none is started
            check_fields(config)
            if config.sweep_id is not None:
                checked_name(str(config.sweep_id), "sweep_id")
            damage = damage_of(config.store)
            if damage:
                raise DamagedStore(config.store, damage)
        except (ConfigError, StoreError) as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(2)
        if config.dry_run:
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        busy = claim_folder(sweep_dir)  # held by this process, whose jobs share the sweep's id
        if busy is None:
            try:
                claim_sweep_id(str(config.store), str(config.sweep_id or sweep_dir.name))
            except ConfigError as error:
                busy = str(error)
                remove_run_folder(sweep_dir)  # its own: nothing written yet
        if busy:
            refuse(busy)
            sys.exit(2)
        if not runs_jobs_apart(config.hydra):
            return
        gather(sweep_dir, config.store)
        STARTED.append((sweep_dir, str(config.store)))  # merged by cli() if the multirun is stopped
        prior = write_prior(config.store, sweep_dir)
        if prior is not None:
            print(f"the jobs resume from {prior}, a copy of {config.store}")

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        from triton_sweep.merge import PRIOR_STORE, gather

        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_id = str(config.sweep_id) if config.sweep_id else sweep_dir.name
        unmerged = []
        if config.dry_run:  # nothing was written: nothing to merge or finish
            remove_run_folder(sweep_dir)
        elif runs_jobs_apart(config.hydra):
            unmerged = gather(sweep_dir, config.store)
            (sweep_dir / PRIOR_STORE).unlink(missing_ok=True)  # a copy of the store of record, used up
        if not config.dry_run:
            from triton_sweep.outputs import Outputs

            Outputs.from_config(config).finish(config, sweep_id, sweep_dir)
        failed = [path.parent.name for path in sorted(sweep_dir.glob("*/summary.json"))
                  if "error" in json.loads(path.read_text())]
        if failed:
            print(f"error: {len(failed)} job(s) of the multirun failed: {', '.join(failed)} "
                  f"(messages above and in {sweep_dir}/<job>/summary.json)", file=sys.stderr)
        if unmerged:
            print(f"error: {len(unmerged)} job store(s) could not be merged into {config.store}: "
                  f"{', '.join(unmerged)}", file=sys.stderr)
        if failed or unmerged:
            sys.exit(1)


@contextlib.contextmanager
def logged(path: Path):
    """What this process prints while in the block also goes to `path` (the job's log, Hydra's
    job_logging file: sweep.log), so that the file holds what the terminal showed; yields the file. A link
    at `path` is refused (exit 2), never written through."""
    if path.is_symlink():
        print(f"error: {path} is a link: the sweep's log is never written through one", file=sys.stderr)
        sys.exit(2)
    no_follow = lambda name, flags: os.open(name, flags | os.O_NOFOLLOW, 0o666)  # noqa: E731
    with open(path, "a", buffering=1, opener=no_follow) as log:
        class Copy:  # sys.stdout, each write copied to the log
            def write(self, text: str) -> int:
                log.write(text)
                return shown.write(text)

            def __getattr__(self, name: str):
                return getattr(shown, name)

        shown, sys.stdout = sys.stdout, Copy()
        try:
            yield log
        finally:
            sys.stdout = shown


def refuse(message: str, log=None) -> None:
    """An error line on stderr, after what was printed before it, and in the job's log where there is one."""
    sys.stdout.flush()
    print(f"error: {message}", file=sys.stderr)
    if log is not None:
        log.write(f"error: {message}\n")


def remove_run_folder(output_dir: Path, log_name: str = "sweep.log") -> None:
    """A run folder holding only what Hydra and the job's log wrote (a refused run, a dry run), and the
    folders above it in the working directory that this leaves empty (outputs/runs/): nothing is left."""
    here, resolved = Path.cwd().resolve(), output_dir.resolve()
    if (resolved == here or output_dir.is_symlink() or not output_dir.is_dir()
            or {p.name for p in output_dir.iterdir()} - {".hydra", log_name, "multirun.yaml", WRITER}):
        return
    shutil.rmtree(resolved)
    for folder in resolved.parents:
        if here not in folder.parents or any(folder.iterdir()):
            break
        folder.rmdir()


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> Optional[dict]:
    hydra_conf = HydraConfig.get()
    multirun = hydra_conf.mode == RunMode.MULTIRUN
    output_dir = Path(hydra_conf.runtime.output_dir)
    log_path = output_dir / f"{hydra_conf.job.name}.log"
    sweep_id = cfg.sweep_id
    alone = not multirun and not cfg.dry_run  # a multirun's jobs share its sweep id: its start claims it
    busy = claim_folder(output_dir) if alone else None  # its sweep id: claimed by run_job
    if busy:
        refuse(busy)
        sys.exit(2)
    with logged(log_path) as log:
        try:
            sweep_id = sweep_id_of(cfg)
            done = run_job(cfg, sweep_id, output_dir, finish=not multirun)
            if cfg.dry_run:
                log.close()
                remove_run_folder(output_dir, log_path.name)
            return done
        except Exception as error:  # bad input; or any other failure of a multirun's job: keep the others'
            from triton_sweep.model.trial import ConfigError
            from triton_sweep.store.damage import StoreError

            if isinstance(error, (ConfigError, StoreError)):
                refuse(str(error), log)
                if not multirun:
                    log.close()
                    remove_run_folder(output_dir, log_path.name)
                    sys.exit(2)
            elif not multirun:
                raise
            else:
                traceback.print_exc(file=log)
                traceback.print_exc()
            failure = (str(error) if isinstance(error, (ConfigError, StoreError))
                       else f"{type(error).__name__}: {error}")
    # The other jobs go on; the end-of-sweep callback still writes the sweep's results, reports this
    # job and exits 1.
    write_atomic(output_dir / "summary.json", json.dumps({"sweep_id": sweep_id, "error": failure}))
    return None


def composition_error(error: Exception) -> str:
    """Hydra's error for a command line it cannot compose (4 to 20 lines) as one line naming the field."""
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf.errors import ConfigAttributeError

    cause = error.__cause__
    if getattr(cause, "full_key", None):  # OmegaConf's: an unknown key, a wrong type or value
        said = str(cause).splitlines()[0]
        if isinstance(cause, ConfigAttributeError) and cause.parent_node is not None:
            return not_a_field(cause.full_key, set(cause.parent_node.keys()) - {"hydra"})
        return f"{cause.full_key}: {said}"
    if isinstance(error, MissingConfigException) and error.options:
        group, _, name = error.missing_cfg_file.rpartition("/")
        near = difflib.get_close_matches(name, error.options, n=1)
        return (f"{group}={name}: no such option" + (f" (did you mean {group}={near[0]}?)" if near else "")
                + f"; {group} has: {', '.join(error.options)}")
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if isinstance(error, OverrideParseException):
        return f"{error.override}: Hydra cannot parse it: {lines[-2] if len(lines) > 1 else lines[0]}"
    return "; ".join(lines)


def check_nesting(argv: list[str]) -> None:
    """An override nested past NESTING_LIMIT brackets in one line (Hydra's parser recurses per level)."""
    for arg in argv:
        depth = max(itertools.accumulate((c in "[{") - (c in "]}") for c in arg), default=0)
        if depth > NESTING_LIMIT:
            refuse(f"{arg.partition('=')[0]}: nested {depth} deep; at most {NESTING_LIMIT} levels")
            sys.exit(2)


def cli() -> None:
    """`python -m triton_sweep.sweep [overrides]`, and the console script `triton-sweep` (runners/cli.py):
    a command line Hydra cannot compose is one line (exit 2), and so is Ctrl-C (exit 130)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from triton_sweep.model.schema import register_configs

    from triton_sweep.engine.fork_server import want_home_server

    if sys.argv[1:] == ["--version"]:
        print(f"{version()} (Hydra {hydra.__version__})")
        return
    want_home_server()  # the command's; a launcher's job process has none
    stop_on_signals()  # SIGTERM stops the sweep as Ctrl-C does: workers and jobs stopped, rows kept
    check_nesting(sys.argv[1:])
    check_yaml_files(sys.argv[1:])
    register_configs()
    whole = "HYDRA_FULL_ERROR" in os.environ  # the user asked for Hydra's tracebacks
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises, rather than print and exit 1
    try:
        main()
    except (HydraException, OmegaConfBaseException) as error:
        if whole:
            raise
        refuse(composition_error(error))
        sys.exit(2)
    except KeyboardInterrupt:
        from triton_sweep.merge import gather_stopped

        gather_stopped()
        refuse("interrupted: every row measured so far is in the store; the same command resumes, "
               "measuring only what is missing")
        sys.exit(stopped_status())


if __name__ == "__main__":
    cli()
