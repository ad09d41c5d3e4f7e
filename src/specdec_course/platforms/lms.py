"""The class's grades for the LMS: auto-graded points from grades.csv, the hand-graded parts from the
gradebook once a person has graded them, submission times against the course's deadline.

    specdec-course export graded --out gradescope.csv                       # Gradescope's score import
    specdec-course export graded --template canvas.csv --out canvas_in.csv  # the course's Canvas export, filled in

Every student with a row in grades.csv is exported (`autograde --roster` gives a `missing` row to each
roster student without a file), and any roster student passed here too. Late is the LMS's own mark (Canvas's
`_LATE_` in the graded file's name) or a submission time past the deadline and its grace; both files carry it. No
cell of either file starts a spreadsheet formula: such a cell starts with an apostrophe (safe_csv.py).
"""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from ..core.config import Deadline
from ..grading.course import course_points, hand_graded_cells
from ..grading.gradebook import read_scores
from ..grading.names import marked_late, match_ids
from ..grading.results import read_rows
from ..grading.safe_csv import inert

CANVAS_ID_COLUMNS = ("SIS User ID", "SIS Login ID", "ID")  # tried in order against the kit's ids
# Canvas's gradebook import has no late field, and takes any other new column for a new assignment; a column whose
# "Points Possible" cell reads "(read only)", as its export marks its own totals, it leaves out
# (app/models/gradebook_importer.rb, readonly_assignment?).
CANVAS_LATE_COLUMN = "Late"
CANVAS_READ_ONLY = "(read only)"

log = logging.getLogger(__name__)


@dataclass
class ClassGrade:
    student: str  # the id as the LMS gave it
    status: str
    auto: float
    manual: float | None  # None while a hand-graded part waits for a person
    max_points: float
    submitted_at: datetime | None
    late_by: timedelta | None  # past the deadline's grace; None when on time, not submitted or with no time
    extra_credit: float = 0.0  # the bonus tests' points, on top of max_points
    lms_late: bool = False  # the LMS's own late mark on the graded file (Canvas's `_LATE_`)

    @property
    def total(self) -> float:
        return self.auto + (self.manual or 0.0) + self.extra_credit

    @property
    def late(self) -> bool:
        return self.lms_late or self.late_by is not None


def class_grades(graded: Path, deadline: Deadline, roster: list[str] | None = None) -> list[ClassGrade]:
    """One grade per student of `graded` (autograde's --out) and of `roster`, in grades.csv's order."""
    course = graded / "course"
    rows = read_rows(graded / "grades.csv")
    if not rows:
        raise ValueError(f"{graded} holds no grades.csv: run specdec-course autograde --out {graded} first")
    points, manual_cells = course_points(course), hand_graded_cells(course)
    scores = read_scores(course)
    out = []
    for row in rows.values():
        manual = _manual(scores.get(row["student"], {}), manual_cells, row["status"])
        submitted = datetime.fromisoformat(row["submitted_at"]) if row.get("submitted_at") else None
        # grades.csv has no column for the LMS's late mark: the graded file's name, which carries it, is read again.
        out.append(ClassGrade(row.get("name") or row["student"], row["status"], float(row["score"] or 0), manual,
                              sum(points.values()), submitted, _late_by(submitted, deadline),
                              float(row.get("extra_credit") or 0), marked_late(row.get("file") or "")))
    known = match_ids(roster or [], [g.student for g in out])
    out += [ClassGrade(s, "missing", 0.0, 0.0, sum(points.values()), None, None)
            for s in roster or [] if s not in known]
    return out


def _manual(cells: dict[str, tuple], manual_cells: list[str], status: str) -> float | None:
    """The hand-graded points: None while any waits for a person; 0 for a student with nothing to grade."""
    if status == "missing" or not cells:
        return 0.0
    if any(cells.get(c, (None, None, True))[2] for c in manual_cells):
        return None
    return sum(float(cells[c][1] if cells[c][1] is not None else cells[c][0] or 0) for c in manual_cells)


def _late_by(submitted: datetime | None, deadline: Deadline) -> timedelta | None:
    """How late `submitted` is past the deadline and its grace; None when on time or with no time (an LMS's zip
    that stamps its entries with the download's time gives none: its own mark says late)."""
    if submitted is None:
        return None
    late = submitted - deadline.due - timedelta(minutes=deadline.grace_minutes)
    return late if late > timedelta(0) else None


