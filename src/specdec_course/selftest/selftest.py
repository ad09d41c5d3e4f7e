"""`specdec-course selftest`: the kit proves itself with real nbgrader autograding.

Grades the reference solution (full marks on auto-graded points), the blank release (zero, grading
completes), and every entry of the instructor's catalogue (`autograder/catalogue.py`): known student
bugs, each expected to lose exactly the points of the tests that name it, and correct variants
written differently from the reference, expected to lose nothing (or only the tests they declare).
A submission is the solution notebook with the catalogue entry's edits applied, solution markers and
hidden tests removed, as a student would hand it in.
"""

from __future__ import annotations

import html
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from specdec_kit import settings

from ..grading import batch as grading_batch
from ..grading import course as grading_course
from ..grading import gradebook, row
from ..grading.collect import Submission
from .catalogue import Entry, load_catalogue, make_submission


@dataclass
class SelftestRow:
    name: str
    expected: str
    got: str
    named_by: str
    ok: bool
    seconds: float
    vs_hf_assisted: float | None  # the speed test's measured ratio, when it got that far


def run_selftest(solution: Path, release_notebook: Path, autograder_dir: Path, workdir: Path,
                 timeout: int | None = None, only: list[str] | None = None, jobs: int = 1,
                 progress=print, sandboxed: bool = True) -> list[SelftestRow]:
    """Grade the solution, the blank release and the catalogue in one batch; one row per submission."""
    workdir, autograder_dir = workdir.resolve(), autograder_dir.resolve()
    os.environ[settings.SELFTEST] = "1"  # the grader's speed test times one repeat
    gradebook.clear_course(workdir)
    course = workdir / "course"
    started = time.perf_counter()
    setup = grading_course.setup_batch(course, solution.resolve(), autograder_dir, jobs, timeout, sandboxed)
    progress(f"the submissions' code runs under isolation {setup.limits_held!r}")
    progress(f"course and zoo ready in {time.perf_counter() - started:.0f} s")
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
    grades = grading_batch.grade_all(course, batch, setup, feedback_dir,
                                     progress=lambda r: progress(f"graded {_row(r).student}"))
    outcomes = []
    for entry, result in zip(entries, grades):
        lost = sorted(c for c in full if result.tests.get(c, 0.0) < full[c])
        expected = sorted(entry.fails)
        problems = _feedback_problems(feedback_dir / f"{entry.name}.html", entry.message)
        if result.status != "graded" or result.message:  # an error, or feedback withheld for a leak
            problems.append(f"{result.status}: {result.message}")
        elif lost != expected:
            problems.append(f"expected to lose {expected or '-'}")
        got = (f"{result.score:g}/{result.max_score:g} +{result.extra_credit:g}" if result.status == "graded"
               else result.status)
        outcomes.append(SelftestRow(entry.name, "full marks" if not expected else f"loses {len(expected)} tests",
                                got, ", ".join(lost) or "-", not problems, result.seconds, result.vs_hf_assisted))
        progress(f"{entry.name}: {'ok' if not problems else 'MISMATCH'} ({result.seconds:.0f} s) {got}; "
                 f"lost: {lost or '-'}" + "".join(f"; {p}" for p in problems))
    return outcomes


def _row(result) -> row.Grade:
    return result.grade if isinstance(result, row.Graded) else result


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
