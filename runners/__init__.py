"""The runner, in rooms of one concept each (runners/README.md): `model/` what a sweep is, `engine/` what
runs it, `measure/` one measurement on one device, `capture/`, `store/`, `export/`, `compare/` and
`outputs/`; `benchmarks/` holds benchmarks of the tool (not part of the installed package). The commands a
user types are the modules here (`python -m triton_sweep.sweep`, `.plot`, `.merge`, `.revalidate`) and the
rooms' own (`.export`, `.compare`, `.capture`); installed, each is also a console script (`triton-sweep`,
`triton-sweep-export`, ...: pyproject.toml)."""


def version() -> str:
    """What `--version` prints: this package's version, as installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"triton-sweep {version('triton-sweep')}"
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "triton-sweep (not installed)"
