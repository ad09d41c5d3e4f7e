"""`specdec-course export`: the class's grades for the LMS (lms.py): a bar on stderr over its steps (nbgrader's
gradebook read, the CSV written), what it wrote on stdout."""

from __future__ import annotations

import argparse
from pathlib import Path

from specdec_kit.cli import add_command

from . import options
from .release import step, steps


def register(commands) -> None:
    parser = add_command(commands, "export", "write the class's grades for the LMS: Gradescope's score import, or the "
                         "course's Canvas gradebook export filled in",
                         "specdec-course export graded --template canvas_export.csv --out canvas_import.csv",
                         [options.autograder, options.roster, options.roster_column, options.graded])
    parser.add_argument("--out", default="grades_export.csv", help="the CSV to write")
    parser.add_argument("--template", help="the course's Canvas gradebook export (Grades > Export): its assignment "
                        "column is filled in; without it, Gradescope's import format")
    parser.add_argument("--column", help="the Canvas column to fill (default: the one header naming 'speculative')")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..core.config import load_config
    from ..grading.collect import read_roster
    from ..platforms import lms

    graded = Path(args.graded)
    if not (graded / "grades.csv").is_file():  # refused in one line, before the bar
        raise ValueError(f"{graded} holds no grades.csv: run specdec-course autograde --out {graded} first")
    if args.template and not Path(args.template).is_file():
        raise ValueError(f"--template: {args.template} does not exist")
    deadline = load_config(Path(args.autograder)).deadline
    roster = read_roster(Path(args.roster), args.roster_column) if args.roster else None
    out = Path(args.out)
    with steps(2, "export") as bar:
        with step(bar, "the class's grades, from nbgrader's gradebook"):
            grades = lms.class_grades(graded, deadline, roster)
        with step(bar, "the Canvas template filled in" if args.template else "Gradescope's score import"):
            if args.template:
                unlisted = lms.fill_canvas(Path(args.template), grades, out, args.column)
            else:
                unlisted = []
                lms.write_gradescope(grades, out)
    if unlisted:
        print(f"not in the Canvas template, so not exported ({len(unlisted)}): {', '.join(unlisted)}")
    pending = [g.student for g in grades if g.manual is None]
    late = [g.student for g in grades if g.late]
    print(f"wrote {out}: {len(grades)} students, {len(late)} late (due {deadline.due.isoformat()}, "
          f"{deadline.grace_minutes} min grace), {len(pending)} with a hand-graded part pending"
          + (f" ({', '.join(pending)}: their totals hold the auto-graded points only)" if pending else ""))
    return 0
