"""Imports point down: runtime primitives, then what runs and judges decoders, then the instructor pipeline
(`course/`), then the CLI. Every import is read with `ast` (inside functions too, and `importlib.import_module`
strings); the checker proves itself on a planted upward edge. Nothing a notebook imports pulls in `course/`.

Example run: python -m pytest tests/test_layers.py -q
"""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "src" / "specdec_kit"
LAYERS = {
    0: ["__init__", "settings", "result", "cache", "prompts", "tokenizer", "zoo", "loading", "timing", "reference",
        "theory", "sampling"],
    1: ["probes", "bench", "adaptive_bench", "plot", "demo", "checks", "adapters"],
    2: ["course"],
    3: ["cli"],
}
LAYER = {name: layer for layer, names in LAYERS.items() for name in names}
# Upward imports kept on purpose, as (importer, imported): none today. A compatibility re-export of a name
# that moved up would be listed here, with the reason.
ALLOWED_UPWARD: set[tuple[str, str]] = set()
# What the notebooks import (the solution's and the release's cells): none of it may pull in course/.
NOTEBOOK_MODULES = ["specdec_kit", "specdec_kit.bench", "specdec_kit.loading", "specdec_kit.checks",
                    "specdec_kit.plot", "specdec_kit.prompts", "specdec_kit.sampling"]


def top(module: str) -> str:
    """The layer table's name for a kit module: its first component under specdec_kit."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path, package: Path) -> str:
    relative = path.relative_to(package.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports(path: Path, package: Path) -> set[str]:
    """Every kit module `path` imports, by any import statement or importlib.import_module("...") call."""
    here = module_name(path, package).split(".")
    if path.name != "__init__.py":
        here = here[:-1]  # relative imports start from the module's package
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.add(target)
            found |= {f"{target}.{alias.name}" for alias in node.names}  # `from . import zoo` imports zoo
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.add(node.args[0].value)
    return {name for name in found if name.split(".")[0] == package.name and top(name) in LAYER}


def upward_edges(package: Path) -> list[str]:
    """'importer -> imported (layer a -> layer b)' for every import that points up, and modules not in the table."""
    problems = []
    for path in sorted(package.rglob("*.py")):
        importer = top(module_name(path, package))
        if importer not in LAYER:
            problems.append(f"{path.relative_to(package)} is in no layer of tests/test_layers.py")
            continue
        for imported in sorted({top(name) for name in imports(path, package)}):
            if LAYER[imported] > LAYER[importer] and (importer, imported) not in ALLOWED_UPWARD:
                problems.append(f"{importer} -> {imported} (layer {LAYER[importer]} -> {LAYER[imported]})")
    return problems


def test_imports_point_down():
    problems = upward_edges(PACKAGE)
    assert problems == [], "imports that point up (or modules in no layer):\n" + "\n".join(problems)


@pytest.mark.parametrize("planted", ["    from .course import grading\n", "    import specdec_kit.cli\n",
                                     "    importlib.import_module('specdec_kit.course.verdict')\n"])
def test_checker_sees_a_planted_upward_edge(tmp_path, planted):
    copy = tmp_path / "specdec_kit"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    result = copy / "result.py"
    result.write_text(result.read_text() + f"\n\ndef _planted():\n    import importlib\n{planted}")
    problems = upward_edges(copy)
    assert any(p.startswith("result -> ") for p in problems), f"the planted import was not seen: {problems}"


def test_every_kit_module_is_in_a_layer():
    names = {top(module_name(p, PACKAGE)) for p in PACKAGE.rglob("*.py")}
    assert names == set(LAYER), f"modules without a layer: {names - set(LAYER)}; layers without a module: " \
                                f"{set(LAYER) - names}"


def test_what_a_notebook_imports_never_imports_the_instructor_pipeline():
    code = ("import sys\n" + "".join(f"import {m}\n" for m in NOTEBOOK_MODULES)
            + "print(sorted(m for m in sys.modules if m.startswith(('specdec_kit.course', 'nbgrader'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", f"importing what a notebook imports loaded: {out}"


def test_every_name_a_notebook_imports_is_still_importable():
    """Old notebooks keep working: each `from specdec_kit... import name` of the solution and the release."""
    import importlib

    import nbformat

    for notebook in (REPO / "solutions" / "speculative_decoding.ipynb", REPO / "assignment" /
                     "speculative_decoding.ipynb"):
        for cell in nbformat.read(notebook, as_version=4).cells:
            if cell.cell_type != "code":
                continue
            for node in ast.walk(ast.parse("\n".join(line for line in cell.source.splitlines()
                                                     if not line.lstrip().startswith(("%", "!"))))):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("specdec_kit"):
                    module = importlib.import_module(node.module)
                    for alias in node.names:
                        assert hasattr(module, alias.name) or importlib.util.find_spec(
                            f"{node.module}.{alias.name}"), f"{notebook.name}: {node.module}.{alias.name} is gone"


def readme_layers() -> dict[int, str]:
    """The README's drawing of the layers: the text of each numbered row group, by layer."""
    text = (REPO / "README.md").read_text()
    drawing = text.split("import and fails on one that points up")[1].split("```")[1]
    rows: dict[int, str] = {}
    layer = None
    for line in drawing.splitlines():
        if line[:1].isdigit():
            layer = int(line[0])
        if layer is not None:
            rows[layer] = rows.get(layer, "") + line + "\n"
    return rows


def test_readme_draws_every_module_in_its_layer():
    """The README's layout drawing names each module file (and each file of course/ and checks/) in its layer."""
    rows = readme_layers()
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = top(module_name(path, PACKAGE))
        if name == "__init__":
            continue
        if path.parent == PACKAGE:
            shown = path.name
        else:  # a subpackage is drawn as `course/`, its modules by their stems
            shown = f"{path.parent.name}/" if path.name == "__init__.py" else path.stem
        if shown not in rows.get(LAYER[name], ""):
            missing.append(f"{path.relative_to(PACKAGE)} (layer {LAYER[name]})")
    assert not missing, f"the README's layout drawing should name these in their layer: {missing}"
