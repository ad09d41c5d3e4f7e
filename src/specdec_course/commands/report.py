"""`specdec-course report`: the class report page (report.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from specdec_kit.cli import add_command

from . import options


def register(commands) -> None:
    parser = add_command(commands, "report", "write a self-contained HTML page on the class: scores, pass rates, "
                         "what the class got wrong, speed, flags, near-identical code", "specdec-course report graded",
                         [options.autograder, options.graded])
    parser.add_argument("--out", help="the page to write (default: GRADED/report.html)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..core.plan import load_plan
    from ..platforms import report

    graded = Path(args.graded)
    autograder = Path(args.autograder)
    min_ratio = load_plan(autograder).min_ratio if (autograder / "hidden.py").is_file() else None
    out = Path(args.out) if args.out else graded / "report.html"
    out.write_text(report.build_report(graded, min_ratio), encoding="utf-8")
    print(f"wrote {out}")
    return 0
