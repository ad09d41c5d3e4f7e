"""`specdec-course selftest`: the kit proves itself with real nbgrader autograding.

Grades the reference solution (full marks on auto-graded points), the blank release (zero, grading
completes), and every entry of the instructor's catalogue (`autograder/catalogue.py`): known student
bugs, each expected to lose exactly the points of the tests its `fails` lists, and correct variants
written differently from the reference, expected to lose nothing (or only the tests they declare).
A submission is the solution notebook with the catalogue entry's edits applied, solution markers and
hidden tests removed, as a student would hand it in.

Grading the whole catalogue takes tens of minutes (docs/benchmarks.md): a bar on stderr counts the submissions graded,
with a line for each as it finishes (its score, and whether it lost the tests its entry names); the rows are returned.
Everything is written into `workdir`, which it empties first: only a folder it made (its WORKDIR_MARK file inside), an
empty one or a new one, never a folder of someone else's files (`--workdir .`).
"""

from __future__ import annotations

import html
import logging
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
from tqdm.auto import tqdm

from specdec_kit.core import settings

from ..grading import batch as grading_batch
from ..grading import course as grading_course
from ..grading import row
from ..grading.collect import Submission
from .catalogue import Entry, load_catalogue, make_submission

log = logging.getLogger(__name__)
WORKDIR_MARK = ".specdec-selftest"


@dataclass
class SelftestRow:
    name: str
    expected: str
    got: str
    lost: str  # the tests it did not get full marks on
    ok: bool
    seconds: float
    vs_hf_assisted: float | None  # the speed test's measured ratio, when it got that far
    problems: tuple[str, ...] = ()  # why the row is not as expected


def run_selftest(solution: Path, release_notebook: Path, autograder_dir: Path, workdir: Path,
                 timeout: int | None = None, only: list[str] | None = None, jobs: int = 1,
                 sandboxed: bool = True) -> list[SelftestRow]:
    """Grade the solution, the blank release and the catalogue in one batch; one row per submission, in the
    catalogue's order (solution first, blank last)."""
    workdir, autograder_dir = workdir.resolve(), autograder_dir.resolve()
    os.environ[settings.SELFTEST] = "1"  # the grader's speed test times one repeat
    fresh_workdir(workdir)
    course = workdir / "course"
    started = time.perf_counter()
    setup = grading_course.setup_batch(course, solution.resolve(), autograder_dir, jobs, timeout, sandboxed)
    log.info("the submissions' code runs under isolation %r; course and zoo ready in %.0f s", setup.limits_held,
             time.perf_counter() - started)
    catalogue = [e for e in load_catalogue(autograder_dir) if not only or e.name in only]
    entries = [Entry("solution", "the reference solution")] + catalogue
    submissions = workdir / "submissions"
    submissions.mkdir(parents=True)
    for entry in entries:
        nbformat.write(make_submission(solution, entry), submissions / f"{entry.name}.ipynb")
    (submissions / "blank.ipynb").write_bytes(release_notebook.read_bytes())
    full = {**setup.points, **setup.extra_credit}  # each test's full marks, bonus tests' extra credit too
    blank = Entry("blank", "the release as handed out", fails=frozenset(full), message="NotImplementedError")
    entries.append(blank)
    feedback_dir = workdir / "feedback"
    batch = [Submission(entry.name, submissions / f"{entry.name}.ipynb") for entry in entries]
    fails = {entry.name: entry.fails for entry in entries}
    with tqdm(total=len(batch), desc="selftest", unit="submission") as bar:
        def graded(result: row.Graded | row.Grade) -> None:
            grade = result.grade if isinstance(result, row.Graded) else result
            lost, expected = _lost(grade, full), sorted(fails[grade.student])
            verdict = (f"lost {_tests(lost)} (as expected)" if lost == expected else  # a mismatch names every test
                       f"lost {', '.join(lost) or 'nothing'}, expected {', '.join(expected) or 'nothing'}")
            bar.write(f"graded {grade.student} in {grade.seconds:.0f} s: {_got(grade)}, {verdict}", file=sys.stderr)
            bar.update()
            bar.set_postfix_str(grade.student if bar.n < bar.total else "the gradebook and the feedback pages")

        grades = grading_batch.grade_all(course, batch, setup, feedback_dir, progress=graded)
    outcomes = []
    for entry, result in zip(entries, grades):
        lost, expected = _lost(result, full), sorted(entry.fails)
        problems = _feedback_problems(feedback_dir / f"{entry.name}.html", entry.message)
        if result.status != "graded" or result.message:  # an error, or feedback withheld for a leak
            problems.append(f"{result.status}: {result.message}")
        elif lost != expected:
            problems.append(f"expected to lose {expected or '-'}")
        outcomes.append(SelftestRow(entry.name, "full marks" if not expected else f"loses {len(expected)} tests",
                                    _got(result), ", ".join(lost) or "-", not problems, result.seconds,
                                    result.vs_hf_assisted, tuple(problems)))
    return outcomes


def check_workdir(workdir: Path) -> None:
    """Refuse a `workdir` that the selftest would empty but did not make: a file, or a folder with files in it."""
    if workdir.exists() and not workdir.is_dir():
        raise ValueError(f"--workdir {workdir} is a file, not a folder: name a new or empty folder")
    if workdir.is_dir() and not (workdir / WORKDIR_MARK).is_file() and any(workdir.iterdir()):
        raise ValueError(f"--workdir {workdir} holds files the selftest did not write, and it empties its workdir "
                         "first: name a new or empty folder (the default is out/selftest), or empty this one yourself")


def fresh_workdir(workdir: Path) -> None:
    """`workdir` empty but for WORKDIR_MARK, once check_workdir allows it; the folder itself is kept (it may be the
    current directory)."""
    check_workdir(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    for path in workdir.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()  # a link goes, not what it points to
    (workdir / WORKDIR_MARK).write_text("Made by specdec-course selftest, which empties this folder on each run.\n")


def _lost(grade: row.Grade, full: dict[str, float]) -> list[str]:
    """The tests `grade` did not give full marks."""
    return sorted(c for c in full if grade.tests.get(c, 0.0) < full[c])


def _tests(tests: list[str]) -> str:
    """The tests, or how many when there are more than three (the blank release loses all of them)."""
    return "nothing" if not tests else ", ".join(tests) if len(tests) < 4 else f"{len(tests)} tests"


def _got(grade: row.Grade) -> str:
    return f"{grade.score:g}/{grade.max_score:g} +{grade.extra_credit:g}" if grade.status == "graded" else grade.status


def _feedback_problems(page: Path, message: str) -> list[str]:
    """What is wrong with a submission's feedback page: missing, or without the bug's message.

    Leaks are checked where the page is written (feedback.CleanFeedback and generate_feedback withhold it).
    """
    if not page.is_file():
        return [f"no feedback page at {page}"]
    text = html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))  # code is split into highlighting spans
    if message and message not in text:
        return [f"feedback does not show {message!r}"]
    return []
