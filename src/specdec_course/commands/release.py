"""`specdec-course release`: the student notebook and the visible checks' answers (release.py, answers.py), or,
with --student-repo, the tree published to students, rendered for it without touching the checkout."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from specdec_kit.cli import add_command

from . import options


def register(commands) -> None:
    parser = add_command(commands, "release", "generate the student notebook from the solution with nbgrader",
                         "specdec-course release --student-repo ../specdec-assignment",
                         [options.solution, options.autograder])
    parser.add_argument("--out", default="assignment", help="directory of the student notebook")
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed release differs from a new one")
    parser.add_argument("--student-repo", help="instead of writing --out and the answers, export the student-facing "
                        "tree into this directory: created if new, else (empty or a previous export) updated in place, "
                        ".git and your own files kept; the checkout is left as it is")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..core import config as course_config

    solution, out_dir, autograder = Path(args.solution), Path(args.out), Path(args.autograder)
    config = course_config.load_config(autograder)
    problems = course_config.placeholder_problems(config)
    if args.student_repo and problems:  # assignment/ alone may keep them: CI and maintainers release it
        raise ValueError(f"{config.path} still holds placeholders, so students could not install the kit: "
                         f"{'; '.join(problems)}. Set them there before --student-repo")
    from ..authoring import answers, release  # seconds of imports: after the refusals that need none

    if args.student_repo:
        return export(solution, autograder, Path(args.student_repo), config, check=args.check, out_dir=out_dir)
    if args.check:
        return 0 if current(solution, out_dir, autograder, config) else 1
    step("the student notebook, with nbgrader")
    notebook = release.release(solution, out_dir, config)
    step("the visible checks' answers, from the solution")
    print(f"wrote {notebook} and {answers.write_answers(solution, autograder)}")
    return 0


def step(what: str) -> None:
    """A line on stderr as each step starts: a release takes minutes (docs/benchmarks.md)."""
    print(f"release: {what}", file=sys.stderr, flush=True)


def current(solution: Path, out_dir: Path, autograder: Path, config) -> bool:
    """Whether the committed release notebook and answers equal a fresh release's, saying which are stale."""
    from ..authoring import answers, release

    step("checking the student notebook against a fresh one")
    notebook_fresh = release.is_current(solution, out_dir, config)
    step("checking the visible checks' answers against the solution's")
    stale = [str(path) for path, fresh in (
        (out_dir / release.NOTEBOOK, notebook_fresh),
        (answers.ANSWERS_FILE, answers.answers_current(solution, autograder))) if not fresh]
    if stale:
        print(f"{' and '.join(stale)} stale: run specdec-course release", file=sys.stderr)
        return False
    print(f"{out_dir / release.NOTEBOOK} and {answers.ANSWERS_FILE.name} are current")
    return True


def export(solution: Path, autograder: Path, dest: Path, config, check: bool, out_dir: Path) -> int:
    """The student tree in `dest`: its notebook (with the publish settings) and answers rendered into a scratch
    folder, so that the checkout's assignment/ (which keeps the placeholders) and answers.json stay as they are."""
    from ..authoring import answers, release

    created = not (dest / release.MANIFEST).is_file()
    release.previous_export(dest)  # refuses a directory it may not write, before nbgrader runs
    if check and not current(solution, out_dir, autograder, config):
        return 1
    with tempfile.TemporaryDirectory() as scratch:
        step("the student notebook, with nbgrader")
        notebook = release.release(solution, Path(scratch), config)
        step("the student tree and its answers")
        tree = release.export_student_tree(Path("."), notebook, dest, release.student_readme(config),
                                           answers.render_answers(solution, autograder))
    print(f"exported the student repository to {tree}, {'created' if created else 'updated in place'} (checked: no "
          "solution, hidden test, instructor package or autograder file)")
    return 0
