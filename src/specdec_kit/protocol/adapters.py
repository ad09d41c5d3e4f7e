"""The seam: the one place that opens a notebook and hands back the classes it defines.

    from specdec_kit.protocol.adapters import load_decoder_classes
    classes = load_decoder_classes("solutions/speculative_decoding.ipynb")
    decoder = classes["CachedSpeculativeDecoder"](target_dir, draft_dir, device="cpu")

Tests and the benchmark run the code a notebook holds (the solution or a submission), never a copy.
Which code runs, defined here and nowhere else:
- every code cell that carries nbgrader metadata (the kit's imports and solution cells), except
  graded test cells (`grade: true` without `solution: true`);
- never a cell tagged `demo`;
- from cells without nbgrader metadata (cells a student added) only top-level imports, `def`,
  `class` and constants (`NAME = <literal>`), so a student's helper exists and their experiments do not
  run. Assigning to an item or attribute (`x[0] = 3.0`, `obj.k = 2`) or in place (`x += 1`) changes a
  value rather than defining one, and is not kept.
IPython magics and shell lines (`%...`, `!...`) are dropped.

Grading applies the rule for student-added cells to every cell (`definitions_only=True`): no top-level
statement of a submission runs but imports, `def`, `class` and constants, wherever they stand, and the
decoder classes are found by name, so a notebook whose nbgrader metadata an editor stripped still
earns what its code earns. There the definitions run in a child process (`replay.run_definitions`).
"""

from __future__ import annotations

import ast
import hashlib
import linecache
import sys
import threading
import types
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # nbformat is imported where a notebook is read: it imports jsonschema, whose optional
    import nbformat  # rfc3987_syntax builds a grammar at import (1.4 s of CPU), and the grader's hosts read none

DEMO_TAG = "demo"
DECODER_CLASSES = ("SpeculativeDecoder", "CachedSpeculativeDecoder")
_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


# CPython 3.11 keeps the AST converter's recursion count per interpreter, not per thread, so two threads
# parsing at once (grading with --jobs) can fail with "SystemError: AST constructor recursion depth
# mismatch" (python/cpython#106905). Every parse and AST compile of the kit goes through this lock.
_AST_LOCK = threading.Lock()


