"""`specdec-course autograde-one`: one notebook graded into one folder, a container's share (results.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from specdec_kit.cli import add_command

from ..core.waits import quiet_waits
from . import options


def register(commands) -> None:
    parser = add_command(commands, "autograde-one", "grade one notebook into one folder (a container's share of a "
                         "class; specdec-course merge gathers the folders)",
                         "specdec-course autograde-one downloads/alice.ipynb --out results/alice",
                         [options.solution, options.autograder, options.timeout, options.id_regex, options.no_sandbox])
    parser.add_argument("notebook", help="the student's notebook")
    parser.add_argument("--out", required=True, help="the folder for its result (done/<id>.json), course and feedback")
    parser.add_argument("--student", help="the student's id (default: from the file name)")
    parser.set_defaults(func=run, jobs=1)


def run(args: argparse.Namespace) -> int:
    quiet_waits()  # before torch is imported
    from ..grading import course, results
    from ..grading.collect import Submission, upload_time
    from ..grading.names import Owner, nbgrader_id, read_lms_name, student_name

    options.check_grading(args)
    path = Path(args.notebook)
    if not path.is_file():
        raise ValueError(f"{path} is not a file: pass the student's notebook")
    name = args.student or student_name(path.stem, args.id_regex)
    out = Path(args.out).resolve()
    setup = course.setup_batch(out / "course", Path(args.solution).resolve(), Path(args.autograder).resolve(),
                                   1, args.timeout, args.sandboxed)
    owner = read_lms_name(path.stem) or Owner(name)  # an LMS's download carries the download's time, not the upload's
    submission = Submission(nbgrader_id(name), path, name=name, submitted_at=upload_time(owner, path))
    [grade], _ = results.grade_class(out, [submission], setup)
    print(f"{name}: {grade.status}, {grade.score:g} / {grade.max_score:g} auto-graded points; "
          f"result in {out / 'done' / grade.student}.json (specdec-course merge gathers such folders)")
    return 0
