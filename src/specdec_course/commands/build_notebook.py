"""`specdec-course build-notebook`: the .ipynb files built from their jupytext .py twins (notebooks.py)."""

from __future__ import annotations

import argparse
import sys

from specdec_kit.cli import add_command


def register(commands) -> None:
    parser = add_command(commands, "build-notebook", "build .ipynb files from their jupytext .py twins",
                         "specdec-course build-notebook solutions/speculative_decoding.py")
    parser.add_argument("scripts", nargs="+", help="percent-format .py files")
    parser.add_argument("--check", action="store_true", help="exit 1 if an .ipynb differs from a rebuild")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..notebooks import build_notebook, ipynb_path, notebook_is_current

    for script in args.scripts:
        if args.check:
            if not notebook_is_current(script):
                print(f"{ipynb_path(script)} is stale: run specdec-course build-notebook {script}", file=sys.stderr)
                return 1
            print(f"{ipynb_path(script)} is current")
        else:
            print(f"wrote {build_notebook(script)}")
    return 0
