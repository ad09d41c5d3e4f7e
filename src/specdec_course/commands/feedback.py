"""`specdec-course feedback`: the feedback pages rendered again (feedback.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from specdec_kit.cli import add_command

from . import options


def register(commands) -> None:
    parser = add_command(commands, "feedback", "render the cleaned feedback pages again (after grading by hand)",
                         "specdec-course feedback graded --student alice bob", [options.graded])
    parser.add_argument("--student", nargs="*", help="only these students (default: everyone graded)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..grading import feedback

    graded = Path(args.graded)
    course = graded / "course"
    if not (course / "gradebook.db").is_file():
        raise ValueError(f"{graded} holds no graded course (no course/gradebook.db): run specdec-course autograde "
                         "first")
    results = feedback.generate_feedback(course, graded / "feedback", args.student)
    for student, reason in sorted(results.items()):
        print(f"{student}: " + (f"withheld: {reason}" if reason else f"wrote {graded / 'feedback' / student}.html"))
    return 0 if not any(results.values()) else 1
