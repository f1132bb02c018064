"""The runner. The commands a user types are the modules here (`python -m runners.sweep`, `.export`,
`.compare`, `.plot`, `.merge`); what they use is grouped by role: `engine/` plans trials and runs them
(workers, compile pool, scheduler, search, finalists), `measure/` times and checks one call on one device,
`results/` stores, reports and logs what was measured, and `benchmarks/` holds GPU benchmarks of the tool
itself (they print BENCHMARKS.md's tables; not part of the installed package). Installed, each command is
also a console script (`triton-sweep`, `triton-sweep-export`, ...: pyproject.toml)."""


def version() -> str:
    """What `--version` prints: this package's version, as installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"triton-sweep {version('triton-sweep')}"
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "triton-sweep (not installed)"
