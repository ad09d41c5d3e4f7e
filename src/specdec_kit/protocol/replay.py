"""Grading's run of a submission's definitions: in a child process (called by the grader's
`sandbox/host_main.py`), never in the grading process, statement by statement in notebook order as the grading
kernel runs the cells (a class defined again further down is the one graded), only the statements the seam keeps
(`adapters.is_definition`: imports, `def`, `class` and constants).

    module, problems = run_definitions([("cell 3", source), ...])   # the definitions, and what to tell the student

What one of them raises is reported as the student's error, except where the replay is the cause:
- a definition that needs a name only a cell further down defines (cells the student ran out of
  order) runs again once that name exists; a later definition of its own names still wins;
- a definition that, as it is defined, uses a name that statements grading does not run set or
  change (`toy_logits = torch.zeros(8)`, then `class Table: row = toy_logits[0]`) is said to need
  that name, if it is a class or the replayed code uses it, and is otherwise left unmentioned.
"""

from __future__ import annotations

import ast
import linecache
import sys
import types
from dataclasses import dataclass

from .adapters import compile_module, is_definition, parse_python


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
            if is_definition(node):
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
        exec(compile_module(ast.Module(body=[statement.node], type_ignores=[]), statement.filename), module.__dict__)
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
