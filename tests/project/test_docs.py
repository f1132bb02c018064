"""The reference pages hold to the code: conf/README.md's field tables are what the schema generates and name
every field, kernels/README.md names every KernelSpec field and built-in kernel, and every relative link of
the project's pages leads to a file that exists. Fast: no subprocess, no GPU."""
import dataclasses
import os
import re
import typing
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from triton_sweep.kernels import builtin
from triton_sweep.kernels.spec import KernelSpec
from triton_sweep.model.schema import CONF_DIR, SweepConf, reference, register_configs

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
PAGES = ["conf/README.md", "kernels/README.md", "runners/README.md", "runners/measure/README.md",
         "runners/export/README.md", "runners/compare/GATE.md"]
BEGIN, END = "<!-- BEGIN generated", "<!-- END generated -->"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")  # [text](target "title")
SCHEMES = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # https:, mailto:, ...


def schema_fields(schema: type = SweepConf, prefix: str = "") -> list[str]:
    """The dotted name of every field of the composed config's schema, sections and their fields."""
    names, hints = [], typing.get_type_hints(schema)
    for item in dataclasses.fields(schema):
        names.append(prefix + item.name)
        if dataclasses.is_dataclass(hints[item.name]):
            names += schema_fields(hints[item.name], f"{prefix}{item.name}.")
    return names


def generated_section() -> str:
    text = (CONF / "README.md").read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, "conf/README.md: the generated section's markers"
    start = text.index("\n", text.index(BEGIN)) + 1
    return text[start:text.index(END)]


def test_every_schema_field_is_in_the_generated_tables():
    section, names = generated_section(), schema_fields()
    assert len(names) > 40 and "timing.min_samples" in names and "verbose" in names
    missing = [name for name in names if f"`{name}`" not in section]
    assert not missing, f"conf/README.md does not name {missing}: run python -m triton_sweep.model.schema"


def test_the_generated_tables_are_the_schemas():
    assert generated_section() == reference(), (
        "conf/README.md's generated section is stale: paste the output of python -m "
        "triton_sweep.model.schema between its markers")


SECTIONS = {item.name for item in dataclasses.fields(SweepConf)
            if dataclasses.is_dataclass(typing.get_type_hints(SweepConf)[item.name])}


def test_every_field_has_a_meaning():
    """A row a field, each ending in a meaning: a field with neither a comment beside or above it in
    schema.py nor an entry of STOP_RULE_DOCS would show an empty cell."""
    rows = [line for line in reference().splitlines() if line.startswith("| `")]
    assert len(rows) == len([name for name in schema_fields() if name not in SECTIONS])
    empty = [row.split(" | ")[0] for row in rows if row.endswith("|  |")]
    assert not empty, f"fields without a meaning (a comment beside or above them in schema.py): {empty}"


def test_the_documented_defaults_are_the_composed_ones():
    """The tables show the schema's defaults; config.yaml and its default options must keep them (the
    kernel and the outputs, which the groups choose, aside)."""
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        composed = OmegaConf.to_container(compose("config"), resolve=False)
    schema = OmegaConf.to_container(OmegaConf.structured(SweepConf), resolve=False)
    for name in ("kernel", "output", "hydra"):
        composed.pop(name, None)
        schema.pop(name, None)
    assert composed == schema


def test_every_kernel_spec_field_and_built_in_kernel_is_in_kernels_readme():
    text = (REPO / "kernels" / "README.md").read_text()
    fields = [item.name for item in dataclasses.fields(KernelSpec)]
    assert len(fields) > 15
    missing = [name for name in fields if f"`{name}`" not in text]
    assert not missing, f"kernels/README.md does not explain KernelSpec's {missing}"
    kernels = [name for name in builtin() if f"`{name}`" not in text]
    assert not kernels, f"kernels/README.md's table lacks the built-in kernels {kernels}"


def test_every_config_group_option_is_in_conf_readme():
    text = (CONF / "README.md").read_text()
    groups = ("kernel", "timing", "search", "logger", "output", "sweep", "hydra/launcher")
    options = [(group, path.stem) for group in groups for path in sorted((CONF / group).glob("*.yaml"))]
    assert len(options) > 20
    missing = [f"{group}={name}" for group, name in options if f"`{name}`" not in text]
    assert not missing, f"conf/README.md does not describe the options {missing}"


@pytest.mark.parametrize("page", PAGES)
def test_every_reference_page_exists(page):
    assert (REPO / page).is_file() and len((REPO / page).read_text()) > 1000, page


def markdown_pages() -> list[Path]:
    """README.md and BENCHMARKS.md where they are, and every page under conf/, kernels/ and runners/ (links
    to other folders not followed)."""
    pages = [REPO / name for name in ("README.md", "BENCHMARKS.md") if (REPO / name).is_file()]
    for folder in ("conf", "kernels", "runners"):
        for root, _, files in os.walk(REPO / folder):
            pages += [Path(root) / name for name in sorted(files) if name.endswith(".md")]
    return pages


def links(text: str) -> list[str]:
    """The targets of the markdown links of a page, less those in code blocks and code spans."""
    text = re.sub(r"^[ \t]*(```|~~~).*?^[ \t]*\1", "", text, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"(`+).+?\1", "", text, flags=re.DOTALL)
    return LINK.findall(text)


def test_the_link_check_sees_links_and_skips_code():
    page = ("[a](x.md) `[b](in_code.md)` [c](https://example.com) [d](#anchor)\n```\n[e](fenced.md)\n```\n"
            "- a list:\n\n  ```python\n  f[(1,)](out)  # [f](indented.md)\n  ```\n[g](y.md#part)\n")
    assert links(page) == ["x.md", "https://example.com", "#anchor", "y.md#part"]


def test_every_relative_link_leads_to_a_file():
    pages, broken = markdown_pages(), []
    assert {REPO / page for page in PAGES} <= set(pages)
    for page in pages:
        for target in links(page.read_text()):
            path = target.split("#", 1)[0]
            if not path or SCHEMES.match(target):
                continue
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken, "links to nothing:\n" + "\n".join(broken)


def test_the_rooms_page_links_the_others():
    text = (REPO / "runners" / "README.md").read_text()
    for target in ("measure/README.md", "export/README.md", "compare/GATE.md", "../conf/README.md",
                   "../kernels/README.md"):
        assert target in links(text), f"runners/README.md does not link {target}"


def test_what_the_commands_tell_a_user_to_run_names_their_console_scripts():
    """The commands' help, their hints and the files they write name the console scripts (pyproject.toml),
    never `python -m triton_sweep...`: a string in the tool's code that a user reads (a print, an error,
    a help text, a generated file's comment) with `python -m` in it. Docstrings and comments say how the
    code runs and may name modules."""
    import ast

    said = []
    for path in sorted((REPO / "runners").rglob("*.py")):
        if "benchmarks" in path.parts:
            continue  # the tool's own GPU benchmarks, run from a checkout
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                      and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                    and "python -m triton_sweep" in node.value):
                said.append(f"{path.relative_to(REPO)}:{node.lineno}")
    helps = [path for path in (REPO / "runners").glob("**/command.py")] + [REPO / "runners" / "plot.py"]
    said += [str(path.relative_to(REPO)) for path in helps  # --help shows the docstring's first paragraph
             if "python -m" in ast.get_docstring(ast.parse(path.read_text())).split("\n\n")[0]]
    assert not said, said
