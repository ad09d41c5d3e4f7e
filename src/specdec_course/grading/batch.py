"""Grading a class's submissions: nbgrader runs each notebook, the kit's verdict gives the scores.

    specdec-course autograde SUBMISSIONS --out graded/ [--roster FILE] [--timeout 600] [--jobs N]

`collect.py` finds the submissions in the shapes LMSs give; `results.py` keeps the class's rows across runs;
`course.py` sets the course up once. For each readable submission (`grade`) two things run side by side:
- the notebook's own run (`notebook_run.py`): nbgrader autograde in a kernel, for the feedback page, the
  hand-graded report and formgrader;
- the verdict (`verdict.py`): the kit's visible and hidden checks on the notebook's definitions, each check's
  probes in a child process, the judging in this process;
and `row.py` makes the row from both. Once every kernel of the batch has finished (`finish`), the kit writes all
verdicts and autograded notebooks again (`gradebook.py`; under `--no-sandbox` a kernel runs as the grading user
and could have touched them) and renders the feedback pages with nbgrader's generate_feedback (cleaned by
`feedback.CleanFeedback`).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from pathlib import Path, PurePosixPath

import nbformat

from specdec_kit.checks.core import WALL_FACTOR
from specdec_kit.core import settings
from specdec_kit.protocol.adapters import cells_to_consider

from ..core.nbgrader_course import ASSIGNMENT, NOTEBOOK
from ..core.regular_files import write_below
from ..sandbox.child import MAX_CODE
from . import feedback, verdict
from .collect import Submission
from .course import BatchSetup
from .gradebook import read_scores, write_autograded, write_scores
from .jobs import JobTimedOut, run_jobs
from .notebook_run import InvalidSubmission, NotebookRun, match_release, nbgrader_backstop, read_submission
from .row import Grade, Graded, conclude, grader_failed, join_messages


def grade_all(course: Path, submissions: list[Submission], setup: BatchSetup, feedback_dir: Path,
              progress=None, kept: dict[str, Graded | Grade] | None = None) -> list[Grade]:
    """Grade every submission, `setup.jobs` at a time, then write every verdict again and the feedback.

    `progress` is called with each result as its submission finishes; `kept` holds results of an earlier,
    interrupted run by student, used instead of grading those again.
    """
    import torch

    os.environ[settings.THREADS] = str(setup.threads)  # the verdicts' hosts (started later) and their children
    torch.set_num_threads(setup.threads)  # this process's reference answers
    before = read_scores(course)  # before any kernel of the batch runs: what nothing in it has touched
    results: list[Graded | Grade | None] = [(kept or {}).get(s.student) for s in submissions]
    todo = [i for i, result in enumerate(results) if result is None]
    jobs = [functools.partial(grade, course, submissions[i], setup, before.get(submissions[i].student, {}))
            for i in todo]
    for job, future in run_jobs(jobs, setup.jobs, job_backstop(setup)):
        index = todo[job]
        results[index] = _result(future, submissions[index], course.parent / "logs")
        if progress:
            progress(results[index])
    return finish(course, results, feedback_dir, before)


def job_backstop(setup: BatchSetup) -> float:
    """Seconds on the clock past every bound of one submission's grading: the verdict's backstop, then the wait for
    the notebook's own run, with a margin for setting up and writing the row."""
    return setup.plan.verdict_seconds * WALL_FACTOR + nbgrader_backstop(setup) + 600


def _result(future, submission: Submission, log_dir: Path) -> Graded | Grade:
    """A job's result; a failure of the grader itself costs that row (status `error`, saying so and how to grade it
    again, traceback in the logs), never the batch, and never reads as the student's 0; a job given up at the
    backstop is a `timeout` row."""
    try:
        return future.result()
    except JobTimedOut as e:
        return Grade(submission.student, "timeout", message=f"{e}: grade it again with --student {submission.student}")
    except Exception as e:
        import traceback

        log_dir.mkdir(parents=True, exist_ok=True)
        log = log_dir / f"{submission.student}.error.log"
        log.write_text("".join(traceback.format_exception(e)))
        return Grade(submission.student, "error", message=grader_failed(submission.student, e, log))


def finish(course: Path, results: list[Graded | Grade], feedback_dir: Path, before: dict) -> list[Grade]:
    """After every kernel has stopped: every score in the gradebook set again (the batch's students' from
    the kit's records, everyone else's as the batch found them), the kit's notebooks written again, then
    the feedback."""
    graded = [r for r in results if isinstance(r, Graded)]
    write_scores(course, {**before, **{item.grade.student: item.scores for item in graded}})
    for item in graded:
        write_autograded(course, item.grade.student, item.notebook)
    try:
        withheld = feedback.generate_feedback(course, feedback_dir, [g.grade.student for g in graded])
    except Exception as e:  # the scores stand without pages: `specdec-course feedback` can render them later
        withheld = {g.grade.student: f"rendering the pages failed ({type(e).__name__}: {e})" for g in graded}
    grades = [r.grade if isinstance(r, Graded) else r for r in results]
    for grade in grades:
        if withheld.get(grade.student):
            grade.message = join_messages(grade.message, f"feedback page withheld: {withheld[grade.student]}")
    return grades


def grade(course: Path, submission: Submission, setup: BatchSetup, before: dict | None = None) -> Graded | Grade:
    """Grade one submission (`before`: its scores in the gradebook before the batch). Never raises for a bad
    submission: what went wrong is the row's status."""
    started = time.perf_counter()
    if submission.path is None or submission.problem:  # nothing submitted, or refused when collected
        return Grade(submission.student, "missing" if submission.path is None else "invalid",
                     message=submission.problem)
    try:
        notebook, notes = read_submission(submission.path, submission.root)
    except InvalidSubmission as e:
        return Grade(submission.student, "invalid", message=str(e))
    notes += match_release(notebook, setup.release)
    size = sum(len(source.encode()) for _, _, source, _ in cells_to_consider(notebook))
    if size > MAX_CODE:
        return Grade(submission.student, "invalid", message=f"the notebook's code cells hold {size / 2 ** 20:.1f} MB, "
                     f"more than the {MAX_CODE >> 20} MB the grader takes: move data out of the code (load it from a "
                     "file) and submit again")
    student = submission.student
    # Written where nbgrader reads it, replacing whatever is there: never through a link.
    write_below(course, PurePosixPath("submitted", student, ASSIGNMENT, NOTEBOOK),
                (nbformat.writes(notebook) + "\n").encode())  # as nbformat.write has it
    log_dir = course.parent / "logs"
    log_dir.mkdir(exist_ok=True)
    run = NotebookRun(course, student, setup, log_dir)
    kernel = threading.Thread(target=run.run, name=f"nbgrader {student}")
    kernel.start()
    judged = verdict.judge(notebook, setup.plan, setup.threads, setup.timing_threads,
                           log_dir / f"{student}.verdict.log", before_timing=kernel.join, isolation=setup.isolation)
    kernel.join()
    return conclude(course, student, notebook, notes, judged, run, setup, before or {},
                    time.perf_counter() - started)
