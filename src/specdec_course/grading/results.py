"""A class's results on disk: grades.csv merged across runs, a record of every row a regrade replaced, and
each finished student's result kept as it finishes, so that an interrupted batch resumes.

    out/grades.csv       one row per student ever graded into `out`: a run replaces its own students' rows
    out/regrades.csv     the rows a regrade replaced, with when
    out/done/<id>.json   one finished student's row and gradebook scores (`--resume` reads them), and
    out/done/<id>.ipynb  the autograded notebook

grades.csv and regrades.csv are read before a batch's first kernel starts and written after its last has
stopped, so nothing a student's code writes to them survives. The done records of an interrupted batch
are taken as they were written: a kernel that ran after a record was written could have changed it, so
resume only a batch whose kernels you trust, or grade it again without `--resume`. No cell of either CSV starts a
spreadsheet formula (safe_csv.py); `read_rows` and `read_history` give back the values as written.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import nbformat

from . import feedback, safe_csv
from .batch import grade_all
from .collect import Submission
from .course import BatchSetup, graded_cells, prepare_course
from .gradebook import write_autograded, write_scores
from .row import Grade, Graded

FIXED_COLUMNS = ["student", "name", "score", "max_score", "extra_credit", "manual_pending", "status", "message",
                 "flags", "isolation", "seconds", "vs_hf_assisted", "file", "submitted_at", "superseded", "on_roster"]
RESUMABLE = ("graded", "invalid", "missing")  # what a resumed batch keeps; everything else is graded again


def row(grade: Grade, submission: Submission | None, cells: list[str]) -> dict[str, str]:
    """One grades.csv row: the grade, where it came from, each graded cell's points."""
    source = {"name": submission.name, "file": str(submission.path or ""), "submitted_at": submission.submitted_at,
              "superseded": " | ".join(submission.superseded),
              "on_roster": "" if submission.on_roster is None else ("yes" if submission.on_roster else "no")
              } if submission else dict.fromkeys(("file", "submitted_at", "superseded", "on_roster"), "")
    values = {"student": grade.student, "name": grade.student, "score": grade.score, "max_score": grade.max_score,
              "extra_credit": grade.extra_credit,
              "manual_pending": grade.manual_pending, "status": grade.status, "message": grade.message,
              "flags": " | ".join(grade.flags), "isolation": grade.isolation, "seconds": round(grade.seconds, 1),
              "vs_hf_assisted": "" if grade.vs_hf_assisted is None else f"{grade.vs_hf_assisted:.3f}", **source,
              **{cell: grade.tests.get(cell, "") for cell in cells}}
    return {key: str(value) for key, value in values.items()}


def read_rows(path: Path) -> dict[str, dict[str, str]]:
    if not path.is_file():
        return {}
    with path.open(newline="", encoding="utf-8") as f:
        return {r["student"]: r for r in safe_csv.read_table(f)}


def merge_rows(path: Path, earlier: dict[str, dict[str, str]], new: list[dict[str, str]], cells: list[str],
               history: list[dict[str, str]]) -> list[str]:
    """Write grades.csv at `path`: the `earlier` rows (read before the batch's kernels ran, which could have
    written the file) with `new` in place of their students'; each row replaced is added to `history`
    (regrades.csv, also as read before the batch). Returns the students whose earlier row was replaced."""
    rows = dict(earlier)
    replaced = [r["student"] for r in new if r["student"] in rows]
    if replaced:
        _write_history(path.parent / "regrades.csv", history, [rows[s] for s in replaced])
    rows.update({r["student"]: r for r in new})
    columns = FIXED_COLUMNS + cells + sorted({k for r in rows.values() for k in r} - set(FIXED_COLUMNS) - set(cells))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        safe_csv.write_table(f, columns, (rows[s] for s in sorted(rows, key=str.casefold)))
    return replaced


