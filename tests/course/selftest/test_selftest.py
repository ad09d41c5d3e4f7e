"""`specdec-course selftest` through the whole pipeline (nbgrader, the sandbox, the verdict) on the solution, the blank
release and one catalogued bug: each row as the catalogue says. Marked release: `make test-release` runs it, then the
whole catalogue (`make selftest`); CI grades the same pipeline in tests/test_corpora.py and test_batch.py. Without
the pipeline (a stand-in grades), what the command prints where: progress on stderr, results on stdout.

Example run: python -m pytest tests/course/selftest/test_selftest.py -q
"""

import contextlib
from types import SimpleNamespace

import pytest

from specdec_course.cli import main
from specdec_course.grading import batch, course, row
from specdec_course.selftest import load
from specdec_course.selftest.catalogue import load_catalogue
from specdec_kit import settings

from conftest import REPO


@pytest.mark.slow  # three notebooks graded, two at a time: about two minutes on 2 cores
@pytest.mark.release
def test_selftest_grades_the_solution_the_blank_release_and_an_entry_as_the_catalogue_says(tmp_path, capsys):
    code = main(["selftest", "--jobs", "2", "--only", "no_bonus_token", "--workdir", str(tmp_path / "selftest"),
                 "--solution", str(REPO / "solutions" / "speculative_decoding.ipynb"),
                 "--release", str(REPO / "assignment" / "speculative_decoding.ipynb"),
                 "--autograder", str(REPO / "autograder")])
    printed = capsys.readouterr().out
    assert code == 0 and "3/3 submissions graded as expected" in printed, printed[-3000:]


@pytest.mark.parametrize("bug_loses", ["its tests", "nothing"])
def test_selftest_shows_each_graded_submission_on_stderr_and_keeps_stdout_for_the_table(tmp_path, capsys, monkeypatch,
                                                                                         bug_loses):
    """The grading replaced by a stand-in that gives each submission its expected losses (or the bug none): stderr
    has the bar over the three submissions and a line for each as it finishes; stdout only the table, what is wrong
    with a row, and the count."""
    full = {"test_exact": 12.0, "test_counts": 8.0, "test_correction_and_bonus": 8.0, "test_speedup": 10.0,
            "test_lookup": 3.0, "test_adaptive": 3.0}
    bug = next(e for e in load_catalogue(REPO / "autograder") if e.name == "no_bonus_token")
    lose = {"solution": set(), "no_bonus_token": set(bug.fails) if bug_loses == "its tests" else set(),
            "blank": set(full)}

    def grade_all(course_dir, submissions, setup, feedback_dir, progress):
        feedback_dir.mkdir(parents=True)
        grades = []
        for submission in submissions:
            tests = {t: 0.0 if t in lose[submission.student] else p for t, p in full.items()}
            grades.append(row.Grade(submission.student, "graded", sum(tests.values()), 100.0, tests=tests, seconds=1))
            (feedback_dir / f"{submission.student}.html").write_text(f"<p>NotImplementedError {bug.message}</p>")
            progress(grades[-1])
        return grades

    monkeypatch.setenv(settings.SELFTEST, "")  # restored after the test: the selftest sets it
    monkeypatch.setattr(load, "loaded", lambda *args: contextlib.nullcontext())
    monkeypatch.setattr(course, "setup_batch", lambda *args: SimpleNamespace(limits_held="none", points=full,
                                                                             extra_credit={}))
    monkeypatch.setattr(batch, "grade_all", grade_all)
    code = main(["selftest", "--only", "no_bonus_token", "--workdir", str(tmp_path / "selftest"),
                 "--solution", str(REPO / "solutions" / "speculative_decoding.ipynb"),
                 "--release", str(REPO / "assignment" / "speculative_decoding.ipynb"),
                 "--autograder", str(REPO / "autograder")])
    printed = capsys.readouterr()
    assert "selftest" in printed.err and "3/3" in printed.err, f"the bar counts the submissions: {printed.err!r}"
    for name in ("solution", "no_bonus_token", "blank"):
        assert f"graded {name} in 1 s" in printed.err, f"stderr says when {name} is graded: {printed.err!r}"
        assert f"graded {name}" not in printed.out, f"stdout keeps the results only: {printed.out!r}"
    assert printed.out.splitlines()[0].split()[:3] == ["submission", "expected", "got"], (
        f"stdout starts with the table: {printed.out!r}")
    if bug_loses == "its tests":
        assert code == 0 and "3/3 submissions graded as expected" in printed.out, printed.out
        assert "(as expected)" in printed.err and "not as expected" not in printed.out, printed
    else:
        assert code == 1 and "2/3 submissions graded as expected" in printed.out, printed.out
        assert f"lost nothing, expected {', '.join(sorted(bug.fails))}" in printed.err, (
            f"stderr names the mismatch as soon as it is graded: {printed.err!r}")
        assert "no_bonus_token is not as expected: expected to lose" in printed.out, (
            f"stdout says why the row is not as expected: {printed.out!r}")
