"""Collecting a class's submissions: ids from file names, duplicates and absentees reported, bad
notebooks marked invalid without stopping anything. (Grading itself runs in `specdec-kit selftest`.)"""

from pathlib import Path

import pytest

from specdec_kit import grading, release
from specdec_kit.selftest import Entry, load_catalogue, make_submission

from conftest import REPO, SOLUTION


@pytest.mark.parametrize("name,expected", [
    ("alice.ipynb", "alice"), ("Copy of bob.ipynb", "bob"), ("carol (1).ipynb", "carol"),
    ("Dan Smith.ipynb", "Dan_Smith"),
])
def test_student_id_from_file_name(name, expected):
    assert grading.student_id(Path(name)) == expected


def test_student_id_regex():
    assert grading.student_id(Path("hw3_s1234567_final.ipynb"), r"_(s\d+)_") == "s1234567"
    with pytest.raises(ValueError, match="does not match"):
        grading.student_id(Path("x.ipynb"), r"(s\d+)")


def test_collect_flat_folder_with_duplicate_and_roster(tmp_path):
    for name in ("alice.ipynb", "Copy of bob.ipynb", "bob.ipynb"):
        (tmp_path / name).write_text("{}")
    found = {s.student: s for s in grading.collect(tmp_path, roster=["alice", "bob", "erin"])}
    assert found["alice"].problem == ""
    assert "2 notebooks for one student" in found["bob"].problem
    assert found["erin"].path is None and found["erin"].problem == "no submission"


def test_collect_nbgrader_layout(tmp_path):
    notebook = tmp_path / "frank" / "speculative_decoding" / "speculative_decoding.ipynb"
    notebook.parent.mkdir(parents=True)
    notebook.write_text("{}")
    assert [(s.student, s.path) for s in grading.collect(tmp_path)] == [("frank", notebook)]


def test_bad_submissions_are_reported_not_raised(tmp_path):
    broken = tmp_path / "broken.ipynb"
    broken.write_text("not a notebook")
    course = tmp_path / "course"
    assert grading.grade(course, grading.Submission("broken", broken), REPO, 10).status == "invalid"
    assert grading.grade(course, grading.Submission("gone", None, "no submission"), REPO, 10).status == "missing"
    twice = grading.Submission("twice", broken, "2 notebooks for one student")
    assert grading.grade(course, twice, REPO, 10).status == "duplicate"


def test_catalogue_entries_apply_to_the_solution():
    """Every catalogue edit still finds its text exactly once, so a solution change cannot silently void it."""
    entries = load_catalogue(REPO / "autograder")
    variants = [e for e in entries if e.name.startswith("variant_")]
    assert len(variants) >= 5 and len(entries) - len(variants) >= 12
    for entry in entries:
        make_submission(SOLUTION, entry)
    with pytest.raises(ValueError, match="occurs 0 times"):
        make_submission(SOLUTION, Entry("stale", "", edits=(("no such code", ""),)))


def test_course_setup_does_not_need_the_venv_on_path(tmp_path, monkeypatch):
    # CI runs `.venv/bin/specdec-kit` with no activated venv: nbgrader's alembic must still be found.
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    course = tmp_path / "course"
    grading.prepare_course(course, SOLUTION)
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        assert gradebook.find_assignment("speculative_decoding").name == "speculative_decoding"


def test_failed_course_setup_stops_with_nbgraders_output(tmp_path, monkeypatch):
    monkeypatch.setattr(release, "nbgrader_env", lambda: {"PATH": "/nonexistent", "HOME": str(tmp_path)})
    with pytest.raises(grading.GradingSetupError, match="generate_assignment failed"):
        grading.prepare_course(tmp_path / "course", SOLUTION)


def test_parallel_jobs_grade_into_one_gradebook_with_feedback(tmp_path):
    """Two kernels at once, one gradebook: both grades recorded, both feedback pages written, order kept."""
    course, feedback = tmp_path / "course", tmp_path / "feedback"
    grading.prepare_course(course, SOLUTION)
    blank = REPO / "assignment" / "speculative_decoding.ipynb"
    submissions = [grading.Submission(name, blank) for name in ("zed", "amy")]
    finished = []
    grades = grading.grade_all(course, submissions, REPO, timeout=600, feedback_dir=feedback, jobs=2,
                               progress=finished.append)
    assert [g.student for g in grades] == ["zed", "amy"] and len(finished) == 2
    for g in grades:
        assert g.status == "graded" and g.score == 0 and g.max_score == 90, (g.status, g.message)
        assert (feedback / f"{g.student}.html").is_file()
        assert grading.read_grade(course, g.student) is not None
