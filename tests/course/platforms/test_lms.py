"""The class's grades for the LMS: Canvas's own gradebook export filled in, late flags against the deadline."""

import csv
from datetime import datetime, timedelta, timezone

import pytest

from specdec_course.core.config import Deadline
from specdec_course.platforms import lms

DUE = datetime(2026, 12, 5, 23, 59, tzinfo=timezone(timedelta(hours=-8)))


def grade(student: str, total: float, submitted: datetime | None = None) -> lms.ClassGrade:
    return lms.ClassGrade(student, "graded", total, 0.0, 100.0, submitted,
                             lms._late_by(submitted, Deadline(DUE, 30)))


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
    assert rows[0] == next(csv.reader(template.open())), "the header is Canvas's own"
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
