"""Grading a class: collecting submissions, reading what they are, the kernel's environment, the course set-up,
and a batch whose scores come from the kit's verdict and survive what a kernel writes to the gradebook.

Example run: python -m pytest tests/course/grading/test_batch.py -q
"""

import csv
import os
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nbformat
import pytest

from specdec_course.authoring import release
from specdec_course.core import nbgrader_course as course_nbgrader
from specdec_course.core.config import Deadline
from specdec_course.core.regular_files import RefusedEntry, write_below
from specdec_course.grading import batch as grading_batch
from specdec_course.grading import course as grading_course
from specdec_course.grading import gradebook, notebook_run, preprocessors, results
from specdec_course.grading.collect import Submission, collect
from specdec_course.platforms import lms

from conftest import REPO, SOLUTION
from corpora import answer_as_markdown, blank, first_class, metadata_stripped, nbformat3, solved


@pytest.mark.parametrize("content,why", [(b"", "the file is empty"), (b"{ not json", "not a Jupyter notebook"),
                                         (b'{"metadata": {}}', "not a Jupyter notebook")])
def test_unreadable_files_are_invalid_with_what_to_do(tmp_path, content, why):
    path = tmp_path / "x.ipynb"
    path.write_bytes(content)
    with pytest.raises(notebook_run.InvalidSubmission, match=why) as info:
        notebook_run.read_submission(path)
    assert "re-download" in str(info.value), f"the message must say what to do; got {info.value}"


def test_a_notebook_is_read_following_no_link(tmp_path):
    """read_submission opens every folder below the root and the file itself without following a link: a linked
    notebook, a notebook in a linked folder and a second hard link of a file are refused, and say what to do."""
    solution = tmp_path / "solutions" / "speculative_decoding.ipynb"
    solution.parent.mkdir()
    nbformat.write(solved(), solution)
    root = tmp_path / "submissions"
    (root / "bob").mkdir(parents=True)
    (root / "bob" / "nb.ipynb").symlink_to(solution)
    (root / "folder").symlink_to(solution.parent, target_is_directory=True)
    os.link(solution, root / "hard.ipynb")
    for path, words in ((root / "bob" / "nb.ipynb", "bob/nb.ipynb is a symbolic link"),
                        (root / "folder" / solution.name, "folder is a symbolic link"),
                        (root / "hard.ipynb", "hard.ipynb is a hard link")):
        with pytest.raises(notebook_run.InvalidSubmission, match=words) as info:
            notebook_run.read_submission(path, root)
        assert "hand in the notebook itself" in str(info.value), f"the message says what to do: {info.value}"
    with pytest.raises(notebook_run.InvalidSubmission, match="symbolic link"):
        notebook_run.read_submission(root / "bob" / "nb.ipynb")  # by default the file's own folder is the root


def test_the_graders_copy_replaces_a_link_and_never_writes_through_it(tmp_path):
    """The copy nbgrader reads (course/submitted/<student>/...): a link planted there is replaced, its target kept."""
    victim = tmp_path / "victim.txt"
    victim.write_text("kept")
    target = tmp_path / "course" / "submitted" / "amy" / "speculative_decoding" / "speculative_decoding.ipynb"
    target.parent.mkdir(parents=True)
    target.symlink_to(victim)
    write_below(tmp_path / "course", target.relative_to(tmp_path / "course"), b"{}")
    assert victim.read_text() == "kept" and not target.is_symlink() and target.read_bytes() == b"{}", \
        "the link is replaced by a regular file and its target is untouched"
    (tmp_path / "course" / "submitted" / "eve").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(RefusedEntry, match="submitted/eve is a symbolic link"):
        write_below(tmp_path / "course", Path("submitted/eve/x.ipynb"), b"{}")


def test_old_format_is_converted_and_missing_metadata_noted(tmp_path):
    old = tmp_path / "old.ipynb"
    nbformat.write(nbformat3(), old, version=3)
    notebook, notes = notebook_run.read_submission(old)
    assert notebook.nbformat == 4 and any("format 3" in n for n in notes), f"format 3 is converted; notes {notes}"
    stripped = tmp_path / "stripped.ipynb"
    nbformat.write(metadata_stripped(), stripped)
    _, notes = notebook_run.read_submission(stripped)
    assert any("graded from the classes found in its code" in n for n in notes), notes


