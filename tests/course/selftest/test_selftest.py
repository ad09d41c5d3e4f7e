"""`specdec-course selftest` through the whole pipeline (nbgrader, the sandbox, the verdict) on the solution, the blank
release and one catalogued bug: each row as the catalogue says. Marked release: `make test-release` runs it, then the
whole catalogue (`make selftest`); CI grades the same pipeline in tests/test_corpora.py and test_batch.py. Without
the pipeline (a stand-in grades), what the command prints where: progress on stderr, results on stdout. Without
grading at all: the workdirs it refuses to empty, and the entry names it refuses.

Example run: python -m pytest tests/course/selftest/test_selftest.py -q
"""

import contextlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from specdec_course.cli import main
from specdec_course.grading import batch, course, row
from specdec_course.selftest import load
from specdec_course.selftest.catalogue import load_catalogue
from specdec_course.selftest.selftest import WORKDIR_MARK, check_workdir, fresh_workdir
from specdec_kit.core import settings

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


PATHS = ["--solution", str(REPO / "solutions" / "speculative_decoding.ipynb"),
         "--release", str(REPO / "assignment" / "speculative_decoding.ipynb"), "--autograder", str(REPO / "autograder")]


@pytest.fixture
def no_grading(monkeypatch):
    """The load and the grading fail the test if they start: these runs must stop before either."""
    def started(*args, **kwargs):
        raise AssertionError("the selftest started work it should have refused")

    monkeypatch.setenv(settings.SELFTEST, "")
    monkeypatch.setattr(load, "loaded", started)
    monkeypatch.setattr(course, "setup_batch", started)


@pytest.mark.parametrize("case", ["the current folder", "a folder of files", "a file"])
def test_selftest_refuses_a_workdir_it_did_not_make(tmp_path, monkeypatch, capsys, no_grading, case):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    workdir = {"the current folder": ".", "a folder of files": str(mine), "a file": str(mine / "notes.txt")}[case]
    monkeypatch.chdir(mine)
    code = main(["selftest", "--workdir", workdir, *PATHS])
    err = capsys.readouterr().err
    assert code == 2 and f"--workdir {mine}" in err and "name a new or empty folder" in err, (
        f"--workdir {workdir} ({case}) should be refused, naming the folder and what to do: exit {code}, {err!r}")
    assert (mine / "notes.txt").read_text() == "keep me", f"nothing of {case} may be deleted"


def test_selftest_empties_only_a_workdir_it_made(tmp_path, monkeypatch):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    workdir = tmp_path / "out" / "selftest"
    fresh_workdir(workdir)  # a new folder: made and marked
    assert [p.name for p in workdir.iterdir()] == [WORKDIR_MARK], "a new workdir holds its mark alone"
    (workdir / "course" / "gradebook").mkdir(parents=True)
    (workdir / "link").symlink_to(outside)
    fresh_workdir(workdir)  # its own: emptied, a link removed and not what it points to
    assert [p.name for p in workdir.iterdir()] == [WORKDIR_MARK] and outside.read_text() == "keep me", (
        f"a workdir the selftest made is emptied but for its mark: {sorted(p.name for p in workdir.iterdir())}")
    (workdir / "course").mkdir()
    (workdir / WORKDIR_MARK).unlink()
    with pytest.raises(ValueError, match="holds files the selftest did not write"):
        check_workdir(workdir)  # without its mark, a folder of files is someone else's
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    fresh_workdir(Path(".").resolve())  # an empty current folder is kept (it is the current one) and marked
    assert empty.is_dir() and (empty / WORKDIR_MARK).is_file(), "an empty folder is used as it is"


def test_selftest_only_refuses_unknown_entries_as_catalogue_losses_does(tmp_path, capsys, no_grading):
    misspelt = "no_bonus_tokn"
    code = main(["selftest", "--only", "no_bonus_token", misspelt, "--workdir", str(tmp_path / "selftest"), *PATHS])
    only = capsys.readouterr().err
    assert code == 2 and f"--only: no catalogue entry {misspelt}; the entries: " in only, (
        f"--only should refuse a name that is no entry, naming it: exit {code}, {only!r}")
    assert main(["catalogue", "--losses", misspelt, "--autograder", str(REPO / "autograder")]) == 2
    losses = capsys.readouterr().err
    assert only.split("--only")[1] == losses.split("--losses")[1], (
        f"--only and catalogue --losses refuse in the same words: {only!r}, {losses!r}")
