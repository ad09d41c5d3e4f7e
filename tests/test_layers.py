"""Imports point down, across both packages: the student package's runtime primitives, then what runs and judges
decoders, then its command; the instructor package above it all, one sub-package per job, each a layer, and within
each its modules in levels of their own; its command on top. The student package never imports the instructor
package. Every import is read with `ast` (inside functions too, and `importlib.import_module` strings); the checker
proves itself on planted upward edges. Nothing a notebook imports pulls in the instructor package.
docs/architecture.md draws the same layers.

Example run: python -m pytest tests/test_layers.py -q
"""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

SRC = REPO / "src"
KIT, COURSE = "specdec_kit", "specdec_course"
# The student package's layers: a module (or subpackage, `checks`) imports from its own layer and those below.
KIT_LAYERS = [
    ["__init__", "settings", "result", "cache", "prompts", "tokenizer", "zoo_models", "zoo_tables", "zoo", "loading",
     "no_progress", "timing", "baseline", "theory", "sampling", "figures", "remote", "tracebacks", "machine"],
    ["probes", "runners", "readiness", "bench", "sweeps", "plot", "demo", "checks", "adapters", "replay", "rounds"],
    ["cli"],
]
# The instructor package's sub-packages, lowest first, each with its modules in levels, lowest first: a module
# imports from its own level and those below, in its sub-package and in the sub-packages below.
COURSE_LAYERS = [
    ("core", [["__init__", "pins", "nbgrader_course", "oracle", "regular_files", "waits"], ["config"], ["plan"]]),
    ("authoring", [["__init__", "notebooks", "answers", "points"], ["release"]]),
    ("sandbox", [["__init__", "uids", "enter", "processes", "model_requests", "models", "baseline", "timing_gate",
                  "channel", "meter"], ["box"],
                 ["host", "kernel"], ["child"], ["host_main"]]),
    ("bench", [["__init__", "hf_methods", "adaptive"]]),
    ("grading", [["__init__", "safe_csv", "safe_html", "redact", "scan", "gradebook", "archives", "budget", "jobs",
                  "leaks", "names", "cell_watch", "preprocessors"],
                 ["safe_nbconvert", "collect", "speed"], ["feedback", "verdict"], ["course"], ["notebook_run"], ["row"],
                 ["batch"], ["results"]]),
    ("platforms", [["__init__", "similarity", "lms", "gradescope"], ["report"]]),
    ("selftest", [["__init__", "catalogue"], ["selftest", "student_run", "losses", "load", "record"]]),
]
LAYERS: dict[str, tuple[int, int]] = {  # a unit of the table -> (its layer, its level in the layer)
    **{f"{KIT}.{name}": (layer, 0) for layer, names in enumerate(KIT_LAYERS) for name in names},
    f"{COURSE}.__init__": (len(KIT_LAYERS), 0),
    **{f"{COURSE}.{sub}.{name}": (len(KIT_LAYERS) + 1 + i, level)
       for i, (sub, levels) in enumerate(COURSE_LAYERS) for level, names in enumerate(levels) for name in names},
    f"{COURSE}.cli": (len(KIT_LAYERS) + 1 + len(COURSE_LAYERS), 0),
    f"{COURSE}.commands": (len(KIT_LAYERS) + 1 + len(COURSE_LAYERS), 0),
}
SUBPACKAGES = {sub for sub, _ in COURSE_LAYERS}
LAYER = LAYERS
# Upward imports kept on purpose, as (importer, imported): none today.
ALLOWED_UPWARD: set[tuple[str, str]] = set()
# What the notebooks import (the solution's and the release's cells): none of it may pull in the instructor package.
NOTEBOOK_MODULES = ["specdec_kit", "specdec_kit.bench", "specdec_kit.readiness", "specdec_kit.runners",
                    "specdec_kit.sweeps", "specdec_kit.loading", "specdec_kit.checks", "specdec_kit.plot",
                    "specdec_kit.prompts", "specdec_kit.sampling"]


def top(module: str) -> str:
    """The layer table's unit for a module: the student package's modules and subpackages ("specdec_kit.checks"),
    the instructor package's modules in its sub-packages ("specdec_course.grading.verdict"), its commands/."""
    parts = module.split(".")
    if len(parts) == 1:
        return f"{parts[0]}.__init__"
    if parts[0] == COURSE and parts[1] in SUBPACKAGES:
        return ".".join(parts[:3]) if len(parts) > 2 else f"{COURSE}.{parts[1]}.__init__"
    return ".".join(parts[:2])


