"""The class's grades for the LMS: Canvas's own gradebook export filled in, late flags against the deadline and
from the LMS's own mark, carried into both exports.

Example run: python -m pytest tests/course/platforms/test_lms.py -q
"""

import csv
import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from specdec_course.core.config import Deadline
from specdec_course.platforms import lms

DUE = datetime(2026, 12, 5, 23, 59, tzinfo=timezone(timedelta(hours=-8)))
CANVAS_GRADEBOOK = Path(__file__).parents[1] / "grading" / "lms_downloads" / "canvas_gradebook.csv"


def grade(student: str, total: float, submitted: datetime | None = None, lms_late: bool = False) -> lms.ClassGrade:
    return lms.ClassGrade(student, "graded", total, 0.0, 100.0, submitted,
                          lms._late_by(submitted, Deadline(DUE, 30)), lms_late=lms_late)


def test_late_counts_from_the_end_of_the_grace_period():
    on_time = grade("a", 1, DUE + timedelta(minutes=29))
    late = grade("b", 1, DUE + timedelta(minutes=45))
    assert on_time.late_by is None, f"29 minutes after the deadline is inside 30 minutes' grace: {on_time.late_by}"
    assert late.late_by == timedelta(minutes=15), f"45 minutes after is 15 minutes late: {late.late_by}"
    assert lms._hms(late.late_by) == "0:15:00", f"Gradescope's H:M:S: {lms._hms(late.late_by)}"


def test_canvas_template_gets_its_assignment_column_filled_and_nothing_else(tmp_path):
    template = tmp_path / "canvas.csv"
    template.write_text(
        "Student,ID,SIS User ID,SIS Login ID,Section,Speculative Decoding (4242),Quiz 1 (17)\n"
        "    Points Possible,,,,,100,10\n"
        '"Smith, Ann",101,ann01,ann@x.org,S1,,9\n'
        '"Lee, Bo",102,bo02,bo@x.org,S1,,8\n')
    out = tmp_path / "filled.csv"
    unlisted = lms.fill_canvas(template, [grade("ann01", 97), grade("zoe", 50)], out)
    rows = list(csv.reader(out.open()))
    assert rows[0] == [*next(csv.reader(template.open())), "Late"], "the header is Canvas's own, and Late after it"
    assert rows[2][5] == "97" and rows[3][5] == "", f"ann01's column is filled by SIS User ID, bo02 untouched: {rows}"
    assert rows[2][6] == "9" and rows[1][5] == "100", f"other columns and the points row stay as they were: {rows}"
    assert unlisted == ["zoe"], f"a student the template lacks is reported, not dropped silently: {unlisted}"


def test_canvas_template_without_one_assignment_column_asks_for_it(tmp_path):
    template = tmp_path / "canvas.csv"
    template.write_text("Student,ID,SIS User ID,Homework 1,Homework 2\nAnn,1,ann01,,\n")
    with pytest.raises(ValueError, match="pass --column"):
        lms.fill_canvas(template, [grade("ann01", 1)], tmp_path / "out.csv")
    lms.fill_canvas(template, [grade("ann01", 1)], tmp_path / "out.csv", column="Homework 2")
    assert list(csv.reader((tmp_path / "out.csv").open()))[1][4] == "1", "--column names the column to fill"


def test_ids_that_differ_only_in_case_are_two_students_in_the_canvas_export(tmp_path):
    """Bob and bob are two rows of the template and two grades, each filled with its own; BOB, the same as both
    but for case, gets neither; ann01 matches ANN01, the only id the same but for case."""
    template = tmp_path / "canvas.csv"
    template.write_text("Student,ID,SIS User ID,Speculative Decoding (4242)\n"
                        "Bob Big,1,Bob,\nbob small,2,bob,\nBOB Loud,3,BOB,\nAnn,4,ANN01,\n")
    out = tmp_path / "filled.csv"
    unlisted = lms.fill_canvas(template, [grade("Bob", 90), grade("bob", 10), grade("ann01", 50)], out)
    filled = {r[2]: r[3] for r in list(csv.reader(out.open()))[1:]}
    assert filled == {"Bob": "90", "bob": "10", "BOB": "", "ANN01": "50"}, \
        f"each id gets its own total, none merged into another: {filled}"
    assert unlisted == [], f"every grade found its row: {unlisted}"


