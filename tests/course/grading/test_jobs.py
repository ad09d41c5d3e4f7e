"""A batch's jobs: each ends with its value, its exception, or a `timeout` at the backstop, and the batch goes on
past a job that never ends.

Example run: python -m pytest tests/course/grading/test_jobs.py -q
"""

import threading
import time
from pathlib import Path

import pytest

from specdec_course.grading import batch
from specdec_course.grading.collect import Submission
from specdec_course.grading.jobs import JobTimedOut, run_jobs
from specdec_course.grading.row import Grade


def test_a_job_that_never_ends_is_given_up_at_the_backstop_and_the_others_finish():
    never = threading.Event()

    def fails():
        raise ValueError("the job's own failure")

    jobs = [never.wait, lambda: "quick", fails, lambda: "after the slot frees"]
    started = time.monotonic()
    finished = dict(run_jobs(jobs, workers=1, backstop=0.5))
    assert time.monotonic() - started < 10
    assert set(finished) == {0, 1, 2, 3}, finished
    with pytest.raises(JobTimedOut, match="had not ended after 0.5 s"):
        finished[0].result()
    assert finished[1].result() == "quick" and finished[3].result() == "after the slot frees"
    with pytest.raises(ValueError, match="the job's own failure"):
        finished[2].result()


def test_a_submission_whose_grading_never_ends_gets_a_timeout_row_and_the_batch_its_rows(tmp_path, monkeypatch):
    """grade_all gives every submission a row, whatever one of them does: the one that never ends is `timeout`,
    saying how to grade it again."""
    never = threading.Event()

    def grade(course, submission, setup, before):
        if submission.student == "stuck":
            never.wait()
        return Grade(submission.student, "graded")

    monkeypatch.setattr(batch, "grade", grade)
    monkeypatch.setattr(batch, "job_backstop", lambda setup: 1.0)
    monkeypatch.setattr(batch, "read_scores", lambda course: {})
    monkeypatch.setattr(batch, "finish", lambda course, results, feedback_dir, before: results)
    setup = type("Setup", (), {"jobs": 2, "threads": 1})()
    submissions = [Submission(name, Path(f"{name}.ipynb")) for name in ("alice", "stuck", "bob")]
    rows = batch.grade_all(tmp_path / "course", submissions, setup, tmp_path / "feedback")
    assert [(r.student, r.status) for r in rows] == [("alice", "graded"), ("stuck", "timeout"), ("bob", "graded")]
    assert "--student stuck" in rows[1].message, rows[1].message