def read_history(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as f:
        return safe_csv.read_table(f)


def _write_history(path: Path, history: list[dict[str, str]], old_rows: list[dict[str, str]]) -> None:
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    rows = [*history, *({"replaced_at": stamp, **r} for r in old_rows)]
    columns = list(dict.fromkeys(["replaced_at", *(k for r in rows for k in r)]))
    with path.open("w", newline="", encoding="utf-8") as f:
        safe_csv.write_table(f, columns, rows)


def grade_class(out: Path, submissions: list[Submission], setup: BatchSetup, resume: bool = False,
                progress=None) -> tuple[list[Grade], list[str]]:
    """Grade `submissions` into `out` (its course, feedback, done records) and merge their rows into
    grades.csv. With `resume`, students whose kept result is final and of the same file are not graded
    again. Returns the batch's grades and the students whose earlier row was replaced."""
    done, by_student = out / "done", {s.student: s for s in submissions}
    kept = {s.student: r for s in submissions if resume and (r := load_done(done, s)) is not None}
    earlier, history = read_rows(out / "grades.csv"), read_history(out / "regrades.csv")  # before any kernel

    def finished(result: Graded | Grade) -> None:
        student = (result.grade if isinstance(result, Graded) else result).student
        save_done(done, result, by_student[student])
        if progress:
            progress(result)

    grades = grade_all(out / "course", submissions, setup, out / "feedback", progress=finished, kept=kept)
    cells = graded_cells(out / "course")
    new = [row(g, s, cells) for g, s in zip(grades, submissions)]
    replaced = merge_rows(out / "grades.csv", earlier, new, cells, history)
    return grades, replaced


def save_done(done_dir: Path, result: Graded | Grade, submission: Submission) -> None:
    """Keep one finished student's result, with the file it graded."""
    done_dir.mkdir(parents=True, exist_ok=True)
    grade = result.grade if isinstance(result, Graded) else result
    record = {"grade": asdict(grade), "scores": result.scores if isinstance(result, Graded) else None,
              "file": str(submission.path or ""), "submitted_at": submission.submitted_at}
    if isinstance(result, Graded):
        nbformat.write(result.notebook, done_dir / f"{grade.student}.ipynb")
    (done_dir / f"{grade.student}.json").write_text(json.dumps(record))


def load_done(done_dir: Path, submission: Submission) -> Graded | Grade | None:
    """A student's kept result, if final (RESUMABLE) and of the same file as now; else None: grade again."""
    path = done_dir / f"{submission.student}.json"
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    grade = Grade(**record["grade"])
    same_file = (record["file"], record["submitted_at"]) == (str(submission.path or ""), submission.submitted_at)
    if grade.status not in RESUMABLE or not same_file:
        return None
    if record["scores"] is None:
        return grade
    notebook_path = done_dir / f"{submission.student}.ipynb"
    if not notebook_path.is_file():
        return None
    scores = {cell: tuple(values) for cell, values in record["scores"].items()}
    return Graded(grade, nbformat.read(notebook_path, as_version=4), scores)


def merge_results(parts: list[Path], graded: Path, solution: Path, autograder_dir: Path) -> list[str]:
    """Gather the --out folders of `autograde-one` (one per container) into `graded`, as `autograde` would have
    written it: grades.csv merged, done/ records, a course whose gradebook and notebooks hold every student
    (formgrader, feedback pages). Returns the students whose earlier row in `graded` was replaced."""
    course = graded / "course"
    prepare_course(course, solution, autograder_dir)
    earlier, history = read_rows(graded / "grades.csv"), read_history(graded / "regrades.csv")
    rows, scores = [], {}
    for part in parts:
        found = read_rows(part / "grades.csv")
        if not found:
            raise ValueError(f"{part} holds no grades.csv: pass folders written by specdec-course autograde-one")
        for student, row in found.items():
            rows.append(row)
            for suffix in (".json", ".ipynb"):
                if (part / "done" / f"{student}{suffix}").is_file():
                    (graded / "done").mkdir(parents=True, exist_ok=True)
                    shutil.copy(part / "done" / f"{student}{suffix}", graded / "done" / f"{student}{suffix}")
            submitted = part / "course" / "submitted" / student
            if submitted.is_dir():
                shutil.copytree(submitted, course / "submitted" / student, dirs_exist_ok=True)
            record = json.loads((part / "done" / f"{student}.json").read_text())
            if record["scores"] is not None:
                scores[student] = {cell: tuple(values) for cell, values in record["scores"].items()}
                write_autograded(course, student, nbformat.read(part / "done" / f"{student}.ipynb", as_version=4))
    write_scores(course, scores)
    cells = graded_cells(course)
    replaced = merge_rows(graded / "grades.csv", earlier, rows, cells, history)
    feedback.generate_feedback(course, graded / "feedback", sorted(scores))
    return replaced
