"""Grading submissions with nbgrader: one course directory, one gradebook, one process group each.

    specdec-kit autograde SUBMISSIONS --out graded/ [--roster FILE] [--timeout 900] [--jobs N]

SUBMISSIONS is nbgrader's `submitted/<student>/<assignment>/` layout or a flat folder of notebooks
as downloaded from Colab or an LMS (`<student>.ipynb`, "Copy of ..." names handled, `--id-regex` to
pull the id out of other names). Each notebook is checked, copied into one nbgrader course under the
name nbgrader expects and autograded in its own process group, killed as a group on timeout, so one
bad submission never stops the others. The kernel runs offline (SPECDEC_GRADING=1, HF_HUB_OFFLINE=1)
with the instructor's `autograder/` on its import path. `--jobs N` grades N at a time into the one
gradebook (set up, with the zoo, before the jobs start). Each graded student gets a feedback page
(`feedback.py`) that never shows the hidden tests.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from . import feedback, zoo
from .release import ASSIGNMENT, NOTEBOOK, ReleaseError, generate_assignment, nbgrader_env, write_course_config

CELL_TIMEOUT = 600  # seconds per cell: building the zoo on a cold cache takes a minute
STATUSES = ("graded", "error", "timeout", "missing", "invalid", "duplicate")
DB_RETRIES = 4
GRADING_PAIRS = ("scripted", "tiny", "tiny-b", "synthetic-small")  # the pairs the test cells load on a CPU


class GradingSetupError(RuntimeError):
    """The course directory could not be set up: nothing can be graded, so stop before the first student."""


@dataclass
class Submission:
    student: str
    path: Path | None  # None for a roster student who submitted nothing
    problem: str = ""  # why it cannot be graded (duplicate, unreadable), empty if none


@dataclass
class Grade:
    student: str
    status: str
    score: float = 0.0
    max_score: float = 0.0
    manual_pending: bool = False
    message: str = ""
    tests: dict[str, float] = field(default_factory=dict)  # grade_id -> points earned
    seconds: float = 0.0


def student_id(path: Path, id_regex: str | None = None) -> str:
    """The student id of a downloaded notebook: its name without "Copy of " and ".ipynb", or a regex group."""
    name = path.stem
    if id_regex:
        match = re.search(id_regex, name)
        if not match:
            raise ValueError(f"--id-regex {id_regex!r} does not match {path.name}")
        return match.group(1) if match.groups() else match.group(0)
    name = re.sub(r"^Copy of\s+", "", name)
    name = re.sub(r"\s*\(\d+\)$", "", name)  # "alice (1).ipynb", a second download
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "unnamed"


def collect(submissions: Path, id_regex: str | None = None, roster: list[str] | None = None) -> list[Submission]:
    """Every submission under `submissions`, two files for one student reported, roster gaps added."""
    nested = sorted(submissions.glob(f"*/{ASSIGNMENT}/*.ipynb"))
    if nested:
        found = [(path.parts[-3], path) for path in nested]
    else:
        found = [(student_id(path, id_regex), path) for path in sorted(submissions.glob("*.ipynb"))]
    by_student: dict[str, list[Path]] = {}
    for student, path in found:
        by_student.setdefault(student, []).append(path)
    result = []
    for student, paths in sorted(by_student.items()):
        if len(paths) > 1:
            names = ", ".join(p.name for p in paths)
            result.append(Submission(student, paths[0], f"{len(paths)} notebooks for one student ({names}): "
                                                        "keep one and grade again"))
        else:
            result.append(Submission(student, paths[0]))
    for student in roster or []:
        if student not in by_student:
            result.append(Submission(student, None, "no submission"))
    return result


def prepare_course(course: Path, solution: Path, cell_timeout: int = CELL_TIMEOUT) -> None:
    """Set up the course directory and its gradebook once, before any submission is graded."""
    course.mkdir(parents=True, exist_ok=True)
    write_course_config(course, f"c.Execute.timeout = {cell_timeout}",
                        # A deleted locked test cell is restored from the source and graded, never scored 0.
                        "c.OverwriteCells.add_missing_cells = True")
    try:
        generate_assignment(course, solution)
    except ReleaseError as e:
        raise GradingSetupError(str(e)) from e


def prepare_zoo() -> None:
    """Build the zoo pairs the test cells load before any kernel starts, so parallel jobs never wait on it."""
    for pair in GRADING_PAIRS:
        zoo.materialize(pair)


def grade_all(course: Path, submissions: list[Submission], autograder_parent: Path, timeout: int,
              feedback_dir: Path | None = None, jobs: int = 1, progress=None) -> list[Grade]:
    """Grade every submission, `jobs` at a time (each in its own process group), in submission order.

    `progress` is called once per finished submission (e.g. a tqdm bar's update).
    """
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(grade, course, s, autograder_parent, timeout, feedback_dir): i
                   for i, s in enumerate(submissions)}
        grades = [None] * len(submissions)
        for future in as_completed(futures):
            grades[futures[future]] = future.result()
            if progress:
                progress(grades[futures[future]])
    return grades


def grading_env(autograder_parent: Path) -> dict:
    env = nbgrader_env()
    env.update(SPECDEC_GRADING="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(autograder_parent.resolve()), env.get("PYTHONPATH")]))
    return env


def grade(course: Path, submission: Submission, autograder_parent: Path, timeout: int,
          feedback_dir: Path | None = None) -> Grade:
    """Autograde one submission, and write its cleaned feedback into `feedback_dir` if given.

    Never raises for a bad submission: the problem is reported in the Grade, and feedback that cannot
    be made clean is withheld (said in the message) without touching the score.
    """
    result = _autograde(course, submission, autograder_parent, timeout)
    if feedback_dir is not None and result.status == "graded":
        secrets = feedback.grader_secrets(course, autograder_parent / "autograder")
        try:
            feedback.write_feedback(course, submission.student, feedback_dir, secrets)
        except feedback.FeedbackError as e:
            result.message = f"feedback withheld: {e}"
    return result


def _autograde(course: Path, submission: Submission, autograder_parent: Path, timeout: int) -> Grade:
    if submission.path is None:
        return Grade(submission.student, "missing", message=submission.problem)
    if submission.problem:
        return Grade(submission.student, "duplicate", message=submission.problem)
    try:
        notebook = nbformat.read(submission.path, as_version=4)
    except Exception as e:  # nbformat raises several unrelated types for a malformed file
        return Grade(submission.student, "invalid", message=f"not a readable notebook: {type(e).__name__}: {e}")
    target = course / "submitted" / submission.student / ASSIGNMENT / NOTEBOOK
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    start = time.perf_counter()
    args = ["autograde", ASSIGNMENT, "--student", submission.student, "--create", "--force"]
    for _ in range(DB_RETRIES):
        try:
            done = _run_nbgrader(course, args, grading_env(autograder_parent), timeout)
        except subprocess.TimeoutExpired:
            return Grade(submission.student, "timeout", message=f"grading took longer than {timeout} s",
                         seconds=time.perf_counter() - start)
        if "database is locked" not in done.stdout + done.stderr:  # parallel jobs share one gradebook
            break
    seconds = time.perf_counter() - start
    result = read_grade(course, submission.student)
    if result is None:
        tail = (done.stderr or "").strip().splitlines()[-3:]
        return Grade(submission.student, "error", message=" / ".join(tail) or "nbgrader recorded no grade",
                     seconds=seconds)
    result.seconds = seconds
    return result


def read_grade(course: Path, student: str) -> Grade | None:
    from sqlalchemy.exc import OperationalError

    for attempt in range(DB_RETRIES):
        try:
            return _read_grade(course, student)
        except OperationalError:  # the gradebook is locked by a parallel job's write: wait and read again
            if attempt == DB_RETRIES - 1:
                raise
            time.sleep(1 + attempt)


def _read_grade(course: Path, student: str) -> Grade | None:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        try:
            notebook = gradebook.find_submission_notebook(NOTEBOOK.removesuffix(".ipynb"), ASSIGNMENT, student)
        except MissingEntry:
            return None
        code = [g for g in notebook.grades if g.cell_type == "code"]  # auto-graded test cells
        return Grade(student, "graded", score=sum(float(g.score) for g in code),
                     max_score=sum(float(g.max_score) for g in code),
                     manual_pending=any(g.needs_manual_grade for g in notebook.grades),
                     tests={g.name: float(g.score) for g in notebook.grades})


def write_csv(grades: list[Grade], path: Path, cells: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["student", "score", "max_score", "manual_pending", "status", "message", "seconds",
                         *cells])
        for g in grades:
            writer.writerow([g.student, g.score, g.max_score, g.manual_pending, g.status, g.message,
                             round(g.seconds, 1), *[g.tests.get(name, "") for name in cells]])


def _run_nbgrader(course: Path, args: list[str], env: dict, timeout: int) -> subprocess.CompletedProcess:
    """nbgrader in its own process group: on timeout the whole group (kernel included) is killed."""
    process = subprocess.Popen([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def graded_cells(course: Path) -> list[str]:
    """The graded cells of the assignment, in notebook order (from the source notebook)."""
    notebook = nbformat.read(course / "source" / ASSIGNMENT / NOTEBOOK, as_version=4)
    return [cell.metadata["nbgrader"]["grade_id"] for cell in notebook.cells
            if cell.metadata.get("nbgrader", {}).get("grade")]


def clear_course(course: Path) -> None:
    if course.exists():
        shutil.rmtree(course)