def test_what_an_editor_took_is_given_back_from_the_release():
    release = blank()
    release_ids = [c.metadata["nbgrader"]["grade_id"] for c in release.cells if c.metadata.get("nbgrader")]
    stripped = metadata_stripped()
    notes = notebook_run.match_release(stripped, release)
    restored = [c.metadata["nbgrader"]["grade_id"] for c in stripped.cells if c.metadata.get("nbgrader")]
    assert restored == release_ids, f"every cell is matched back in order; got {restored}, expected {release_ids}"
    assert notes == [f"grading metadata restored on {len(release_ids)} cells matched to the assignment's"], notes
    markdown = answer_as_markdown()
    notes = notebook_run.match_release(markdown, release)
    [cell] = [c for c in markdown.cells
              if c.metadata.get("nbgrader", {}).get("grade_id") == "cached_speculative_decoder"]
    assert cell.cell_type == "code" and "graded as code" in notes[0], (cell.cell_type, notes)


def test_bad_submissions_are_reported_not_raised(tmp_path):
    broken = tmp_path / "broken.ipynb"
    broken.write_text("not a notebook")
    course = tmp_path / "course"
    rows = [grading_batch.grade(course, Submission("broken", broken), setup=None),
            grading_batch.grade(course, Submission("gone", None, "no submission"), setup=None)]
    got = [(r.status, r.message) for r in rows]
    assert [r.status for r in rows] == ["invalid", "missing"], \
        f"an unreadable file is invalid and a roster student without one missing: {got}"


def test_kernel_environment_is_offline_pinned_and_without_instructor_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", f"{REPO}:{tmp_path}")
    env = notebook_run.kernel_env(3, tmp_path / "record.json")
    assert env["PYTHONPATH"] == str(tmp_path), f"the repository root (autograder/, solutions/) must go; got " \
                                               f"{env['PYTHONPATH']!r}"
    assert env["SPECDEC_GRADING"] == env["HF_HUB_OFFLINE"] == "1" and env["OMP_NUM_THREADS"] == "3", env


@pytest.mark.slow
def test_course_setup_does_not_need_the_venv_on_path(tmp_path, monkeypatch):
    # CI runs `.venv/bin/specdec-kit` with no activated venv: nbgrader's alembic must still be found.
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    course = tmp_path / "course"
    grading_course.prepare_course(course, SOLUTION, REPO / "autograder")
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        assert gradebook.find_assignment("speculative_decoding").name == "speculative_decoding", \
            "the course's gradebook should hold the assignment speculative_decoding"
    source = (course / "source" / "speculative_decoding" / "speculative_decoding.ipynb").read_text()
    assert not [m for m in release.FORBIDDEN_TEXT if m in source], "the grading course holds the release only"


@pytest.mark.slow
def test_failed_course_setup_stops_with_nbgraders_output(tmp_path, monkeypatch):
    monkeypatch.setattr(course_nbgrader, "nbgrader_env", lambda: {"PATH": "/nonexistent", "HOME": str(tmp_path)})
    with pytest.raises(grading_course.GradingSetupError, match="generate_assignment failed"):
        grading_course.prepare_course(tmp_path / "course", SOLUTION, REPO / "autograder")


@pytest.mark.parametrize("option,value,words", [("jobs", 0, "--jobs must be at least 1"),
                                                ("notebook_seconds", -5, "positive number of seconds")])
