"""`specdec-course autograde`: a class graded into grades.csv and feedback pages (grading/batch.py, results.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from specdec_kit.cli import add_command

from ..core.waits import quiet_waits
from . import options


def register(commands) -> None:
    parser = add_command(commands, "autograde", "grade a class's notebooks with nbgrader into grades.csv",
                         "specdec-course autograde downloads/ --out graded --roster roster.txt --jobs 2",
                         [options.solution, options.autograder, options.timeout, options.id_regex, options.roster,
                          options.roster_column, options.jobs, options.no_sandbox])
    parser.add_argument("submissions", help="a folder (or a zip or tar) of <student>.ipynb files, one folder per "
                        "student, or nbgrader's submitted/ tree")
    parser.add_argument("--out", default="graded", help="output directory; a second run merges into its "
                        "grades.csv")
    parser.add_argument("--student", nargs="+", help="grade only these students; every other row of "
                        "OUT/grades.csv stays as it was")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted batch: students already "
                        "graded from the same file are not graded again")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    quiet_waits()  # before torch is imported
    from tqdm.auto import tqdm

    from ..grading import course, results, row
    from ..grading.collect import collect, read_roster

    options.check_grading(args)
    out = Path(args.out).resolve()
    roster = read_roster(Path(args.roster), args.roster_column) if args.roster else None
    submissions = collect(Path(args.submissions), args.id_regex, roster, unpack_dir=out / "unpacked",
                          archive_limits=course.archive_limits(Path(args.autograder)))
    if not submissions:
        raise ValueError(f"no notebooks under {args.submissions}: expected <student>.ipynb files, one folder per "
                         "student, or nbgrader's submitted/<student>/speculative_decoding/ (or a zip or tar of these)")
    if args.student:
        submissions = _only(submissions, args.student)
    setup = course.setup_batch(out / "course", Path(args.solution).resolve(), Path(args.autograder).resolve(),
                                   args.jobs, args.timeout, args.sandboxed)
    print(f"the submissions' code runs under isolation {setup.limits_held!r}")
    with tqdm(total=len(submissions), desc="autograde") as bar:
        grades, replaced = results.grade_class(out, submissions, setup, resume=args.resume,
                                               progress=lambda _: bar.update())
    counts = {status: sum(g.status == status for g in grades) for status in row.STATUSES}
    failed = [g.student for g in grades if row.is_grader_failure(g.status, g.message)]
    print(f"wrote {out / 'grades.csv'} and feedback/<student>.html: "
          + ", ".join(f"{n} {status}" for status, n in counts.items() if n)
          + (f"; the grader failed on {len(failed)} of them (not the students: no score given), grade them again "
             f"with --student {' '.join(failed)}" if failed else ""))
    if replaced:
        print(f"replaced the earlier rows of {len(replaced)} student(s), kept in {out / 'regrades.csv'}: "
              + ", ".join(replaced))
    off_roster = [s.name for s in submissions if s.on_roster is False]
    if off_roster:
        print(f"not on the roster ({len(off_roster)}): {', '.join(off_roster)}")
    return 0


def _only(submissions: list, wanted: list[str]) -> list:
    """The submissions of the students named (by the id in the files or nbgrader's), all of them found."""
    chosen = [s for s in submissions if {s.student.casefold(), s.name.casefold()} & {w.casefold() for w in wanted}]
    found = {n.casefold() for s in chosen for n in (s.student, s.name)}
    unknown = [w for w in wanted if w.casefold() not in found]
    if unknown:
        raise ValueError(f"--student: no submission of {', '.join(unknown)} under the submissions given")
    return chosen
