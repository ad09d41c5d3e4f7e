"""Generic one-change mutants of the solution's graded code, each judged by every check (visible, then hidden)
as tests/course/selftest/test_catalogue.py judges the catalogue's entries: a mutant that keeps every point is printed
with its change, for a person to tell a change that alters nothing (an equivalent mutant) from a path no check reaches.

One change each, in the solution regions only, one source line at a time: a comparison or arithmetic operator
swapped, an integer moved by one, `and`/`or` swapped, a `not` dropped, a statement replaced by `pass`. Each mutant
is judged in a process forked for it, its class's tests first, and stops at its first failing test.

Example run: python tests/mutants.py --jobs 2        (about 20 minutes on 2 idle cores; prints the survivors)
"""

from __future__ import annotations

import argparse
import ast
import multiprocessing
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "course"))

from specdec_course.core.nbgrader_course import BEGIN_SOLUTION, END_SOLUTION  # noqa: E402
from specdec_course.selftest.catalogue import Entry, make_submission  # noqa: E402

from conftest import SOLUTION  # noqa: E402

SOURCE = SOLUTION.with_suffix(".py")
SWAPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
         ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.Add: ast.Sub,
         ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.And: ast.Or, ast.Or: ast.And}
STATEMENTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return)


@dataclass(frozen=True)
class Mutant:
    line: int  # in solutions/speculative_decoding.py
    old: str  # the text replaced, found once in the solution notebook
    new: str
    owner: str  # the class the line is in ("" at module level)


def solution_lines(lines: list[str]) -> set[int]:
    """Line numbers (1-based) inside the solution regions."""
    inside, found = False, set()
    for number, line in enumerate(lines, 1):
        if BEGIN_SOLUTION in line:
            inside = True
        elif END_SOLUTION in line:
            inside = False
        elif inside:
            found.add(number)
    return found


def variants(node: ast.AST):
    """Each one-change variant of `node` itself (not of its children)."""
    if isinstance(node, ast.Compare):
        for index, op in enumerate(node.ops):
            if type(op) in SWAPS:
                yield ast.Compare(node.left, [*node.ops[:index], SWAPS[type(op)](), *node.ops[index + 1:]],
                                  node.comparators)
    elif isinstance(node, (ast.BinOp, ast.BoolOp)) and type(node.op) in SWAPS:
        yield (ast.BinOp(node.left, SWAPS[type(node.op)](), node.right) if isinstance(node, ast.BinOp)
               else ast.BoolOp(SWAPS[type(node.op)](), node.values))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield node.operand
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        yield from (ast.Constant(node.value + 1), ast.Constant(node.value - 1))


def mutants(source: str, notebook_code: str) -> list[Mutant]:
    lines = source.splitlines()
    graded = solution_lines(lines)
    tree = ast.parse(source)
    owners = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        owners.update(dict.fromkeys(range(cls.lineno, cls.end_lineno + 1), cls.name))
    found, seen = [], set()
    for node in ast.walk(tree):
        line = getattr(node, "lineno", None)
        if line not in graded or node.end_lineno != line:
            continue
        text = lines[line - 1]
        news = [text[:node.col_offset] + ast.unparse(v) + text[node.end_col_offset:] for v in variants(node)]
        if isinstance(node, STATEMENTS) and text.strip() == ast.get_source_segment(source, node):
            news.append(text[:node.col_offset] + "pass")
        for new in news:
            old = text
            before = next((lines[n] for n in range(line - 2, -1, -1) if BEGIN_SOLUTION not in lines[n]), "")
            if notebook_code.count(old) != 1 and before:  # the line before (markers are not handed in) makes it unique
                old, new = f"{before}\n{text}", f"{before}\n{new}"
            if new != old and notebook_code.count(old) == 1 and (old, new) not in seen:
                seen.add((old, new))
                found.append(Mutant(line, old, new, owners.get(line, "")))
    return sorted(found, key=lambda m: m.line)


def judge(mutant: Mutant) -> tuple[Mutant, str]:
    """(the mutant, "" if it kept every point else the first test it lost and why)."""
    from specdec_course.core.plan import load_plan
    from specdec_kit.checks.core import CheckTimeout
    from specdec_kit.core.no_progress import NoProgress
    from specdec_kit.protocol.adapters import load_decoder_classes

    plan = load_plan(Path(__file__).parents[1] / "autograder")
    tests = sorted(plan.tests, key=lambda t: plan.tests[t][0] != mutant.owner)  # its own class's tests first
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "mutant.ipynb"
        import nbformat

        nbformat.write(make_submission(SOLUTION, Entry("mutant", "", edits=((mutant.old, mutant.new),))), path)
        try:
            classes = load_decoder_classes(path, tuple(sorted({c for c, _ in plan.tests.values()})))
        except Exception as e:  # the mutant does not load: every test lost
            return mutant, f"loading: {type(e).__name__}: {e}"
        for test in tests:
            class_name, checks = plan.tests[test]
            try:
                for check in checks:
                    check(classes[class_name])
            except (Exception, NoProgress, CheckTimeout) as e:
                return mutant, f"{test}: {type(e).__name__}: {str(e)[:160]}"
    return mutant, ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--limit", type=int, default=0, help="judge only the first N mutants")
    parser.add_argument("--lines", default="", help="judge only mutants of these source lines: FIRST-LAST")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # one thread per forked judge, none left behind in the parent
    handed_in = make_submission(SOLUTION, Entry("solution", ""))
    code = "\n".join(c.source for c in handed_in.cells if c.cell_type == "code")
    found = mutants(SOURCE.read_text(), code)
    if args.lines:
        first, last = map(int, args.lines.split("-"))
        found = [m for m in found if first <= m.line <= last]
    found = found[:args.limit] if args.limit else found
    print(f"{len(found)} mutants of {SOURCE.name}'s solution regions, judged with {args.jobs} job(s)", flush=True)
    survivors, started = [], time.perf_counter()
    with multiprocessing.get_context("fork").Pool(args.jobs, maxtasksperchild=1) as pool:
        for mutant, lost in pool.imap_unordered(judge, found):
            if not lost:
                survivors.append(mutant)
                print(f"KEPT EVERY POINT line {mutant.line} ({mutant.owner or 'module'}): "
                      f"{mutant.old.splitlines()[-1].strip()!r} -> {mutant.new.splitlines()[-1].strip()!r}", flush=True)
    print(f"{len(found) - len(survivors)} of {len(found)} mutants lost points, {len(survivors)} kept every point "
          f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
