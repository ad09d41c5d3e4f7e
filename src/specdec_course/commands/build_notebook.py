"""`specdec-course build-notebook`: the points tables written from the cells' headers (authoring/points.py), then the
.ipynb files built from their jupytext .py twins (authoring/notebooks.py)."""

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
    from ..authoring.points import problems, read_points, table, with_table

    points = read_points(Path(args.scripts[0]))
    found = problems(points)
    if found:
        print("; ".join(found), file=sys.stderr)
        return 1
    block = table(points)
    for path, prefix in [*((Path(script), "# ") for script in args.scripts), (Path(args.docs), "")]:
        text = path.read_text()
        written = with_table(text, block, prefix)
        if args.check and written != text:
            print(f"the points table of {path} is stale: run specdec-course build-notebook {' '.join(args.scripts)}",
                  file=sys.stderr)
            return 1
        if written != text:
            path.write_text(written)
            print(f"wrote the points table of {path}")
    for script in args.scripts:
        if args.check:
            if not notebook_is_current(script):
                print(f"{ipynb_path(script)} is stale: run specdec-course build-notebook {script}", file=sys.stderr)
                return 1
            print(f"{ipynb_path(script)} is current")
        else:
            print(f"wrote {build_notebook(script)}")
    return 0