def parse_python(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse`, one thread at a time (see `_AST_LOCK`)."""
    with _AST_LOCK:
        return ast.parse(source, filename=filename)


def compile_module(module: ast.Module, filename: str) -> types.CodeType:
    with _AST_LOCK:
        return compile(module, filename, "exec")


class NotebookError(ValueError):
    """A notebook the seam cannot use, with the cell and what to fix."""


@dataclass(frozen=True)
class CellCode:
    """The code the seam runs from one cell."""

    index: int  # position among all cells of the notebook
    label: str  # the nbgrader grade_id, or "cell <index>" for a student-added cell
    module: ast.Module
    source: str  # the cell's text, magics blanked: what tracebacks show
    whole: bool  # False when only the definitions of a student-added cell are kept


def read_notebook(path: str | Path) -> nbformat.NotebookNode:
    import nbformat

    path = Path(path)
    try:
        return nbformat.read(path, as_version=4)
    except FileNotFoundError:
        raise NotebookError(f"notebook {path} does not exist") from None
    except Exception as e:  # nbformat raises several unrelated types for a malformed file
        raise NotebookError(f"{path} is not a readable Jupyter notebook ({type(e).__name__}: {e}); "
                            "re-download it from Colab with File > Download > Download .ipynb") from None


def cells_to_consider(notebook: nbformat.NotebookNode) -> list[tuple[int, str, str, dict]]:
    """(index, label, source with magics blanked, nbgrader metadata) of every code cell that is neither
    a graded test cell nor tagged `demo`."""
    cells = []
    for index, cell in enumerate(notebook.cells):
        nbgrader = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or DEMO_TAG in cell.metadata.get("tags", []):
            continue
        if is_test_cell(cell):
            continue
        cells.append((index, nbgrader.get("grade_id") or f"cell {index}", blank_magics(cell.source), nbgrader))
    return cells


def is_graded_cell(cell: nbformat.NotebookNode) -> bool:
    """A cell that earns points: nbgrader `grade` (a test cell, or an answer graded by hand)."""
    return bool(cell.metadata.get("nbgrader", {}).get("grade"))


def is_test_cell(cell: nbformat.NotebookNode) -> bool:
    """A graded test cell: nbgrader `grade` without `solution`."""
    return cell.cell_type == "code" and is_graded_cell(cell) and not cell.metadata["nbgrader"].get("solution")


def code_to_run(notebook: nbformat.NotebookNode, name: str = "notebook",
                definitions_only: bool = False) -> list[CellCode]:
    """The code of each cell the seam runs, in notebook order (see the module docstring)."""
    plan = []
    for index, label, source, nbgrader in cells_to_consider(notebook):
        try:
            module = parse_python(source, filename=f"<{name} {label}>")
        except SyntaxError as e:
            raise NotebookError(f"{name}: {label} has a syntax error on line {e.lineno}: {e.msg}") from None
        whole = bool(nbgrader) and not definitions_only
        if not whole:
            module = ast.Module(body=[node for node in module.body if is_definition(node)], type_ignores=[])
        plan.append(CellCode(index, label, module, source, whole))
    return plan


def not_run(notebook: nbformat.NotebookNode) -> list[str]:
    """`<label>, line <n>: <statement>` for each top-level statement grading does not run, from the cells a
    student wrote (solution cells and added cells; the kit's locked cells are left out)."""
    skipped = []
    for _, label, source, nbgrader in cells_to_consider(notebook):
        if nbgrader.get("locked") and not nbgrader.get("solution"):
            continue
        try:
            body = parse_python(source).body
        except SyntaxError as e:
            skipped.append(f"{label}: a syntax error on line {e.lineno} ({e.msg}); nothing in it runs")
            continue
        for node in body:
            if not is_definition(node):
                first = source.splitlines()[node.lineno - 1].strip()
                skipped.append(f"{label}, line {node.lineno}: {first[:80]}")
    return skipped


def load_notebook(path: str | Path) -> types.ModuleType:
    """Run the seam's cells of the notebook at `path` in a fresh module and return that module."""
    path = Path(path).resolve()
    plan = code_to_run(read_notebook(path), path.name)
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    module = types.ModuleType(f"specdec_notebook_{digest}")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module  # dataclasses and pickling look classes up here
    for cell in plan:
        filename = f"<{path.name} {cell.label}>"
        lines = cell.source.splitlines(True)
        linecache.cache[filename] = (len(cell.source), None, lines, filename)  # so tracebacks show the cell
        code = compile_module(cell.module, filename)
        try:
            exec(code, module.__dict__)
        except Exception as e:
            raise NotebookError(f"{path.name}: {cell.label} raised {type(e).__name__}: {e}") from e
    return module


def load_decoder_classes(path: str | Path, names: tuple[str, ...] = DECODER_CLASSES) -> dict[str, type]:
    """The classes `names` defined by the notebook at `path`; a NotebookError names any that are missing."""
    module = load_notebook(path)
    missing = [name for name in names if not isinstance(getattr(module, name, None), type)]
    if missing:
        raise NotebookError(
            f"{Path(path).name} defines no class {', '.join(missing)}; the assignment asks for "
            f"{', '.join(names)} with exactly these names, in cells that are not tagged {DEMO_TAG!r}"
        )
    return {name: getattr(module, name) for name in names}


def blank_magics(source: str) -> str:
    """Blank out IPython magics and shell escapes, keeping line numbers."""
    lines = source.splitlines()
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in lines)


def is_definition(node: ast.stmt) -> bool:
    """An import, `def`, `class`, or a constant given to names (`K = 4`, `A, B = 1, 2`, `EPS: float = 1e-9`).
    Assigning to an item or attribute, or in place, changes a value that may come from a statement that is not
    replayed (`toy_logits[0, 5] = 3.0` after `toy_logits = torch.zeros(1, 8)`): not a definition."""
    if isinstance(node, _DEFINITIONS):
        return True
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        targets = [node.target]
    else:
        return False
    if not all(_names_only(target) for target in targets):
        return False
    try:
        ast.literal_eval(node.value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # not a constant
        return False
    return True


def _names_only(target: ast.expr) -> bool:
    """`x`, `x, y`, `[x, *rest]`: a target that binds names and changes no value."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return all(_names_only(element) for element in target.elts)
    if isinstance(target, ast.Starred):
        return _names_only(target.value)
    return isinstance(target, ast.Name)
