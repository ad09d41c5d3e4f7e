"""`specdec-course release`: the student notebook and the visible checks' answers (release.py, answers.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specdec_kit.cli import add_command

from . import options


def register(commands) -> None:
    parser = add_command(commands, "release", "generate the student notebook from the solution with nbgrader",
                         "specdec-course release --student-repo ../specdec-assignment",
                         [options.solution, options.autograder])
    parser.add_argument("--out", default="assignment", help="directory of the student notebook")
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed release differs from a new one")
    parser.add_argument("--student-repo", help="also export the student-facing tree into this directory: new, empty or "
                        "a previous export, updated in place (.git and your own files kept)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..authoring import answers, release
    from ..core import config as course_config

    solution, out_dir, autograder = Path(args.solution), Path(args.out), Path(args.autograder)
    config = course_config.load_config(autograder)
    problems = course_config.placeholder_problems(config)
    if args.student_repo and problems:  # assignment/ alone may keep them: CI and maintainers release it
        raise ValueError(f"{config.path} still holds placeholders, so students could not install the kit: "
                         f"{'; '.join(problems)}. Set them there before --student-repo")
    if args.student_repo:
        release.previous_export(Path(args.student_repo))  # refuses a directory it may not write, before nbgrader runs
    if args.check:
        stale = [str(path) for path, current in (
            (out_dir / release.NOTEBOOK, release.is_current(solution, out_dir, config)),
            (answers.ANSWERS_FILE, answers.answers_current(solution, autograder))) if not current]
        if stale:
            print(f"{' and '.join(stale)} stale: run specdec-course release", file=sys.stderr)
            return 1
        print(f"{out_dir / release.NOTEBOOK} and {answers.ANSWERS_FILE.name} are current")
    else:
        print(f"wrote {release.release(solution, out_dir, config)} and {answers.write_answers(solution, autograder)}")
    if args.student_repo:
        tree = release.export_student_tree(Path("."), out_dir / release.NOTEBOOK, Path(args.student_repo),
                                           release.student_readme(config))
        print(f"exported the student repository to {tree}, updated in place (checked: no solution, hidden test, "
              "instructor package or autograder file)")
    return 0
