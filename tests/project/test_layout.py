"""runners/README.md's rules, checked on the source: imports between rooms point one way (ALLOWED), no
circle of imports, every module says its role in a docstring of at most 12 lines, no source holds a date,
no line of Python is over 110 characters, no function over 60 lines, class over 250 or module over 450,
no room over a quarter of the source."""
import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("kernels", "runners", "hydra_plugins")
# The folder a module lives in -> the name it is imported by (pyproject.toml: runners/ is triton_sweep,
# kernels/ is linked into it as triton_sweep.kernels)
IMPORT_NAMES = {"runners": "triton_sweep", "kernels": "triton_sweep.kernels",
                "hydra_plugins": "hydra_plugins"}
ROLES = ("model", "engine", "measure", "capture", "store", "outputs", "export", "compare", "benchmarks")
MAX_LINE = 110


def modules(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (REPO / folder).rglob("*.py"))


def role(path: Path) -> str:
    """'kernels', 'commands' (runners/*.py and a room's command.py), a room's name, or the top folder."""
    parts = path.relative_to(REPO).parts
    if parts[0] != "runners":
        return parts[0]
    if len(parts) == 2 or parts[-1] in ("command.py", "__main__.py"):  # a room's command is a command
        return "commands"
    return parts[1]


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
            if parts[:2] == ["triton_sweep", "kernels"]:
                found[name] = "kernels"
            elif name in ("triton_sweep", "triton_sweep.version"):
                continue  # the package's version, which every room may state
            elif parts[0] == "triton_sweep":
                found[name] = parts[1] if len(parts) > 1 and parts[1] in ROLES else "commands"
    return found


