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
  `class` and constants (`NAME = <literal>`), so a student's helper exists and their experiments do not
  run. Assigning to an item or attribute (`x[0] = 3.0`, `obj.k = 2`) or in place (`x += 1`) changes a
  value rather than defining one, and is not kept.
IPython magics and shell lines (`%...`, `!...`) are dropped.

Grading applies the rule for student-added cells to every cell (`definitions_only=True`): no top-level
statement of a submission runs but imports, `def`, `class` and constants, wherever they stand, and the
decoder classes are found by name, so a notebook whose nbgrader metadata an editor stripped still
earns what its code earns. There the definitions run in a child process (`run_definitions`, called
by the grader's `sandbox/host_main.py`), never in the grading process, in notebook order as the
grading kernel runs the cells (a class defined again further down is the one graded). What one of
them raises is reported as the student's error, except where the replay is the cause:
- a definition that needs a name only a cell further down defines (cells the student ran out of
  order) runs again once that name exists; a later definition of its own names still wins;
- a definition that, as it is defined, uses a name that statements grading does not run set or
  change (`toy_logits = torch.zeros(8)`, then `class Table: row = toy_logits[0]`) is said to need
  that name, if it is a class or the replayed code uses it, and is otherwise left unmentioned.
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


def _compile_module(module: ast.Module, filename: str) -> types.CodeType:
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
            module = ast.Module(body=[node for node in module.body if _is_definition(node)], type_ignores=[])
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
            if not _is_definition(node):
                first = source.splitlines()[node.lineno - 1].strip()
                skipped.append(f"{label}, line {node.lineno}: {first[:80]}")
    return skipped


def run_definitions(cells: list[tuple[str, str]], name: str = "submission") -> tuple[types.ModuleType, list[str]]:
    """Run the definitions of `cells` ((label, source) pairs) in a fresh module, statement by statement,
    in notebook order (see the module docstring), and return it with the problems to show the student.

    A cell with a syntax error, or a statement that raises (a failed import, say), is reported and
    skipped; the rest still runs, so one bad line costs only what depends on it. A statement that
    failed only because grading replays definitions alone is run again or explained in those words,
    never reported as an error of the student's code.
    """
    module = types.ModuleType(f"specdec_{name}")
    sys.modules[module.__name__] = module  # dataclasses and pickling look classes up here
    problems: list[str] = []  # one list throughout: the corpus's hostile `Formula` class body writes to it
    found: list[tuple[int, int, str]] = []  # (position of the cell, line, problem): reported in notebook order
    replayed: list[_Statement] = []
    skipped: list[ast.stmt] = []
    for position, (label, source) in enumerate(cells):
        filename = f"<{name} {label}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        try:
            body = parse_python(source, filename=filename).body
        except SyntaxError as e:
            found.append((position, 0, f"{label} has a syntax error on line {e.lineno} ({e.msg}): none of it ran"))
            continue
        for node in body:
            if _is_definition(node):
                replayed.append(_Statement(position, label, filename, node, _bound_names(node)))
            else:
                skipped.append(node)
    failed = _replay(replayed, module)
    causes = _replay_causes(replayed, skipped, failed) if failed else {}
    used = set()  # what the definitions that exist mention: a failed one they use is worth a note
    if causes:
        used = _names_in(statement.node for index, statement in enumerate(replayed) if index not in failed)
    for index, error in failed.items():
        statement = replayed[index]
        where, cause = f"{statement.label}, line {statement.node.lineno}", causes.get(index)
        if cause is None:
            found.append((statement.position, statement.node.lineno, f"{where} raised {type(error).__name__}: {error}"))
        elif isinstance(statement.node, ast.ClassDef) or statement.names & used:  # else no note: nothing needs it
            found.append((statement.position, statement.node.lineno,
                          f"{where} could not be defined for grading ({type(error).__name__}): it uses '{cause}' "
                          f"as it is defined, and grading does not run the statements that set or change '{cause}'"))
    problems.extend(problem for _, _, problem in sorted(found, key=lambda item: item[:2]))
    return module, problems


@dataclass(frozen=True)
class _Statement:
    """A top-level definition `run_definitions` replays."""

    position: int  # of its cell among the cells given
    label: str
    filename: str
    node: ast.stmt
    names: frozenset[str]  # the names it binds


def _replay(replayed: list[_Statement], module: types.ModuleType) -> dict[int, BaseException]:
    """Run `replayed` in `module`; what each statement that failed raised, by its index."""
    # 1. Every definition once, in notebook order; `bound_at`: the statement whose value each name holds.
    bound_at: dict[str, int] = {}
    failed: dict[int, BaseException] = {}
    for index, statement in enumerate(replayed):
        error = _run(statement, module)
        if error is None:
            bound_at.update(dict.fromkeys(statement.names, index))
        else:
            failed[index] = error
    # 2. A definition that needs a name only a cell further down defines ran before that cell in the student's
    #    run: run it again once the name exists, keeping what a statement further down gave its own names.
    retried = True
    while retried:
        retried = False
        for index, error in list(failed.items()):
            if not _missing_name(error) or error.name not in module.__dict__:
                continue
            statement = replayed[index]
            later = {name: module.__dict__[name] for name in statement.names if bound_at.get(name, -1) > index}
            error = None if statement.names and statement.names <= later.keys() else _run(statement, module)
            module.__dict__.update(later)
            if error is None:
                del failed[index]
                bound_at.update(dict.fromkeys(statement.names - later.keys(), index))
                retried = True
            else:
                failed[index] = error
    return failed


def _replay_causes(replayed: list[_Statement], skipped: list[ast.stmt],
                   failed: dict[int, BaseException]) -> dict[int, str]:
    """The failed statements that failed for want of state grading does not rebuild, each with the name it needed
    (a name that statements grading does not run set or change)."""
    reads = _reads_of_definitions(replayed)
    kept = {name for statement in replayed if not isinstance(statement.node, (ast.Assign, ast.AnnAssign))
            for name in statement.names}  # modules, functions and classes: passing one along changes no value
    run_by_skipped = _closure(_names_in(skipped), reads)  # the functions and classes skipped statements may use
    unsettled = set().union(
        *(_changed_names(node, kept, module_scope=True) for node in skipped),
        *(_changed_names(statement.node, kept, module_scope=False) for statement in replayed
          if statement.names & run_by_skipped))
    causes: dict[int, str] = {}
    while True:  # a definition left undefined for that reason unsettles the names it would have defined
        new = {index: cause for index, error in failed.items() if index not in causes
               for cause in [_unsettled_cause(error, replayed[index].node, unsettled, reads)] if cause}
        if not new:
            return causes
        causes.update(new)
        unsettled.update(*(replayed[index].names for index in new))


def _run(statement: _Statement, module: types.ModuleType) -> BaseException | None:
    """Run one statement in `module`; what it raised, or None."""
    try:
        exec(_compile_module(ast.Module(body=[statement.node], type_ignores=[]), statement.filename), module.__dict__)
    except BaseException as e:  # noqa: B036 - a SystemExit in a class body must not end grading
        return e
    return None


def _missing_name(error: BaseException) -> bool:
    """A NameError for a global name (an UnboundLocalError is a function's own mistake)."""
    return isinstance(error, NameError) and not isinstance(error, UnboundLocalError) and bool(error.name)


def _unsettled_cause(error: BaseException, node: ast.stmt, unsettled: set[str],
                     reads: dict[str, set[str]]) -> str | None:
    """The name in `unsettled` (set or changed by statements grading does not run) that `node`'s failure can be put
    down to, or None when the failure is the code's own."""
    if _missing_name(error):
        return error.name if error.name in unsettled else None
    eager = _eager_names(node)
    suspects = sorted(eager & unsettled) or sorted(_closure(eager, reads) & unsettled)
    return suspects[0] if suspects else None


def _bound_names(node: ast.stmt) -> frozenset[str]:
    """The names a definition binds (a star import's are not known)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return frozenset((alias.asname or alias.name).split(".")[0] for alias in node.names if alias.name != "*")
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return frozenset([node.name])
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return frozenset(n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name))


def _names_in(nodes) -> set[str]:
    """Every name that `nodes` mention, function bodies included."""
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}


def _changed_names(node: ast.AST, kept: set[str], module_scope: bool) -> set[str]:
    """The global names `node` may set or change as it runs: names it binds (at module scope) or declares `global`,
    the roots of the items and attributes it assigns, and the values it calls methods on or passes to a call, but
    for those in `kept` (modules, functions and classes, which a call uses rather than changes)."""
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Global):
            names.update(n.names)
        elif isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.update(_bound_names(n) if module_scope else ())
        elif isinstance(n, ast.ExceptHandler) and n.name and module_scope:
            names.add(n.name)
        elif isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load) and module_scope:
            names.add(n.id)
        elif isinstance(n, (ast.Subscript, ast.Attribute)) and not isinstance(n.ctx, ast.Load):
            names.update(_root_name(n))
        elif isinstance(n, ast.Call):
            given = [n.func.value] if isinstance(n.func, ast.Attribute) else []
            given += [*n.args, *(keyword.value for keyword in n.keywords)]
            names.update(name for value in given for name in _root_name(value) if name not in kept)
    return names


def _root_name(node: ast.expr) -> list[str]:
    """`x` for `x`, `x.a`, `x[0].b` (the value that changes when they do); nothing for other expressions."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return [node.id] if isinstance(node, ast.Name) else []


def _reads_of_definitions(replayed: list[_Statement]) -> dict[str, set[str]]:
    """For each function and class name, the names its definitions mention: what calling or using it may read."""
    reads: dict[str, set[str]] = {}
    for statement in replayed:
        if isinstance(statement.node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            reads.setdefault(statement.node.name, set()).update(_names_in([statement.node]))
    return reads


def _closure(names: set[str], reads: dict[str, set[str]]) -> set[str]:
    """`names` and everything the functions and classes among them read, and so on."""
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += reads.get(name, ())
    return seen


def _eager_names(node: ast.AST) -> set[str]:
    """The names `node` reads as it runs: a class body, decorators and default values, but not what its functions
    read only when called. (Annotations stay strings: `compile` here inherits this module's `annotations` future.)"""
    names, todo = set(), [node]
    while todo:
        current = todo.pop()
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo += [*current.args.defaults, *filter(None, current.args.kw_defaults)]
            todo += [] if isinstance(current, ast.Lambda) else current.decorator_list
            continue
        if isinstance(current, ast.Name):
            names.add(current.id)
        todo += ast.iter_child_nodes(current)
    return names


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
        code = _compile_module(cell.module, filename)
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


def _is_definition(node: ast.stmt) -> bool:
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