def test_bad_options_stop_before_anything_is_set_up(tmp_path, option, value, words):
    with pytest.raises(ValueError, match=words):
        grading_course.setup_batch(tmp_path / "course", SOLUTION, REPO / "autograder", **{option: value})
    assert not (tmp_path / "course").exists(), "nothing may be set up for options that are refused"


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """Two jobs at once into one gradebook: the solution, the blank release, and a blank that writes the
    gradebook from its kernel."""
    root = tmp_path_factory.mktemp("batch")
    course, submissions = root / "graded" / "course", root / "submissions"
    submissions.mkdir()
    write_all = ("import sqlite3\nfrom pathlib import Path\n"
                 "db = sqlite3.connect(Path.cwd().parents[2] / 'gradebook.db')\n"
                 "db.execute('UPDATE grade SET auto_score = 100, manual_score = 100')\ndb.commit()\n"
                 "print('gradebook written')\n")
    tamper = blank()
    tamper.cells.insert(3, nbformat.v4.new_code_cell(write_all))
    for name, notebook in (("amy", solved()), ("zed", blank()), ("mallory", tamper)):
        nbformat.write(notebook, submissions / f"{name}.ipynb")
    setup = grading_course.setup_batch(course, SOLUTION, REPO / "autograder", jobs=2)
    finished = []
    grades, _ = results.grade_class(root / "graded", collect(submissions), setup, progress=finished.append)
    return course, root / "graded" / "feedback", {g.student: g for g in grades}, finished


@pytest.mark.slow
def test_batch_scores_come_from_the_verdict(batch):
    _, feedback_dir, grades, finished = batch
    assert len(finished) == 3, f"progress is called once per submission; got {len(finished)}"
    assert (grades["amy"].status, grades["amy"].score, grades["amy"].max_score) == ("graded", 90, 90), grades["amy"]
    bonus = tuple(grades["amy"].tests[test] for test in ("test_sampling", "test_lookup", "test_adaptive"))
    assert grades["amy"].extra_credit == 11 and bonus == (5, 3, 3), \
        f"the solution's three bonus parts earn their 5 + 3 + 3 points of extra credit: {grades['amy']}"
    for student in ("zed", "mallory"):
        assert grades[student].status == "graded" and grades[student].score == 0, grades[student]
        assert grades[student].extra_credit == 0, grades[student]
        assert (feedback_dir / f"{student}.html").is_file(), f"{student} gets a feedback page"


@pytest.mark.slow
def test_bonus_and_speed_test_cells_are_judged_outside_the_kernel_only(batch):
    """The kernel runs no bonus cell (0 nbgrader points) and not the speed test, which the grader times alone: each
    says so, then gives the kit's verdict."""
    course, _, _, _ = batch
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in gradebook.read_autograded(course, "amy").cells}
    for test in ("test_sampling", "test_lookup", "test_adaptive", "test_speedup"):
        texts = [o.get("text", "") for o in cells[test].outputs]
        verdict = f"The kit's grading of {test}: passed"
        assert texts[0] == preprocessors.JUDGED_OUTSIDE and texts[1].startswith(verdict), \
            f"{test}: the line saying the kernel did not run it, then the kit's verdict: {cells[test].outputs}"
    assert cells["test_exact"].execution_count, "a test cell with points still runs in the kernel"


@pytest.mark.slow
def test_final_pass_undoes_what_a_kernel_wrote_to_the_gradebook(batch):
    """mallory's kernel gave every cell of every student full marks; the kit's final pass put the scores back."""
    course, _, grades, _ = batch
    kernel = gradebook.autograded_path(course, "mallory").read_text()
    assert "gradebook written" in kernel, "the tamper must have written the gradebook, or this test proves nothing"
    with sqlite3.connect(course / "gradebook.db") as db:
        rows = db.execute("SELECT s.student_id, g.auto_score, g.manual_score FROM grade g "
                          "JOIN submitted_notebook n ON g.notebook_id = n.id "
                          "JOIN submitted_assignment s ON n.assignment_id = s.id").fetchall()
    for student, _, manual in rows:
        assert manual is None, f"{student}: no manual score may exist before a person grades; got {manual}"
    scores = {}
    for student, auto, _ in rows:
        scores[student] = scores.get(student, 0) + (auto or 0)
    assert scores == {"amy": 90, "zed": 0, "mallory": 0}, f"auto scores in the gradebook: {scores}"
    with sqlite3.connect(course / "gradebook.db") as db:
        extra = dict(db.execute("SELECT s.student_id, g.extra_credit FROM grade g "
                                "JOIN submitted_notebook n ON g.notebook_id = n.id "
                                "JOIN submitted_assignment s ON n.assignment_id = s.id "
                                "JOIN base_cell c ON g.cell_id = c.id WHERE c.name = 'test_lookup'").fetchall())
    assert extra == {"amy": 3, "zed": 0, "mallory": 0}, f"a bonus test's extra credit in the gradebook: {extra}"