def _hms(delta: timedelta | None) -> str:
    seconds = int(delta.total_seconds()) if delta else 0
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def write_gradescope(grades: list[ClassGrade], path: Path) -> None:
    """Gradescope's score import: students matched by SID, one total score column."""
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["SID", "Total Score", "Max Points", "Status", "Submission Time", "Lateness (H:M:S)",
                         "Late", "Manual Pending"])
        for g in grades:
            writer.writerow(map(inert, [g.student, f"{g.total:g}", f"{g.max_points:g}", g.status,
                                        g.submitted_at.isoformat() if g.submitted_at else "", _hms(g.late_by),
                                        "yes" if g.late else "no", "yes" if g.manual is None else "no"]))


def fill_canvas(template: Path, grades: list[ClassGrade], path: Path, column: str | None = None) -> list[str]:
    """The course's own Canvas gradebook export with the assignment's column filled in (matched by SIS User
    ID, SIS Login ID or ID, whichever holds the kit's ids; regardless of case only where no other id is the same
    but for case) and a Late column that Canvas's import leaves out (`_late_column`); its other columns and rows
    are left as they were, but that no cell starts a spreadsheet formula (safe_csv.inert). Returns the students of
    `grades` that the template does not list."""
    with template.open(newline="", encoding="utf-8-sig") as f:
        table = list(csv.reader(f))
    if not table:
        raise ValueError(f"--template {template} is empty: export the gradebook from Canvas (Grades > Export)")
    header = table[0]
    target = _assignment_column(header, column, template)
    by_id = {g.student: g for g in grades}

    def ids(i: int) -> dict[str, str]:  # the template's ids in column i -> the kit's, never two merged (match_ids)
        return match_ids((r[i] for r in table[1:] if len(r) > i), by_id)

    id_column = max((header.index(c) for c in CANVAS_ID_COLUMNS if c in header), key=lambda i: len(ids(i)),
                    default=None)
    if id_column is None:
        raise ValueError(f"--template {template} has none of the columns {', '.join(CANVAS_ID_COLUMNS)}")
    late = _late_column(table, template)
    matched, listed = ids(id_column), set()
    for r in table[1:]:
        grade = by_id.get(matched.get(r[id_column], "")) if len(r) > id_column else None
        if grade is not None:
            r[target] = f"{grade.total:g}"
            if late is not None:
                r.extend([""] * (late + 1 - len(r)))
                r[late] = _late_words(grade)
            listed.add(grade.student)
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([inert(cell) for cell in row] for row in table)
    return [g.student for g in grades if g.student not in listed]


def _late_column(table: list[list[str]], template: Path) -> int | None:
    """The index of the template's Late column, added at the end with "(read only)" in its "Points Possible" row
    (Canvas's import then leaves it out, as it does its own totals); None where the template has no such row to
    mark it in, as then Canvas would take the column for a new assignment."""
    header = table[0]
    points = next((r for r in table[1:] if r and "Points Possible" in r[0]), None)
    if points is None:
        log.warning("%s has no 'Points Possible' row, as Canvas's export has: late is left out of the file", template)
        return None
    if CANVAS_LATE_COLUMN not in header:
        header.append(CANVAS_LATE_COLUMN)
    index = header.index(CANVAS_LATE_COLUMN)
    points.extend([""] * (index + 1 - len(points)))
    points[index] = CANVAS_READ_ONLY
    return index


def _late_words(grade: ClassGrade) -> str:
    """The Late cell: "no", or "yes" and by whose account."""
    if grade.late_by is not None:
        return f"yes: {_hms(grade.late_by)} (H:M:S) past the deadline and its grace"
    return "yes: marked late by the LMS" if grade.lms_late else "no"


def _assignment_column(header: list[str], column: str | None, template: Path) -> int:
    if column is not None:
        if column not in header:
            raise ValueError(f"--column {column!r} is not a column of {template}")
        return header.index(column)
    candidates = [i for i, h in enumerate(header) if "speculative" in h.casefold()]
    if len(candidates) != 1:
        raise ValueError(f"--template {template}: pass --column with the assignment's column (its header, e.g. "
                         "'Speculative Decoding (123456)'); found "
                         f"{len(candidates) or 'no'} column(s) naming 'speculative'")
    return candidates[0]
