"""The kit's writes into nbgrader's course: each student's scores in the gradebook (nbgrader 0.9 has no call for
that, so through its Gradebook ORM, retried while parallel jobs hold the database) and the autograded notebooks.
A raw `nbgrader autograde --force` would overwrite them with the kernel's own results: grade again with
`specdec-course autograde` instead.
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat

from ..core.nbgrader_course import ASSIGNMENT, NOTEBOOK

DB_RETRIES = 4


def read_scores(course: Path) -> dict[str, dict[str, tuple]]:
    """Every student's graded cells in the gradebook: {student: {cell: (auto, manual, needs_manual_grade)}}."""
    from nbgrader.api import Gradebook

    def read():
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
            out = {}
            for student in gradebook.students:
                try:
                    notebook = gradebook.find_submission_notebook(NOTEBOOK.removesuffix(".ipynb"), ASSIGNMENT,
                                                                  student.id)
                except Exception:  # nbgrader's MissingEntry: a student without this assignment
                    continue
                out[student.id] = {g.name: (g.auto_score, g.manual_score, g.needs_manual_grade)
                                   for g in notebook.grades}
            return out

    return _retry_locked(read)


def record_scores(course: Path, student: str, scores: dict[str, tuple]) -> None:
    """Write one student's scores right after the notebook's own run (a submission nbgrader could not record, its
    run failed before, is created first)."""
    from nbgrader.api import Gradebook

    def write():
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
            _set(_submission_notebook(gradebook, student), scores)
            gradebook.db.commit()

    _retry_locked(write)


def write_scores(course: Path, scores: dict[str, dict[str, tuple]]) -> None:
    """Set every listed student's graded cells (the batch's final pass), in one transaction."""
    from nbgrader.api import Gradebook

    def write():
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
            for student, cells in scores.items():
                _set(_submission_notebook(gradebook, student), cells)
            gradebook.db.commit()

    _retry_locked(write)


def _set(notebook, scores: dict[str, tuple]) -> None:
    for grade in notebook.grades:
        if grade.name in scores:
            values = scores[grade.name]
            grade.auto_score, grade.manual_score, grade.needs_manual_grade = values[:3]
            if len(values) > 3:
                grade.extra_credit = values[3]


def _submission_notebook(gradebook, student: str):
    from nbgrader.api import MissingEntry

    name = NOTEBOOK.removesuffix(".ipynb")
    gradebook.update_or_create_student(student)
    try:
        return gradebook.find_submission_notebook(name, ASSIGNMENT, student)
    except MissingEntry:
        gradebook.update_or_create_submission(ASSIGNMENT, student)
        return gradebook.find_submission_notebook(name, ASSIGNMENT, student)


def _retry_locked(action):
    """Run a gradebook action, waiting out a parallel job's write lock."""
    from sqlalchemy.exc import OperationalError

    for attempt in range(DB_RETRIES):
        try:
            return action()
        except OperationalError:
            if attempt == DB_RETRIES - 1:
                raise
            time.sleep(1 + attempt)


def autograded_path(course: Path, student: str) -> Path:
    return course / "autograded" / student / ASSIGNMENT / NOTEBOOK


def read_autograded(course: Path, student: str) -> nbformat.NotebookNode | None:
    path = autograded_path(course, student)
    return nbformat.read(path, as_version=4) if path.is_file() else None


def write_autograded(course: Path, student: str, notebook: nbformat.NotebookNode) -> None:
    path = autograded_path(course, student)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)

