"""The layout README's "Layout" section states, checked on the source: imports point one way, every module
says its role in a docstring, no line of Python is over 110 characters, and no function of the tool is
over 80 lines."""
import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("kernels", "runners", "hydra_plugins")
ROLES = ("engine", "measure", "results", "benchmarks")
MAX_LINE = 110


def modules(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (REPO / folder).rglob("*.py"))


def role(path: Path) -> str:
    """'kernels', 'commands' (runners/*.py), a role folder's name, or the top-level folder."""
    parts = path.relative_to(REPO).parts
    if parts[0] != "runners":
        return parts[0]
    return parts[1] if len(parts) > 2 else "commands"


def imported_roles(path: Path) -> dict[str, str]:
    """Every project module the file imports (at the top or inside a function) -> the role it sits in."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            raise AssertionError(f"{path}: a relative import; the project imports by absolute name, which "
                                 "this check reads")
        if isinstance(node, ast.ImportFrom):
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "kernels":
                found[name] = "kernels"
            elif parts[0] == "runners":
                found[name] = parts[1] if len(parts) > 1 and parts[1] in ROLES else "commands"
    return found


# role -> the roles it may import besides its own (README, "Layout": imports point one way)
ALLOWED = {
    "kernels": set(),
    "measure": set(),
    "engine": {"measure", "kernels"},
    "results": {"engine", "measure"},
    "hydra_plugins": {"engine"},
}


@pytest.mark.parametrize("source_role", sorted(ALLOWED))
def test_imports_point_one_way(source_role):
    wrong, scanned = [], 0
    for path in modules(*PACKAGES):
        if role(path) != source_role:
            continue
        scanned += 1
        for name, target in imported_roles(path).items():
            if target != source_role and target not in ALLOWED[source_role]:
                wrong.append(f"{path.relative_to(REPO)} imports {name} ({target})")
    assert scanned, f"no module has the role {source_role!r}: the rule checks nothing"
    assert not wrong, "\n".join(wrong)


def test_nothing_of_the_tool_imports_the_benchmarks():
    wrong = [f"{path.relative_to(REPO)} imports {name}"
             for path in modules(*PACKAGES) if role(path) != "benchmarks"
             for name, target in imported_roles(path).items() if target == "benchmarks"]
    assert not wrong, "\n".join(wrong)


def test_every_module_says_its_role():
    missing = [str(path.relative_to(REPO)) for path in modules(*PACKAGES)
               if not ast.get_docstring(ast.parse(path.read_text()))]
    assert not missing, f"modules without a docstring: {missing}"


def test_no_python_line_over_110_characters():
    """kernels/ too: a kernel's source is hashed as text into every row it measures (kernel_hash, the
    resume key), so its lines were wrapped once, when every kernel gained its export key and default
    shapes (issue 25) and every hash changed anyway."""
    long = [f"{path.relative_to(REPO)}:{number} ({len(line)})"
            for path in modules("runners", "hydra_plugins", "tests", "kernels")
            for number, line in enumerate(path.read_text().splitlines(), 1) if len(line) > MAX_LINE]
    assert not long, "\n".join(long)


MAX_FUNCTION_LINES = 80


def test_no_function_of_the_tool_over_80_lines():
    """A function that does not fit on a screen does several things: split it (benchmarks, scripts that
    print tables, aside)."""
    long, scanned = [], 0
    for path in modules("runners", "hydra_plugins"):
        if role(path) == "benchmarks":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                scanned += 1
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}: {node.name} ({lines} lines)")
    assert scanned > 100, "the scan found too few functions to mean anything"
    assert not long, "\n".join(long)


def test_the_role_rules_see_real_imports():
    """The scan must find imports where they are, lazy ones included, or the rules above pass vacuously."""
    worker = imported_roles(REPO / "runners" / "engine" / "worker.py")
    assert worker.get("runners.measure.device") == "measure"  # imported inside the worker's main
    sweep = imported_roles(REPO / "runners" / "sweep.py")
    assert {"engine", "results"} <= set(sweep.values())
