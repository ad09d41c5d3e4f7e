"""The specdec-course command, the instructors': cut the release, grade a class, prove the kit on its catalogue,
and time what students cannot (HF's own methods, adaptive k against them). Students run `specdec-kit`.

Torch, transformers and nbgrader are imported inside the commands that use them, so that `--help` and
`--version` answer at once.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from specdec_kit import __version__
from specdec_kit.cli import (
    DEFAULT_NOTEBOOK,
    Formatter,
    add_bench_command,
    add_command,
    check_k,
    common_options,
    load_run,
    run_command,
)


def cmd_adaptive(args: argparse.Namespace) -> int:
    from specdec_kit import bench

    from . import adaptive_bench, hf_methods

    k_values = [int(k) for k in args.k.split(",")]
    check_k(k_values)
    if adaptive_bench.FIRST_K not in k_values:
        raise ValueError(f"--k must include {adaptive_bench.FIRST_K}, the adaptive methods' first k")
    verdicts = []
    for pair in args.pairs.split(","):
        args.pair = pair
        run = load_run(args, ("CachedSpeculativeDecoder", "AdaptiveSpeculativeDecoder"))
        print(f"{pair}: {len(run.prompts)} prompts x {args.repeats} repeats, k in {k_values}")
        document = bench.compare(run.classes, run.target, run.draft, run.prompts, k_values, pair=pair,
                                 repeats=args.repeats, methods=adaptive_bench.METHODS, device=str(run.device),
                                 dtype=run.dtype, runners=hf_methods.RUNNERS,
                                 micro_k_values=list(range(1, adaptive_bench.MAX_K + 1)),
                                 adaptive_k=[adaptive_bench.FIRST_K])
        bench.write_outputs(document, Path(args.out) / pair)
        verdicts.append(adaptive_bench.judge(document))
    print(adaptive_bench.verdict_table(verdicts))
    print(f"wrote {adaptive_bench.write(verdicts, Path(args.out))} and each pair's bench files under {args.out}")
    met = adaptive_bench.bar_met(verdicts)
    print(f"bar ({adaptive_bench.TOLERANCE:.0%} of the best fixed k and at least HF's schedule, on two pairs whose "
          f"best fixed k differ): {'met' if met else 'not met'}")
    return 0 if met else 1


def cmd_build_notebook(args: argparse.Namespace) -> int:
    from .notebooks import build_notebook, ipynb_path, notebook_is_current

    for script in args.scripts:
        if args.check:
            if not notebook_is_current(script):
                print(f"{ipynb_path(script)} is stale: run specdec-course build-notebook {script}", file=sys.stderr)
                return 1
            print(f"{ipynb_path(script)} is current")
        else:
            print(f"wrote {build_notebook(script)}")
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    from . import answers, publish, release

    solution, out_dir, autograder = Path(args.solution), Path(args.out), Path(args.autograder)
    config = publish.load_config(autograder)
    problems = publish.placeholder_problems(config)
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


def cmd_time_notebook(args: argparse.Namespace) -> int:
    import tempfile

    import nbformat

    from .student_run import finished_notebook, time_cells

    notebook = finished_notebook(Path(args.solution)) if args.finished else nbformat.read(args.release, as_version=4)
    with tempfile.TemporaryDirectory() as workdir:
        rows = time_cells(notebook, Path(workdir), fresh_cache=args.fresh_cache,
                          progress=lambda row: print(f"{row.seconds:7.1f} s  {row.cell}  {row.error}", flush=True))
    failed = sum(bool(row.error) for row in rows)
    print(f"{'finished' if args.finished else 'blank'} notebook, {'fresh' if args.fresh_cache else 'warm'} zoo "
          f"cache, {os.cpu_count()} cores: {sum(r.seconds for r in rows):.0f} s in {len(rows)} code "
          f"cells, {failed} ended in an error")
    return 0


def cmd_selftest(args: argparse.Namespace) -> int:
    import pandas as pd

    from .selftest import run_selftest

    _check_grading_options(args)
    outcomes = run_selftest(Path(args.solution), Path(args.release), Path(args.autograder), Path(args.workdir),
                            timeout=args.timeout, only=args.only, jobs=args.jobs)
    table = pd.DataFrame([vars(o) for o in outcomes])
    with pd.option_context("display.max_colwidth", 80, "display.width", 250):
        print(table.rename(columns={"name": "submission", "named_by": "tests that named it",
                                    "vs_hf_assisted": "speed"})
              .to_string(index=False, na_rep="-", formatters={"seconds": "{:.0f}".format, "speed": "{:.2f}x".format}))
    print(f"{int(table.ok.sum())}/{len(table)} submissions graded as expected; "
          f"median {table.seconds.median():.0f} s per submission")
    return 0 if table.ok.all() else 1


def cmd_autograde(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from . import grading, results
    from .collect import collect, read_roster

    _check_grading_options(args)
    out = Path(args.out).resolve()
    roster = read_roster(Path(args.roster), args.roster_column) if args.roster else None
    submissions = collect(Path(args.submissions), args.id_regex, roster, unpack_dir=out / "unpacked")
    if not submissions:
        raise ValueError(f"no notebooks under {args.submissions}: expected <student>.ipynb files, one folder per "
                         "student, or nbgrader's submitted/<student>/speculative_decoding/ (or a zip of these)")
    if args.student:
        submissions = _only(submissions, args.student)
    settings = grading.setup_batch(out / "course", Path(args.solution).resolve(), Path(args.autograder).resolve(),
                                   args.jobs, args.timeout)
    with tqdm(total=len(submissions), desc="autograde") as bar:
        grades, replaced = results.grade_class(out, submissions, settings, resume=args.resume,
                                               progress=lambda _: bar.update())
    counts = {status: sum(g.status == status for g in grades) for status in grading.STATUSES}
    print(f"wrote {out / 'grades.csv'} and feedback/<student>.html: "
          + ", ".join(f"{n} {status}" for status, n in counts.items() if n))
    if replaced:
        print(f"replaced the earlier rows of {len(replaced)} student(s), kept in {out / 'regrades.csv'}: "
              + ", ".join(replaced))
    off_roster = [s.name for s in submissions if s.on_roster is False]
    if off_roster:
        print(f"not on the roster ({len(off_roster)}): {', '.join(off_roster)}")
    return 0


def cmd_autograde_one(args: argparse.Namespace) -> int:
    from . import grading, results
    from .collect import Submission, file_time, nbgrader_id, student_name

    _check_grading_options(args)
    path = Path(args.notebook)
    if not path.is_file():
        raise ValueError(f"{path} is not a file: pass the student's notebook")
    name = args.student or student_name(path.stem, args.id_regex)
    out = Path(args.out).resolve()
    settings = grading.setup_batch(out / "course", Path(args.solution).resolve(), Path(args.autograder).resolve(),
                                   1, args.timeout)
    submission = Submission(nbgrader_id(name), path, name=name, submitted_at=file_time(path))
    [grade], _ = results.grade_class(out, [submission], settings)
    print(f"{name}: {grade.status}, {grade.score:g} / {grade.max_score:g} auto-graded points; "
          f"result in {out / 'done' / grade.student}.json (specdec-course merge gathers such folders)")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from . import export, report, results, verdict
    from .publish import load_config

    graded, autograder = Path(args.out).resolve(), Path(args.autograder).resolve()
    replaced = results.merge_results([Path(p).resolve() for p in args.parts], graded,
                                     Path(args.solution).resolve(), autograder)
    grades = export.class_grades(graded, load_config(autograder).deadline)
    export.write_gradescope(grades, graded / "grades_export.csv")
    page = report.build_report(graded, verdict.load_plan(autograder).min_ratio)
    (graded / "report.html").write_text(page, encoding="utf-8")
    print(f"merged {len(args.parts)} folder(s) into {graded}: grades.csv ({len(grades)} students), "
          f"grades_export.csv, report.html, feedback/"
          + (f"; replaced the earlier rows of {', '.join(replaced)} (kept in regrades.csv)" if replaced else ""))
    return 0


def cmd_gradescope(args: argparse.Namespace) -> int:
    from .gradescope import build_bundle

    print(f"wrote {build_bundle(Path('.'), Path(args.out))}: upload it as the assignment's autograder (Gradescope "
          "builds its image with setup.sh, then runs run_autograder on each submission)")
    return 0


def _only(submissions: list, wanted: list[str]) -> list:
    """The submissions of the students named (by the id in the files or nbgrader's), all of them found."""
    chosen = [s for s in submissions if {s.student.casefold(), s.name.casefold()} & {w.casefold() for w in wanted}]
    found = {n.casefold() for s in chosen for n in (s.student, s.name)}
    unknown = [w for w in wanted if w.casefold() not in found]
    if unknown:
        raise ValueError(f"--student: no submission of {', '.join(unknown)} under the submissions given")
    return chosen


def _check_grading_options(args: argparse.Namespace) -> None:
    """Every option of a grading run, checked before anything is set up: one line on what is wrong."""
    import re

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


def cmd_feedback(args: argparse.Namespace) -> int:
    from . import feedback

    graded = Path(args.graded)
    course = graded / "course"
    if not (course / "gradebook.db").is_file():
        raise ValueError(f"{graded} holds no graded course (no course/gradebook.db): run specdec-course autograde "
                         "first")
    results = feedback.generate_feedback(course, graded / "feedback", args.student)
    for student, reason in sorted(results.items()):
        print(f"{student}: " + (f"withheld: {reason}" if reason else f"wrote {graded / 'feedback' / student}.html"))
    return 0 if not any(results.values()) else 1


def cmd_export(args: argparse.Namespace) -> int:
    from . import export
    from .collect import read_roster
    from .publish import load_config

    graded = Path(args.graded)
    deadline = load_config(Path(args.autograder)).deadline
    roster = read_roster(Path(args.roster), args.roster_column) if args.roster else None
    grades = export.class_grades(graded, deadline, roster)
    out = Path(args.out)
    if args.template:
        unlisted = export.fill_canvas(Path(args.template), grades, out, args.column)
        if unlisted:
            print(f"not in the Canvas template, so not exported ({len(unlisted)}): {', '.join(unlisted)}")
    else:
        export.write_gradescope(grades, out)
    pending = [g.student for g in grades if g.manual is None]
    late = [g.student for g in grades if g.late_by]
    print(f"wrote {out}: {len(grades)} students, {len(late)} late (due {deadline.due.isoformat()}, "
          f"{deadline.grace_minutes} min grace), {len(pending)} with a hand-graded part pending"
          + (f" ({', '.join(pending)}: their totals hold the auto-graded points only)" if pending else ""))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from . import report, verdict

    graded = Path(args.graded)
    autograder = Path(args.autograder)
    min_ratio = verdict.load_plan(autograder).min_ratio if (autograder / "hidden.py").is_file() else None
    out = Path(args.out) if args.out else graded / "report.html"
    out.write_text(report.build_report(graded, min_ratio), encoding="utf-8")
    print(f"wrote {out}")
    return 0


WORKFLOW = """\
the course's path through the commands:
  build-notebook -> release -> selftest -> autograde -> feedback -> export, report
  (or, per container: autograde-one -> merge; on Gradescope: gradescope)
  bench and adaptive time HF's own methods beside the notebook's; time-notebook gives the student README's figures
run specdec-course COMMAND --help for a command's options and an example."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec-course", description=__doc__.split("\n")[0], epilog=WORKFLOW,
                                     formatter_class=Formatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_bench_command(commands, "specdec_course.hf_methods", "specdec-course bench --pair tiny --k 2,4 --methods "
                      "target_greedy,cached,prompt_lookup,hf_prompt_lookup --limit 4")

    adaptive = add_command(commands, "adaptive", "judge the notebook's adaptive k against every fixed k and HF's "
                        "heuristic schedule, on several pairs in one run",
                        "specdec-course adaptive --pairs tiny,tiny-b,synthetic-small --k 1,2,3,4,6,8 --repeats 2",
                        [common_options()])
    adaptive.add_argument("--pairs", default="tiny,tiny-b,synthetic-small", help="comma-separated pairs to judge on")
    adaptive.add_argument("--k", default="1,2,3,4,6,8", help="the fixed k values (must include 4, the first k)")
    adaptive.add_argument("--repeats", type=int, default=3, help="timed runs per method, k and prompt")
    adaptive.add_argument("--out", default="out/adaptive", help="directory for adaptive.json and each pair's files")
    adaptive.set_defaults(func=cmd_adaptive)

    timing = add_command(commands, "time-notebook", "run the student notebook as a student would, timing each cell "
                      "(the student README's figures)", "specdec-course time-notebook --finished --fresh-cache")
    timing.add_argument("--finished", action="store_true", help="the solution as handed in, not the blank release")
    timing.add_argument("--fresh-cache", action="store_true", help="build the offline models anew, as a first run")
    timing.add_argument("--solution", default=str(DEFAULT_NOTEBOOK), help="nbgrader source notebook")
    timing.add_argument("--release", default="assignment/speculative_decoding.ipynb", help="the student notebook")
    timing.set_defaults(func=cmd_time_notebook)

    build = add_command(commands, "build-notebook", "build .ipynb files from their jupytext .py twins",
                     "specdec-course build-notebook solutions/speculative_decoding.py")
    build.add_argument("scripts", nargs="+", help="percent-format .py files")
    build.add_argument("--check", action="store_true", help="exit 1 if an .ipynb differs from a rebuild")
    build.set_defaults(func=cmd_build_notebook)

    rel = add_command(commands, "release", "generate the student notebook from the solution with nbgrader",
                   "specdec-course release --student-repo ../specdec-assignment")
    rel.add_argument("--solution", default=str(DEFAULT_NOTEBOOK), help="nbgrader source")
    rel.add_argument("--out", default="assignment", help="directory of the student notebook")
    rel.add_argument("--check", action="store_true", help="exit 1 if the committed release differs from a new one")
    rel.add_argument("--student-repo", help="also export the student-facing tree into this directory: new, empty or "
                                            "a previous export, updated in place (.git and your own files kept)")
    rel.add_argument("--autograder", default="autograder",
                     help="the instructor's autograder/ directory; its config.toml's [publish] names the student "
                          "repository and tag")
    rel.set_defaults(func=cmd_release)

    selftest = add_command(commands, "selftest", "autograde the solution, the blank release and the known-bug "
                        "catalogue; exit 1 unless each scores as expected", "specdec-course selftest --jobs 2")
    selftest.add_argument("--solution", default=str(DEFAULT_NOTEBOOK), help="nbgrader source notebook")
    selftest.add_argument("--release", default="assignment/speculative_decoding.ipynb", help="the student notebook")
    selftest.add_argument("--autograder", default="autograder", help="the instructor's autograder/ directory")
    selftest.add_argument("--workdir", default="out/selftest", help="scratch directory (replaced)")
    selftest.add_argument("--timeout", type=int, help="seconds each notebook's own run may take (default: "
                                                      "autograder/config.toml)")
    selftest.add_argument("--only", nargs="*", help="grade only these catalogue entries (and solution, blank)")
    selftest.add_argument("--jobs", type=int, default=1, help="submissions graded at once")
    selftest.set_defaults(func=cmd_selftest)

    autograde = add_command(commands, "autograde", "grade a class's notebooks with nbgrader into grades.csv",
                         "specdec-course autograde downloads/ --out graded --roster roster.txt --jobs 2")
    autograde.add_argument("submissions", help="a folder (or a zip) of <student>.ipynb files, one folder per student, "
                                               "or nbgrader's submitted/ tree")
    autograde.add_argument("--out", default="graded", help="output directory; a second run merges into its "
                                                           "grades.csv")
    autograde.add_argument("--roster", help="the class list: a CSV with a header (an LMS's export) or one id per "
                                            "line; students without a submission get a row")
    autograde.add_argument("--roster-column", help="the roster CSV's id column (default: the first of "
                                                   "student_id, id, sid, login_id, SIS User ID, username, email)")
    autograde.add_argument("--student", nargs="+", help="grade only these students; every other row of "
                                                         "OUT/grades.csv stays as it was")
    autograde.add_argument("--resume", action="store_true", help="continue an interrupted batch: students already "
                                                                 "graded from the same file are not graded again")
    autograde.add_argument("--id-regex", help="regex whose first group is the student id in a file name")
    autograde.add_argument("--timeout", type=int, help="seconds each notebook's own run may take before it is "
                                                       "stopped (default: autograder/config.toml)")
    autograde.add_argument("--jobs", type=int, default=1,
                           help="notebooks graded at once; timed tests still run one at a time")
    autograde.add_argument("--solution", default=str(DEFAULT_NOTEBOOK), help="nbgrader source notebook")
    autograde.add_argument("--autograder", default="autograder", help="the instructor's autograder/ directory")
    autograde.set_defaults(func=cmd_autograde)

    fb = add_command(commands, "feedback", "render the cleaned feedback pages again (after grading by hand)",
                  "specdec-course feedback graded --student alice bob")
    fb.add_argument("graded", help="the --out folder of specdec-course autograde")
    fb.add_argument("--student", nargs="*", help="only these students (default: everyone graded)")
    fb.set_defaults(func=cmd_feedback)

    exp = add_command(commands, "export", "write the class's grades for the LMS: Gradescope's score import, or the "
                   "course's Canvas gradebook export filled in",
                   "specdec-course export graded --template canvas_export.csv --out canvas_import.csv")
    exp.add_argument("graded", help="the --out folder of specdec-course autograde")
    exp.add_argument("--out", default="grades_export.csv", help="the CSV to write")
    exp.add_argument("--template", help="the course's Canvas gradebook export (Grades > Export): its assignment "
                                        "column is filled in; without it, Gradescope's import format")
    exp.add_argument("--column", help="the Canvas column to fill (default: the one header naming 'speculative')")
    exp.add_argument("--roster", help="the class list (as for autograde): every student on it is exported")
    exp.add_argument("--roster-column", help="the roster CSV's id column")
    exp.add_argument("--autograder", default="autograder", help="the folder whose config.toml holds the deadline")
    exp.set_defaults(func=cmd_export)

    rep = add_command(commands, "report", "write a self-contained HTML page on the class: scores, pass rates, common "
                   "failures, speed, flags, near-identical code", "specdec-course report graded")
    rep.add_argument("graded", help="the --out folder of specdec-course autograde")
    rep.add_argument("--out", help="the page to write (default: GRADED/report.html)")
    rep.add_argument("--autograder", default="autograder", help="the folder whose config.toml holds the speed bar")
    rep.set_defaults(func=cmd_report)

    one = add_command(commands, "autograde-one", "grade one notebook into one folder (a container's share of a class; "
                   "specdec-course merge gathers the folders)",
                   "specdec-course autograde-one downloads/alice.ipynb --out results/alice")
    one.add_argument("notebook", help="the student's notebook")
    one.add_argument("--out", required=True, help="the folder for its result (done/<id>.json), course and feedback")
    one.add_argument("--student", help="the student's id (default: from the file name)")
    one.add_argument("--id-regex", help="regex whose first group is the student id in the file name")
    one.add_argument("--timeout", type=int, help="seconds the notebook's own run may take (default: "
                                                 "autograder/config.toml)")
    one.add_argument("--solution", default=str(DEFAULT_NOTEBOOK), help="nbgrader source notebook")
    one.add_argument("--autograder", default="autograder", help="the instructor's autograder/ directory")
    one.set_defaults(func=cmd_autograde_one, jobs=1)

    merge = add_command(commands, "merge", "gather autograde-one folders into one graded class: grades.csv, the "
                     "gradebook, feedback, grades_export.csv and report.html",
                     "specdec-course merge results/* --out graded")
    merge.add_argument("parts", nargs="+", help="folders written by specdec-course autograde-one")
    merge.add_argument("--out", default="graded", help="the class's folder; rows of students not in PARTS stay")
    merge.add_argument("--solution", default=str(DEFAULT_NOTEBOOK), help="nbgrader source notebook")
    merge.add_argument("--autograder", default="autograder", help="the instructor's autograder/ directory")
    merge.set_defaults(func=cmd_merge)

    gradescope = add_command(commands, "gradescope", "build Gradescope's autograder zip (setup.sh, run_autograder "
                          "and the kit)", "specdec-course gradescope --out autograder.zip")
    gradescope.add_argument("--out", default="autograder.zip", help="the zip to write")
    gradescope.set_defaults(func=cmd_gradescope)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser().parse_args(argv), "specdec-course")


if __name__ == "__main__":
    sys.exit(main())