def test_the_lms_late_mark_makes_a_grade_late_without_a_time(tmp_path):
    """Canvas's `_LATE_` with no upload time (its zip's times are the download's): late in Gradescope's import,
    0:00:00 of lateness counted against the deadline."""
    marked, on_time = grade("102", 80, lms_late=True), grade("101", 90, DUE)
    assert marked.late and marked.late_by is None and not on_time.late, (marked, on_time)
    lms.write_gradescope([marked, on_time], tmp_path / "gs.csv")
    rows = {r["SID"]: r for r in csv.DictReader((tmp_path / "gs.csv").open())}
    assert (rows["102"]["Late"], rows["102"]["Lateness (H:M:S)"], rows["101"]["Late"]) == ("yes", "0:00:00", "no"), \
        f"the LMS's mark is carried into the Late column: {rows}"


def test_canvas_export_carries_late_in_a_column_its_import_leaves_out(tmp_path):
    """Canvas's gradebook export (the fixture has its headers and its Points Possible row): the assignment's column
    is filled by ID, the user id of Canvas's download names, and a Late column is added whose Points Possible cell
    reads "(read only)", as Canvas marks its own totals, so that its import does not take it for an assignment."""
    out = tmp_path / "canvas_in.csv"
    grades = [grade("101", 90, DUE), grade("102", 80, lms_late=True), grade("103", 70, DUE + timedelta(hours=2))]
    assert lms.fill_canvas(CANVAS_GRADEBOOK, grades, out) == [], "every grade found its row by Canvas's ID"
    header, points, *students = list(csv.reader(out.open(encoding="utf-8")))
    late = header.index("Late")
    assert late == len(header) - 1 and points[late] == "(read only)", f"a read-only column at the end: {points}"
    filled = {r[1]: (r[5], r[late] if len(r) > late else "") for r in students}
    assert filled == {"101": ("90", "no"), "102": ("80", "yes: marked late by the LMS"),
                      "103": ("70", "yes: 1:30:00 (H:M:S) past the deadline and its grace"), "104": ("", "")}, \
        f"each student's total and late, Dae (no grade) untouched: {filled}"


def test_a_template_without_points_possible_gets_no_late_column(tmp_path, caplog):
    """Without the row to mark it read-only in, Canvas would take a Late column for a new assignment."""
    template = tmp_path / "canvas.csv"
    template.write_text("Student,ID,Speculative Decoding (4242)\nAnn,101,\n")
    with caplog.at_level(logging.WARNING):
        lms.fill_canvas(template, [grade("101", 1, lms_late=True)], tmp_path / "out.csv")
    assert list(csv.reader((tmp_path / "out.csv").open())) == [["Student", "ID", "Speculative Decoding (4242)"],
                                                               ["Ann", "101", "1"]], "nothing but the total added"
    assert "late is left out" in caplog.text, f"the instructor is told: {caplog.text!r}"


def test_class_grades_take_the_late_mark_from_the_graded_files_name(tmp_path, monkeypatch):
    """grades.csv has no column for Canvas's mark: the graded file's name is read again."""
    rows = {name: {"student": name, "name": name, "status": "graded", "score": "5", "submitted_at": "",
                   "file": f"/graded/unpacked/{file}", "extra_credit": ""}
            for name, file in (("102", "leebo_LATE_102_5003_speculative_decoding-1.ipynb"),
                               ("101", "smithann_101_5007_speculative_decoding.ipynb"))}
    monkeypatch.setattr(lms, "read_rows", lambda path: rows)
    monkeypatch.setattr(lms, "course_points", lambda course: {"test_exact": 10.0})
    monkeypatch.setattr(lms, "hand_graded_cells", lambda course: [])
    monkeypatch.setattr(lms, "read_scores", lambda course: {})
    grades = {g.student: g for g in lms.class_grades(tmp_path, Deadline(DUE, 0))}
    assert grades["102"].late and grades["102"].late_by is None and not grades["101"].late, grades
