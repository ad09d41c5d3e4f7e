"""`specdec-course release`: the student notebook and the visible checks' answers (release.py, answers.py), or,
with --student-repo, the tree published to students, rendered for it without touching the checkout.

A release takes minutes (docs/benchmarks.md): a bar on stderr counts its steps and names the one under way, the
answers' own bar below it; stdout keeps what was written, with the new total where a points change moved it.
"""

from __future__ import annotations

import argparse
import contextlib
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
    answers_file = release.checkout_answers(Path("."))  # refuses an installed copy, before any work
    if args.check:
        with steps(2, "release --check") as bar:
            stale = current(solution, out_dir, autograder, config, answers_file, bar)
        return check_verdict(stale, out_dir)
    note = release.points_note(solution, out_dir / release.NOTEBOOK)  # before the notebook it reads is replaced
    with steps(2, "release") as bar:
        with step(bar, "the student notebook, with nbgrader"):
            notebook = release.release(solution, out_dir, config)
        with step(bar, "the visible checks' answers, from the solution"):
            written = answers.write_answers(solution, autograder, answers_file)
    print(f"wrote {notebook} and {written}" + (f"; {note}" if note else ""))
    return 0


@contextlib.contextmanager
def steps(total: int, command: str):
    """A bar on stderr over the `total` steps of `command`. What the steps print goes to stderr too (the solution
    prints its pair as the answers load it), so that stdout holds only what the command says after the bar."""
    from tqdm.auto import tqdm

    with tqdm(total=total, desc=command, unit="step") as bar, contextlib.redirect_stdout(sys.stderr):
        yield bar


@contextlib.contextmanager
def step(bar, what: str):
    """One step of the command's bar: named while it runs, counted when it ends."""
    bar.set_postfix_str(what)
    yield
    bar.update()


def current(solution: Path, out_dir: Path, autograder: Path, config, answers_file: Path, bar) -> str | None:
    """None where the committed release notebook and the checkout's answers (`answers_file`) equal a fresh
    release's, else which are stale (with the new total where it moved); two steps of `bar`."""
    from ..authoring import answers, release

    with step(bar, "checking the student notebook against a fresh one"):
        notebook_fresh = release.is_current(solution, out_dir, config)
    with step(bar, "checking the visible checks' answers against the solution's"):
        answers_fresh = answers.answers_current(solution, autograder, answers_file)
    stale = [str(path) for path, fresh in ((out_dir / release.NOTEBOOK, notebook_fresh),
                                           (answers_file, answers_fresh)) if not fresh]
    if not stale:
        return None
    note = None if notebook_fresh else release.points_note(solution, out_dir / release.NOTEBOOK)
    return f"{' and '.join(stale)} stale{f' ({note})' if note else ''}"


def check_verdict(stale: str | None, out_dir: Path) -> int:
    """current()'s finding, printed once its bar is closed: on stderr what is stale, else on stdout that all is
    current; the exit status."""
    from ..authoring import release

    if stale:
        print(f"{stale}: run specdec-course release", file=sys.stderr)
        return 1
    print(f"{out_dir / release.NOTEBOOK} and {release.STUDENT_ANSWERS} are current")
    return 0


def export(solution: Path, autograder: Path, dest: Path, config, check: bool, out_dir: Path) -> int:
    """The student tree in `dest`: its notebook (with the publish settings) and answers rendered into a scratch
    folder, so that the checkout's assignment/ (which keeps the placeholders) and answers.json stay as they are."""
    from ..authoring import answers, release

    created = not (dest / release.MANIFEST).is_file()
    release.previous_export(dest)  # refuses a directory it may not write, before nbgrader runs
    note = release.points_note(solution, dest / release.NOTEBOOK)  # against the notebook students have now
    with steps(3 + 2 * check, "release --student-repo") as bar:
        stale = current(solution, out_dir, autograder, config, release.checkout_answers(Path(".")), bar) \
            if check else None
        if not stale:
            with tempfile.TemporaryDirectory() as scratch:
                with step(bar, "the student notebook, with nbgrader"):
                    notebook = release.release(solution, Path(scratch), config)
                with step(bar, "the visible checks' answers, from the solution"):
                    rendered = answers.render_answers(solution, autograder)
                with step(bar, "the student tree, checked"):
                    tree = release.export_student_tree(Path("."), notebook, dest, release.student_readme(config),
                                                       rendered)
    if check and check_verdict(stale, out_dir):
        return 1
    print(f"exported the student repository to {tree}, {'created' if created else 'updated in place'} (checked: no "
          "solution, hidden test, instructor package or autograder file)" + (f"; {note}" if note else ""))
    return 0
