"""`specdec-course build-notebook`: the points tables written from the cells' headers (authoring/points.py), then the
.ipynb files built from their jupytext .py twins (authoring/notebooks.py).

A points change that moves the total is said in the line that names the tables written ("the total is now 102
points, was 100: wrote the points tables of solutions/speculative_decoding.py and docs/students.md"). "Was" is the
total the replaced tables stated: the last build wrote them from the headers, and an edit of a header alone leaves
them as they were, whereas the paired .ipynb may already hold the new points (Jupyter saves both files of a
jupytext pair).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specdec_kit.cli import add_command


def register(commands) -> None:
    parser = add_command(commands, "build-notebook", "write the points tables, then build .ipynb files from their "
                         "jupytext .py twins", "specdec-course build-notebook solutions/speculative_decoding.py")
    parser.add_argument("scripts", nargs="+", help="percent-format .py files")
    parser.add_argument("--check", action="store_true", help="exit 1 if a points table or an .ipynb differs from what "
                        "a rebuild writes")
    parser.add_argument("--docs", default="docs/students.md", help="the page whose points table is written too, from "
                        "the first script's headers (default: docs/students.md)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..authoring.notebooks import build_notebook, ipynb_path, notebook_is_current
    from ..authoring.points import problems, read_points, stated_total, table, total_change, with_table

    points = read_points(Path(args.scripts[0]))
    found = problems(points)
    if found:
        print("; ".join(found), file=sys.stderr)
        return 1
    block = table(points)
    stale = {}  # page -> (its text with the table written, the total its old table stated)
    for path, prefix in [*((Path(script), "# ") for script in args.scripts), (Path(args.docs), "")]:
        text = path.read_text()
        written = with_table(text, block, prefix)
        if written != text:
            stale[path] = written, stated_total(text, prefix)
    change = total_change(points.total, {str(path): was for path, (_, was) in stale.items()})
    tables = f"the points table{'s' if len(stale) > 1 else ''} of {_listed([str(path) for path in stale])}"
    if args.check and stale:
        print(f"{tables} {'are' if len(stale) > 1 else 'is'} stale{f' ({change})' if change else ''}: run "
              f"specdec-course build-notebook {' '.join(args.scripts)}", file=sys.stderr)
        return 1
    for path, (written, _) in stale.items():
        path.write_text(written)
    if stale:  # one line: a new total and every page it changed, docs/students.md included
        print(f"{f'{change}: ' if change else ''}wrote {tables}")
    for script in args.scripts:
        if args.check:
            if not notebook_is_current(script):
                print(f"{ipynb_path(script)} is stale: run specdec-course build-notebook {script}", file=sys.stderr)
                return 1
            print(f"{ipynb_path(script)} is current")
        else:
            print(f"wrote {build_notebook(script)}")
    return 0


def _listed(names: list[str]) -> str:
    return " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"