def module_name(path: Path, src: Path) -> str:
    relative = path.relative_to(src).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports(path: Path, src: Path) -> set[str]:
    """Every module of either package `path` imports, by any import statement or importlib.import_module("...")."""
    here = module_name(path, src).split(".")
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
    return {name for name in found if name.split(".")[0] in (KIT, COURSE) and top(name) in LAYER}


def upward_edges(src: Path) -> list[str]:
    """'importer -> imported (layer a -> layer b)' for every import that points up, and modules not in the table."""
    problems = []
    for path in sorted(src.rglob("*.py")):
        importer = top(module_name(path, src))
        if importer not in LAYER:
            problems.append(f"{path.relative_to(src)} is in no layer of tests/test_layers.py")
            continue
        for imported in sorted({top(name) for name in imports(path, src)}):
            if LAYER[imported] > LAYER[importer] and (importer, imported) not in ALLOWED_UPWARD:
                problems.append(f"{importer} -> {imported} (layer {LAYER[importer]} -> {LAYER[imported]})")
    return problems


def test_imports_point_down():
    problems = upward_edges(SRC)
    assert problems == [], "imports that point up (or modules in no layer):\n" + "\n".join(problems)


@pytest.mark.parametrize("planted", ["    from specdec_course import grading\n", "    from .. import cli\n",
                                     "    importlib.import_module('specdec_course.grading.verdict')\n"])
def test_checker_sees_a_planted_upward_edge(tmp_path, planted):
    copy = tmp_path / "src"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    result = copy / KIT / "checks" / "core.py"
    result.write_text(result.read_text() + f"\n\ndef _planted():\n    import importlib\n{planted}")
    problems = upward_edges(copy)
    assert any(p.startswith("specdec_kit.checks -> ") for p in problems), f"the planted import was not seen: {problems}"


def test_every_module_is_in_a_layer():
    names = {top(module_name(p, SRC)) for p in SRC.rglob("*.py")}
    assert names == set(LAYER), f"modules without a layer: {names - set(LAYER)}; layers without a module: " \
                                f"{set(LAYER) - names}"


@pytest.mark.slow
def test_what_a_notebook_imports_never_imports_the_instructor_pipeline():
    code = ("import sys\n" + "".join(f"import {m}\n" for m in NOTEBOOK_MODULES)
            + "print(sorted(m for m in sys.modules if m.startswith(('specdec_course', 'nbgrader'))))")
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


def drawn_layers() -> dict[int, str]:
    """docs/architecture.md's drawing of the layers: the text of each numbered row group, by layer."""
    import re

    text = (REPO / "docs" / "architecture.md").read_text()
    drawing = text.split("<!-- layers -->")[1].split("```")[1]
    rows: dict[int, str] = {}
    layer = None
    for line in drawing.splitlines():
        number = re.match(r"(\d+)\s", line)
        if number:
            layer = int(number.group(1))
        if layer is not None:
            rows[layer] = rows.get(layer, "") + line + "\n"
    return rows


def test_architecture_page_draws_every_module_in_its_layer():
    """docs/architecture.md's drawing names each module (a subpackage of the student package as `checks/`, one of
    the instructor package as `grading/`) in its layer, a sub-package's modules in the order of their levels."""
    rows = drawn_layers()
    missing = []
    for name, (layer, _) in LAYER.items():
        parts = name.split(".")
        if parts[-1] == "__init__":
            shown = f"{parts[1]}/" if len(parts) == 3 else None
        else:
            shown = f"{parts[-1]}/" if (SRC / name.replace(".", "/")).is_dir() else f"{parts[-1]}.py"
        if shown and shown not in rows.get(layer, ""):
            missing.append(f"{name} (layer {layer})")
    assert not missing, f"docs/architecture.md's layer drawing should name these in their layer: {missing}"


MAX_LINES = 400  # a module longer than this holds more than one idea: split it


def test_no_module_is_longer_than_max_lines():
    long = {str(path.relative_to(SRC)): n for path in sorted(SRC.rglob("*.py"))
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}; split each by the ideas it holds"