# role -> the roles it may import besides its own (runners/README.md: imports point one way)
ALLOWED = {
    "kernels": set(),
    "measure": set(),  # one measurement on one device: no model, no processes
    "model": {"measure", "kernels"},  # what a sweep is: no process code
    "engine": {"model", "measure", "kernels"},  # what runs a sweep
    "capture": {"model", "measure", "kernels"},
    "store": {"model", "measure"},
    "export": {"model", "store"},
    "compare": {"model", "store", "export", "measure"},
    "outputs": {"model", "store", "export", "measure"},  # never the engine's processes
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


MAX_MODULE_DOC_LINES = 12


def test_every_module_docstring_is_at_most_12_lines():
    """A module's docstring says what it is and why, read in a minute: a rule's details go to the class
    or function that keeps it, the alternatives weighed to CONTRIBUTING.md ("Design notes"). (The text
    the export generates into an exported module is that module's, not a docstring of ours.)"""
    paths = modules(*PACKAGES)
    long = []
    for path in paths:
        lines = len((ast.get_docstring(ast.parse(path.read_text())) or "").splitlines())
        if lines > MAX_MODULE_DOC_LINES:
            long.append(f"{path.relative_to(REPO)} ({lines} lines)")
    assert len(paths) > 50, "the scan found too few modules to mean anything"
    assert not long, "\n".join(long)


DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def test_no_date_in_the_source():
    """Dates are history, which runners/benchmarks/LOG.md keeps: the source cites a figure by its claim id
    in BENCHMARKS.md (docstrings, comments and strings alike)."""
    dated = [f"{path.relative_to(REPO)}:{number}: {DATE.search(line).group()}"
             for path in modules(*PACKAGES)
             for number, line in enumerate(path.read_text().splitlines(), 1) if DATE.search(line)]
    assert not dated, "\n".join(dated)


def test_no_python_line_over_110_characters():
    """kernels/ too: a kernel's source is hashed as text into every row it measures (kernel_hash, the
    resume key), so its lines were wrapped once, when every kernel gained its export key and default
    shapes and every hash changed anyway. tests/fixtures/golden/ holds files the export wrote, compared
    byte for byte: their lines are the export's, not ours to wrap."""
    golden = REPO / "tests" / "fixtures" / "golden"
    long = [f"{path.relative_to(REPO)}:{number} ({len(line)})"
            for path in modules("runners", "hydra_plugins", "tests", "kernels") if golden not in path.parents
            for number, line in enumerate(path.read_text().splitlines(), 1) if len(line) > MAX_LINE]
    assert not long, "\n".join(long)


MAX_FUNCTION_LINES = 60
MAX_CLASS_LINES = 250
MAX_MODULE_LINES = 450
MAX_ROOM_SHARE = 0.25


def tool_modules() -> list[Path]:
    """The tool's modules (the benchmarks, scripts that print tables, aside)."""
    return [path for path in modules("runners", "kernels", "hydra_plugins") if role(path) != "benchmarks"]


def test_no_function_over_60_no_class_over_250_no_module_over_450_lines():
    """A function that does not fit on a screen does several things, a long class holds several jobs, a
    long module several concepts: split them."""
    long, scanned = [], 0
    for path in tool_modules():
        tree = ast.parse(path.read_text())
        if tree.body and tree.body[-1].end_lineno > MAX_MODULE_LINES:
            long.append(f"{path.relative_to(REPO)} ({tree.body[-1].end_lineno} lines)")
        for node in ast.walk(tree):
            limit = {ast.FunctionDef: MAX_FUNCTION_LINES, ast.AsyncFunctionDef: MAX_FUNCTION_LINES,
                     ast.ClassDef: MAX_CLASS_LINES}.get(type(node))
            if limit:
                scanned += 1
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    long.append(f"{path.relative_to(REPO)}: {node.name} ({lines} lines)")
    assert scanned > 300, "the scan found too few functions to mean anything"
    assert not long, "\n".join(long)


def test_no_room_holds_over_a_quarter_of_the_source():
    """A room (a folder under runners/, its subfolders with it) that holds over a quarter of the tool's
    lines (runners/ and kernels/) is several rooms."""
    lines = {path: len(path.read_text().splitlines()) for path in tool_modules()
             if path.parts[len(REPO.parts)] in ("runners", "kernels")}
    total, rooms = sum(lines.values()), {}
    for path, count in lines.items():
        parts = path.relative_to(REPO).parts
        if parts[0] == "runners" and len(parts) > 2:
            rooms[parts[1]] = rooms.get(parts[1], 0) + count
    assert len(rooms) >= 8, f"too few rooms found: {sorted(rooms)}"
    big = {room: f"{count / total:.0%}" for room, count in rooms.items() if count > MAX_ROOM_SHARE * total}
    assert not big, f"rooms over a quarter of {total} lines: {big}"


def test_the_role_rules_see_real_imports():
    """The scan must find imports where they are, lazy ones included, or the rules above pass vacuously."""
    worker = imported_roles(REPO / "runners" / "engine" / "worker.py")
    assert worker.get("triton_sweep.measure.device") == "measure"  # imported inside the worker's main
    sweep = imported_roles(REPO / "runners" / "sweep.py")
    assert {"engine", "store", "outputs"} <= set(sweep.values())



def module_name(path: Path, root: Path = REPO) -> str:
    """The name a module is imported by (IMPORT_NAMES: its folder's)."""
    folder, *parts = path.relative_to(root).with_suffix("").parts
    return ".".join([IMPORT_NAMES[folder]] + (parts[:-1] if parts[-1] == "__init__" else parts))


def imported_modules(path: Path, project: set[str]) -> set[str]:
    """The project modules the file names in its imports: "from a import b" names a.b where b is a module,
    else a. A package's __init__ that Python runs before its submodule is not named, so not counted."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in project else node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found & project


def import_graph(root: Path = REPO) -> dict[str, set[str]]:
    """Project module -> the project modules it imports (at the top or inside a function)."""
    paths = {module_name(path, root): path
             for folder in PACKAGES for path in sorted((root / folder).rglob("*.py"))}
    return {name: imported_modules(path, set(paths)) - {name} for name, path in paths.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def enter(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        return node, iter(sorted(graph[node]))

    for root in graph:
        if root in index:
            continue
        work = [enter(root)]
        while work:
            node, edges = work[-1]
            for child in edges:
                if child not in index:
                    work.append(enter(child))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = [stack.pop()]
                    while component[-1] != node:
                        component.append(stack.pop())
                    on_stack.difference_update(component)
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_module_imports_itself_through_others():
    """A circle of imports is two rooms that are one: each needs the other to be read or changed."""
    graph = import_graph()
    assert sum(len(edges) for edges in graph.values()) > 100, "the graph is too thin to mean anything"
    assert not circles(graph), "\n".join(" <-> ".join(circle) for circle in circles(graph))


def test_the_circle_check_sees_a_circle(tmp_path):
    """The check above on a tree that has one: a imports b at the top, b imports from c, c from a lazily;
    d imports a and is in no circle."""
    results = tmp_path / "runners" / "results"
    results.mkdir(parents=True)
    (results / "__init__.py").write_text('"""results"""\n')
    (results / "a.py").write_text('"""a"""\nfrom triton_sweep.results import b\n')
    (results / "b.py").write_text('"""b"""\nfrom triton_sweep.results.c import g\n')
    (results / "c.py").write_text('"""c"""\ndef g():\n    from triton_sweep.results.a import x\n')
    (results / "d.py").write_text('"""d"""\nimport triton_sweep.results.a\n')
    graph = import_graph(tmp_path)
    assert graph["triton_sweep.results.d"] == {"triton_sweep.results.a"}
    assert circles(graph) == [["triton_sweep.results.a", "triton_sweep.results.b", "triton_sweep.results.c"]]


def test_the_export_is_one_room():
    """The export is one package (runners/export/: the library and its command): a module or folder named
    export anywhere else under runners/ is a second room for it."""
    named = sorted(str(path.relative_to(REPO)) for path in (REPO / "runners").rglob("export*")
                   if "export" in path.stem.split("_")[0] and REPO / "runners" / "export" not in path.parents
                   and "__pycache__" not in path.parts)
    assert named == ["runners/export", "runners/outputs/export_files.py"]


def test_the_libraries_of_results_import_neither_torch_nor_triton():
    """Reading a store, drawing its plots, writing its W&B tables, exporting it and comparing two of them
    need neither torch nor Triton: a fresh interpreter imports them all and finds neither loaded (a
    generated export imports Triton when it is used, not when the library is read)."""
    import subprocess
    import sys

    libraries = ["triton_sweep." + name for name in (
        "outputs.table.report", "outputs.plots.figures", "outputs.wandb.tables", "export", "export.settings",
        "export.rows", "export.cover", "export.fileformat", "export.render", "export.generalization",
        "export.runtime", "compare.matching", "compare.report", "compare.command", "revalidate",
        "export.command")]
    probe = (f"import sys\nfor name in {libraries!r}:\n    __import__(name)\n"
             "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))\n"
             "print(sorted(m for m in sys.modules if m.startswith('triton_sweep.')))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True,
                          timeout=120)
    loaded, project = done.stdout.splitlines()
    assert loaded == "[]", f"loaded by the libraries: {loaded}"
    assert "'triton_sweep.export.runtime'" in project and "'triton_sweep.compare.command'" in project
