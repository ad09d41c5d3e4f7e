"""The options several instructor commands share, each declared once as a parent parser, and their checks."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

SOLUTION_NOTEBOOK = "solutions/speculative_decoding.ipynb"
RELEASE_NOTEBOOK = "assignment/speculative_decoding.ipynb"


def _parent(*flags: str, **kwargs) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(*flags, **kwargs)
    return parent


solution = _parent("--solution", default=SOLUTION_NOTEBOOK, help="the nbgrader source notebook (the solution)")
autograder = _parent("--autograder", default="autograder",
                     help="the instructors' autograder/ folder: hidden checks and config.toml (the student "
                          "repository and tag, the deadline, the speed bar, the limits)")
release = _parent("--release", default=RELEASE_NOTEBOOK, help="the student notebook")
timeout = _parent("--timeout", type=int, help="seconds each notebook's own run may take before it is stopped "
                                              "(default: autograder/config.toml)")
id_regex = _parent("--id-regex", help="regex whose first group is the student id in a file name")
roster = _parent("--roster", help="the class list: a CSV with a header (an LMS's export) or one id per line; every "
                                  "student on it gets a row")
roster_column = _parent("--roster-column", help="the roster CSV's id column (default: the first of student_id, id, "
                                                "sid, login_id, SIS User ID, username, email)")
graded = _parent("graded", help="the --out folder of specdec-course autograde")
no_sandbox = _parent("--no-sandbox", dest="sandboxed", action="store_false",
                     help="run the students' code as the grader's own user, without a sandbox. Without this flag "
                          "(the default) every submission runs in the strongest sandbox the machine gives: "
                          "bubblewrap, else a user of its own; use it only where the machine gives neither (every "
                          "row and the class report then say so)")
jobs = _parent("--jobs", type=int, default=1, help="notebooks graded at once (timed tests still run one at a time)")


def check_grading(args: argparse.Namespace) -> None:
    """Every option of a grading run, checked before anything is set up: one line on what is wrong."""
    if args.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {args.jobs}")
    if args.timeout is not None and args.timeout <= 0:
        raise ValueError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if getattr(args, "id_regex", None) is not None:
        try:
            re.compile(args.id_regex)
        except re.error as e:
            raise ValueError(f"--id-regex {args.id_regex!r} is not a regular expression: {e}") from None
    for option, path in (("--solution", Path(args.solution)), ("--autograder", Path(args.autograder) / "hidden.py")):
        if not path.is_file():
            raise ValueError(f"{option}: {path} does not exist (run from the repository root or pass {option})")
    if getattr(args, "roster", None) and not Path(args.roster).is_file():
        raise ValueError(f"--roster: {args.roster} does not exist")
    if getattr(args, "roster_column", None) and not getattr(args, "roster", None):
        raise ValueError("--roster-column needs --roster (the CSV whose column it names)")