@pytest.mark.slow
def test_feedback_shows_the_verdict_and_can_be_made_again_after_manual_grading(batch, tmp_path):
    """amy wrote a report (pending until a person grades it); zed left it as handed out (0, as nbgrader does)."""
    course, feedback_dir, grades, _ = batch
    assert "NotImplementedError" in (feedback_dir / "zed.html").read_text(), "the blank's page names the stub"
    assert "Graded by hand: pending" in (feedback_dir / "amy.html").read_text(), "a written report waits"
    assert grades["amy"].manual_pending and not grades["zed"].manual_pending, "only a written report needs a person"
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        grade = gradebook.find_grade("report", "speculative_decoding", "speculative_decoding", "amy")
        grade.manual_score, grade.needs_manual_grade = 7, False  # what formgrader saves
        gradebook.db.commit()
    from specdec_course.cli import main

    assert main(["feedback", str(course.parent), "--student", "amy"]) == 0, "regenerating feedback succeeds"
    page = (feedback_dir / "amy.html").read_text()
    assert "Graded by hand: pending" not in page and "7.0 / 10" in page, "the report's score shows once graded"


@pytest.mark.slow
def test_export_totals_every_student_and_waits_for_the_hand_graded_report(batch, tmp_path):
    """After amy's report is graded by hand (the test above): her total is 90 + 7 + 11 extra credit; roster student
    ann is missing."""
    course, _, _, _ = batch
    due = datetime.now(UTC) - timedelta(days=1)
    grades = {g.student: g for g in lms.class_grades(course.parent, Deadline(due, 60), roster=["ann"])}
    assert sorted(grades) == ["amy", "ann", "mallory", "zed"], f"every graded and roster student: {sorted(grades)}"
    assert (grades["amy"].auto, grades["amy"].manual, grades["amy"].extra_credit, grades["amy"].total) == (
        90, 7, 11, 108), grades["amy"]
    assert grades["zed"].manual == 0 and grades["ann"].status == "missing", (grades["zed"], grades["ann"])
    assert grades["amy"].late_by and grades["amy"].late_by > timedelta(hours=22), \
        f"a file from today is late against yesterday's deadline with an hour's grace: {grades['amy'].late_by}"
    lms.write_gradescope(list(grades.values()), tmp_path / "gs.csv")
    rows = {r["SID"]: r for r in csv.DictReader((tmp_path / "gs.csv").open())}
    assert (rows["amy"]["Total Score"], rows["amy"]["Late"], rows["ann"]["Status"]) == ("108", "yes", "missing"), \
        f"Gradescope's rows carry the total, the late flag and the status: {rows}"


@pytest.mark.slow
def test_regrading_one_student_keeps_every_other_row_and_records_the_old_one(batch):
    """zed hands in Part 1 after all (corpora.first_class: a third of the solution's grading): `--student zed` regrades
    zed only, into the same --out."""
    course, _, _, _ = batch
    out = course.parent
    before = results.read_rows(out / "grades.csv")
    submissions = out.parent / "submissions"
    nbformat.write(first_class(), submissions / "zed.ipynb")
    from specdec_course.cli import main

    assert main(["autograde", str(submissions), "--out", str(out), "--student", "zed",
                 "--solution", str(SOLUTION), "--autograder", str(REPO / "autograder")]) == 0, "the regrade succeeds"
    after = results.read_rows(out / "grades.csv")
    assert set(after) == {"amy", "zed", "mallory"}, f"every student keeps a row; rows {sorted(after)}"
    for student in ("amy", "mallory"):
        assert after[student] == before[student], f"{student}'s row must not change in zed's regrade"
    assert float(after["zed"]["score"]) == 60, f"zed's new row has Part 1's 60 points: {after['zed']}"
    [old] = results.read_history(out / "regrades.csv")
    assert (old["student"], float(old["score"])) == ("zed", 0), f"regrades.csv keeps zed's replaced row: {old}"
    scores = {s: sum(a or 0 for a, _, _ in cells.values()) for s, cells in gradebook.read_scores(course).items()}
    assert scores["amy"] == 90 and scores["zed"] == 60, f"the gradebook holds amy's old and zed's new score: {scores}"
