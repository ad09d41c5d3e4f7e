"""The seam: the one place that opens a notebook and hands back the classes it defines.

    from specdec_kit.adapters import load_decoder_classes
    classes = load_decoder_classes("solutions/speculative_decoding.ipynb")
    decoder = classes["CachedSpeculativeDecoder"](target_dir, draft_dir, device="cpu")

Tests and the benchmark run the code a notebook holds (the solution or a submission), never a copy.
Which code runs, defined here and nowhere else:
- every code cell that carries nbgrader metadata (the kit's imports and solution cells), except
  graded test cells (`grade: true` without `solution: true`);
- never a cell tagged `demo`;
- from cells without nbgrader metadata (cells a student added) only top-level imports, `def`,
  `class` and assignments of constants, so a student's helper exists and their experiments do not run.
IPython magics and shell lines (`%...`, `!...`) are dropped. Grading runs the whole notebook through
nbgrader instead; that is not this module's job.
"""

from __future__ import annotations

import ast
import hashlib
import linecache
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import nbformat

DEMO_TAG = "demo"
DECODER_CLASSES = ("SpeculativeDecoder", "CachedSpeculativeDecoder")
_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


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
    path = Path(path)
    try:
        return nbformat.read(path, as_version=4)
    except FileNotFoundError:
        raise NotebookError(f"notebook {path} does not exist") from None
    except Exception as e:  # nbformat raises several unrelated types for a malformed file
        raise NotebookError(f"{path} is not a readable Jupyter notebook ({type(e).__name__}: {e}); "
                            "re-download it from Colab with File > Download > Download .ipynb") from None


def code_to_run(notebook: nbformat.NotebookNode, name: str = "notebook") -> list[CellCode]:
    """The code of each cell the seam runs, in notebook order (see the module docstring)."""
    plan = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        nbgrader = cell.metadata.get("nbgrader", {})
        if DEMO_TAG in cell.metadata.get("tags", []):
            continue
        if nbgrader.get("grade") and not nbgrader.get("solution"):
            continue  # a graded test cell
        label = nbgrader.get("grade_id") or f"cell {index}"
        source = _strip_magics(cell.source)
        try:
            module = ast.parse(source, filename=f"<{name} {label}>")
        except SyntaxError as e:
            raise NotebookError(f"{name}: {label} has a syntax error on line {e.lineno}: {e.msg}") from None
        whole = bool(nbgrader)
        if not whole:
            module = ast.Module(body=[node for node in module.body if _is_definition(node)], type_ignores=[])
        plan.append(CellCode(index, label, module, source, whole))
    return plan


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
        code = compile(cell.module, filename, "exec")
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


def _strip_magics(source: str) -> str:
    """Blank out IPython magics and shell escapes, keeping line numbers."""
    lines = source.splitlines()
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in lines)


def _is_definition(node: ast.stmt) -> bool:
    if isinstance(node, _DEFINITIONS):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        try:
            ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # not a constant
            return False
        return True
    return False
