"""`specdec-course merge`: autograde-one folders gathered into one graded class (results.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from specdec_kit.cli import add_command

from . import options


def register(commands) -> None:
    parser = add_command(commands, "merge", "gather autograde-one folders into one graded class: grades.csv, the "
                         "gradebook, feedback, grades_export.csv and report.html",
                         "specdec-course merge results/* --out graded", [options.solution, options.autograder])
    parser.add_argument("parts", nargs="+", help="folders written by specdec-course autograde-one")
    parser.add_argument("--out", default="graded", help="the class's folder; rows of students not in PARTS stay")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..core.config import load_config
    from ..core.plan import load_plan
    from ..grading import results
    from ..platforms import lms, report

    graded, autograder = Path(args.out).resolve(), Path(args.autograder).resolve()
    replaced = results.merge_results([Path(p).resolve() for p in args.parts], graded,
                                     Path(args.solution).resolve(), autograder)
    grades = lms.class_grades(graded, load_config(autograder).deadline)
    lms.write_gradescope(grades, graded / "grades_export.csv")
    page = report.build_report(graded, load_plan(autograder).min_ratio)
    (graded / "report.html").write_text(page, encoding="utf-8")
    print(f"merged {len(args.parts)} folder(s) into {graded}: grades.csv ({len(grades)} students), "
          f"grades_export.csv, report.html, feedback/"
          + (f"; replaced the earlier rows of {', '.join(replaced)} (kept in regrades.csv)" if replaced else ""))
    return 0
