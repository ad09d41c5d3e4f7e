"""Imports point down, across both packages: each package in sub-packages by job ("rooms"), each room a layer and
its modules in levels of their own; the student package's rooms lowest, then its `__init__` and its command, then
the instructor package's rooms and its command on top. The student package never imports the instructor package.
Every import is read with `ast` (inside functions too, and `importlib.import_module` strings); the checker proves
itself on planted upward edges. Nothing a notebook imports pulls in the instructor package, and a notebook written
before the rooms still imports. docs/architecture.md draws the same layers.

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
# Each package's sub-packages ("rooms"), lowest first, each with its modules in levels, lowest first: a module imports
# from its own level and those below, in its sub-package and in the sub-packages below. The student package's rooms
# first, then its own `__init__` and command; the instructor package's above all of it, then its command.
KIT_LAYERS = [
    ("core", [["__init__", "settings", "result", "cache", "sampling", "prompts", "theory", "tracebacks",
               "run_delay"],
              ["no_progress"], ["timing"]]),
    ("zoo", [["tokenizer"], ["models"], ["tables"], ["__init__"]]),
    ("models", [["__init__", "loading"], ["baseline"]]),
    ("protocol", [["__init__", "adapters", "remote"], ["probes", "replay"]]),
    ("rounds", [["view"], ["record", "expected"], ["__init__"]]),
    ("bench", [["machine", "figures"], ["plot", "runners"], ["readiness", "demo"], ["benchmark"],
               ["sweeps", "__init__"]]),
    ("checks", [["failure", "answers"], ["outcomes"], ["core"], ["steps"], ["decoding"], ["caching"],
                ["adaptive", "lookup", "sampling", "speed", "cells"], ["__init__"]]),
]
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
ROOMS = {KIT: KIT_LAYERS, COURSE: COURSE_LAYERS}
# The table's units, lowest first, each a layer: a package's rooms, then its own modules (room ""), then its command.
UNITS = [*((KIT, room) for room in KIT_LAYERS), (KIT, ("", [["moved"], ["__init__"]])), (KIT, "cli"),
         (COURSE, "__init__"), *((COURSE, room) for room in COURSE_LAYERS), (COURSE, "cli")]
SUBPACKAGES = {package: {sub for sub, _ in rooms} for package, rooms in ROOMS.items()}  # the rooms by package


def _layers() -> dict[str, tuple[int, int]]:
    """Each unit of the table ("specdec_kit.core.timing", "specdec_course.cli") -> (its layer, its level in it)."""
    layers = {}
    for layer, (package, unit) in enumerate(UNITS):
        if isinstance(unit, str):
            layers[f"{package}.{unit}"] = (layer, 0)
        else:
            sub, levels = unit
            layers |= {".".join(filter(None, (package, sub, name))): (layer, level)
                       for level, names in enumerate(levels) for name in names}
    layers[f"{COURSE}.commands"] = layers[f"{COURSE}.cli"]
    return layers


LAYERS = _layers()
LAYER = LAYERS
# Upward imports kept on purpose, as (importer, imported): none today.
ALLOWED_UPWARD: set[tuple[str, str]] = set()
NOTEBOOKS = [REPO / "solutions" / "speculative_decoding.ipynb", REPO / "assignment" / "speculative_decoding.ipynb"]


def notebook_imports() -> list[ast.ImportFrom]:
    """Every `from specdec_kit... import ...` of the notebooks' code cells (the solution's and the release's)."""
    import nbformat

    found = []
    for notebook in NOTEBOOKS:
        for cell in nbformat.read(notebook, as_version=4).cells:
            if cell.cell_type == "code":
                code = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
                found += [node for node in ast.walk(ast.parse(code)) if isinstance(node, ast.ImportFrom)
                          and (node.module or "").startswith(KIT)]
    return found


def top(module: str) -> str:
    """The layer table's unit for a module: a module in a room ("specdec_kit.core.timing",
    "specdec_course.grading.verdict"), a package's own module ("specdec_kit.cli"), the instructor's commands/."""
    parts = module.split(".")
    if len(parts) == 1:
        return f"{parts[0]}.__init__"
    if parts[1] in SUBPACKAGES.get(parts[0], ()):
        return ".".join(parts[:3]) if len(parts) > 2 else f"{parts[0]}.{parts[1]}.__init__"
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
            if node.module:  # `from .. import zoo` imports the module zoo, not the names of the package above
                found.add(target)
            found |= {f"{target}.{alias.name}" for alias in node.names}
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
    assert any(p.startswith("specdec_kit.checks.core -> ") for p in problems), \
        f"the planted import was not seen: {problems}"


def test_every_module_is_in_a_layer():
    names = {top(module_name(p, SRC)) for p in SRC.rglob("*.py")}
    assert names == set(LAYER), f"modules without a layer: {names - set(LAYER)}; layers without a module: " \
                                f"{set(LAYER) - names}"


# What the notebooks imported before the kit had rooms: a notebook released then still runs on today's kit.
RELEASED_BEFORE_ROOMS = """
from specdec_kit import DecodeResult, cache_kwargs, cache_of, common_prefix_length, crop_to, zoo
from specdec_kit.bench import benchmark_decoder
from specdec_kit.loading import check_same_vocab, default_dtype, default_pair, dtype_kwargs, model_source
from specdec_kit.loading import resolve_device, resolve_pair
from specdec_kit.readiness import checked_decoder
from specdec_kit.rounds import record_rounds
from specdec_kit.sampling import check_sampling_settings, warp
from specdec_kit.timing import ForwardCosts, measure_forward_costs
from specdec_kit import checks
from specdec_kit import bench, runners, sweeps
from specdec_kit.plot import plot_acceptance_by_position, plot_bench
from specdec_kit.prompts import load_prompts
"""


@pytest.mark.slow
def test_what_a_notebook_imports_never_imports_the_instructor_pipeline():
    code = ("import sys\n" + "\n".join(ast.unparse(node) for node in notebook_imports()) + RELEASED_BEFORE_ROOMS
            + "print(sorted(m for m in sys.modules if m.startswith(('specdec_course', 'nbgrader'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", f"importing what a notebook imports loaded: {out}"


def test_every_name_a_notebook_imports_is_importable():
    """Each `from specdec_kit... import name` of the solution and the release."""
    for node in notebook_imports():
        exec(ast.unparse(node), {})  # raises ImportError naming what is gone


def test_a_notebook_released_before_the_rooms_still_imports():
    """Each of its import lines gives the objects of the module the old name moved to, the same ones."""
    import importlib

    from specdec_kit.moved import MOVED

    for node in ast.parse(RELEASED_BEFORE_ROOMS).body:
        names: dict = {}
        exec(ast.unparse(node), names)
        old = node.module.removeprefix(KIT).lstrip(".")
        for alias in node.names:
            if old in MOVED:
                now = importlib.import_module(f"{KIT}.{MOVED[old]}")
                assert names[alias.name] is getattr(now, alias.name), f"{node.module}.{alias.name} is another object"
            elif alias.name in MOVED:
                assert names[alias.name] is importlib.import_module(f"{KIT}.{MOVED[alias.name]}")


def test_old_names_cover_every_module_that_moved():
    """Each module that had a name of its own at the top of the package before the rooms resolves by it."""
    import importlib

    from specdec_kit.moved import MOVED

    for old, now in MOVED.items():
        assert importlib.import_module(f"{KIT}.{old}") is importlib.import_module(f"{KIT}.{now}")
        assert (SRC / KIT / (now.replace(".", "/") + ".py")).is_file(), f"{old} -> {now}: no such module"


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
