"""Grading a class's submissions: nbgrader runs each notebook, the kit's verdict gives the scores.

    specdec-course autograde SUBMISSIONS --out graded/ [--roster FILE] [--timeout 600] [--jobs N]

`collect.py` finds the submissions in the shapes LMSs give; `results.py` keeps the class's rows across
runs. For each readable submission two things run side by side:
- nbgrader autograde runs the whole notebook in a kernel, for the feedback page, the hand-graded report
  and formgrader. The course's source is the student release, so the kernel runs the visible tests
  only; it has neither `autograder/` nor `solutions/` on its import path or under its working
  directory; demo cells are skipped; the notebook and each cell have time limits and a dying kernel is
  reported in its cell (`nbgrader_setup.py`); its memory is limited (RLIMIT_DATA).
- the verdict (`verdict.py`): the kit's visible and hidden checks on the notebook's definitions, each
  check's probes in a child process, the judging in this process.
The verdict's points are the auto-graded score: they go into nbgrader's gradebook (nbgrader 0.9 has no
call for that, so `grade.auto_score` is written through its Gradebook ORM) and into the autograded
notebook's test cells. The kit owns grading runs: a raw `nbgrader autograde --force` would overwrite
the verdicts with the kernel's own results, so grade again with `specdec-course autograde` instead. Once
every kernel of the batch has finished, the kit writes all verdicts and autograded notebooks again (a
kernel runs as the same user and could have touched them), renders the feedback pages with nbgrader's
generate_feedback (cleaned by `feedback.CleanFeedback`).
"""

from __future__ import annotations

import ast
import copy
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from specdec_kit import settings, zoo
from specdec_kit.adapters import is_graded_cell, parse_python

from . import feedback, publish, scan, verdict
from .collect import Submission
from .nbgrader_setup import (
    ASSIGNMENT,
    NOTEBOOK,
    NbgraderError,
    autograde_config,
    generate_assignment,
    nbgrader_env,
    write_course_config,
)
from .preprocessors import read_run_record
from .release import render_release

STATUSES = ("graded", "error", "kernel_died", "timeout", "invalid", "missing")
DB_RETRIES = 4
GRADING_PAIRS = ("scripted", "sampling", "tiny", "tiny-b", "synthetic-small")  # the pairs the checks load on a CPU
EXTRA_CREDIT_KEY = "specdec"  # cell metadata {"extra_credit": points} of a bonus test cell
NBGRADER_MARGIN = 120  # seconds beyond the notebook's limit for nbgrader itself (kernel start, saving)


class GradingSetupError(NbgraderError):
    """The course directory could not be set up: nothing can be graded, so stop before the first student."""


@dataclass
class Grade:
    student: str
    status: str
    score: float = 0.0
    max_score: float = 0.0
    manual_pending: bool = False
    message: str = ""
    tests: dict[str, float] = field(default_factory=dict)  # grade_id -> points earned (extra credit for bonus tests)
    extra_credit: float = 0.0  # bonus points on top of `score` (nbgrader's extra_credit of the bonus test cells)
    seconds: float = 0.0
    flags: list[str] = field(default_factory=list)  # static-scan findings, for a person to read
    failures: dict[str, str] = field(default_factory=dict)  # failed test -> the first line of its message
    vs_hf_assisted: float | None = None  # the speed test's measured ratio, when it got that far
    hidden_failed: list[str] = field(default_factory=list)  # failed tests whose visible check passed


@dataclass
class BatchSetup:
    """How a batch is graded: the plan (checks, limits), the course's points and the machine's share."""

    plan: verdict.Plan
    autograder_dir: Path
    points: dict[str, float]  # auto-graded test cells (grade_id -> points), in notebook order
    extra_credit: dict[str, float]  # bonus test cells (grade_id -> extra credit when passed); 0 in `points`
    release: nbformat.NotebookNode  # the notebook students were given: where a submission's cells come from
    notebook_seconds: int
    cell_seconds: int
    jobs: int = 1
    cores: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))

    @property
    def threads(self) -> int:
        """Torch threads of each process a job runs at once (its kernel and its verdict child)."""
        return max(1, self.cores // (2 * self.jobs))

    @property
    def timing_threads(self) -> int:
        """Torch threads of the speed test's children, which run while nothing else of their job does."""
        return max(1, self.cores // self.jobs)


@dataclass
class Graded:
    """Everything the final pass of a batch writes again for one graded student."""

    grade: Grade
    notebook: nbformat.NotebookNode  # the autograded notebook, test cells showing the verdict
    scores: dict[str, tuple]  # every graded cell: (auto_score, manual_score, needs_manual_grade)


# ---------------------------------------------------------------------------------------------
# Setting up


def setup_batch(course: Path, solution: Path, autograder_dir: Path, jobs: int = 1,
                notebook_seconds: int | None = None) -> BatchSetup:
    """Check the options, set up the course and the zoo, and return the batch's setup.

    The limits are those of autograder/config.toml; `notebook_seconds` (`--timeout`) overrides its own.
    """
    if jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {jobs}")
    if not (autograder_dir / "hidden.py").is_file():
        raise ValueError(f"{autograder_dir} holds no hidden.py: pass --autograder with the instructors' folder")
    limits = _limits(autograder_dir)
    seconds = int(limits["notebook_seconds"]) if notebook_seconds is None else notebook_seconds
    if seconds <= 0:
        raise ValueError(f"the notebook time limit must be a positive number of seconds, got {seconds}")
    cell_seconds = min(seconds, int(limits["cell_seconds"]))
    prepare_course(course, solution, autograder_dir, seconds, cell_seconds)
    prepare_zoo()
    plan = verdict.load_plan(autograder_dir)
    points = {name: p for name, p in course_points(course).items() if name in plan.tests}
    extra_credit = {name: p for name, p in course_extra_credit(course).items() if name in plan.tests}
    release = nbformat.read(course / "source" / ASSIGNMENT / NOTEBOOK, as_version=4)
    return BatchSetup(plan, autograder_dir, points, extra_credit, release, seconds, cell_seconds, jobs)


def _limits(autograder_dir: Path) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the instructor extra installs tomli
        import tomli as tomllib
    return tomllib.loads((autograder_dir / "config.toml").read_text())["limits"]


def prepare_course(course: Path, solution: Path, autograder_dir: Path, notebook_seconds: int = 600,
                   cell_seconds: int = 300) -> None:
    """Set up the course directory and its gradebook once, before any submission is graded.

    The assignment is generated from the student release, so nothing in the course holds a hidden test or
    a solution; the config swaps in the kit's nbgrader preprocessors (time limits, demo cells, clean
    feedback)."""
    course.mkdir(parents=True, exist_ok=True)
    try:
        release = render_release(solution, publish.load_config(autograder_dir))
        bonus = list(extra_credit(nbformat.reads(release, as_version=4)))
        write_course_config(course, *autograde_config(notebook_seconds, cell_seconds, judged_outside=bonus),
                            # A deleted locked test cell is restored from the source, never scored 0 unseen.
                            "c.OverwriteCells.add_missing_cells = True",
                            *feedback.feedback_config(autograder_dir.resolve(), course.resolve()))
        generate_assignment(course, release)
    except NbgraderError as e:
        raise GradingSetupError(str(e)) from e


def prepare_zoo() -> None:
    """Build the zoo pairs the checks load before any job starts, so parallel jobs never wait on it."""
    for pair in GRADING_PAIRS:
        zoo.materialize(pair)


def course_points(course: Path) -> dict[str, float]:
    """Points of every graded cell, by grade_id, in notebook order (from the course's source notebook)."""
    notebook = nbformat.read(course / "source" / ASSIGNMENT / NOTEBOOK, as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"])
            for c in notebook.cells if is_graded_cell(c)}


def course_extra_credit(course: Path) -> dict[str, float]:
    """Extra credit of every bonus test cell, by grade_id: the cell's `specdec.extra_credit` metadata. Its nbgrader
    points are 0, so the assignment's maximum stays what the required parts give."""
    return extra_credit(nbformat.read(course / "source" / ASSIGNMENT / NOTEBOOK, as_version=4))


def extra_credit(notebook: nbformat.NotebookNode) -> dict[str, float]:
    return {c.metadata["nbgrader"]["grade_id"]: float(c.metadata[EXTRA_CREDIT_KEY]["extra_credit"])
            for c in notebook.cells if is_graded_cell(c) and EXTRA_CREDIT_KEY in c.metadata}


def hand_graded_cells(course: Path) -> list[str]:
    """The cells a person grades: nbgrader's graded answer cells (the report), by grade_id."""
    notebook = nbformat.read(course / "source" / ASSIGNMENT / NOTEBOOK, as_version=4)
    return [c.metadata["nbgrader"]["grade_id"] for c in notebook.cells if feedback.is_hand_graded(c)]


def graded_cells(course: Path) -> list[str]:
    """The graded cells of the assignment, in notebook order."""
    return list(course_points(course))


# ---------------------------------------------------------------------------------------------
# One submission


def grade_all(course: Path, submissions: list[Submission], setup: BatchSetup, feedback_dir: Path,
              progress=None, kept: dict[str, Graded | Grade] | None = None) -> list[Grade]:
    """Grade every submission, `setup.jobs` at a time, then write every verdict again and the feedback.

    `progress` is called with each result as its submission finishes; `kept` holds results of an earlier,
    interrupted run by student, used instead of grading those again.
    """
    import torch

    os.environ[settings.THREADS] = str(setup.threads)  # the forkserver (started later) and its children
    torch.set_num_threads(setup.threads)  # this process's reference answers
    before = read_scores(course)  # before any kernel of the batch runs: what nothing in it has touched
    results: list[Graded | Grade | None] = [(kept or {}).get(s.student) for s in submissions]
    with ThreadPoolExecutor(max_workers=setup.jobs) as pool:
        futures = {pool.submit(grade, course, s, setup, before.get(s.student, {})): i
                   for i, s in enumerate(submissions) if results[i] is None}
        for future in as_completed(futures):
            index = futures[future]
            results[index] = _result(future, submissions[index], course.parent / "logs")
            if progress:
                progress(results[index])
    return finish(course, results, feedback_dir, before)


def _result(future, submission: Submission, log_dir: Path) -> Graded | Grade:
    """A job's result; a failure of the grader itself costs that row (status `error`, traceback in the logs),
    never the batch."""
    try:
        return future.result()
    except Exception as e:
        import traceback

        log_dir.mkdir(parents=True, exist_ok=True)
        log = log_dir / f"{submission.student}.error.log"
        log.write_text("".join(traceback.format_exception(e)))
        return Grade(submission.student, "error", message=f"the grader failed on this submission "
                                                          f"({type(e).__name__}: {e}); grade it again, see {log}")


def finish(course: Path, results: list[Graded | Grade], feedback_dir: Path, before: dict) -> list[Grade]:
    """After every kernel has stopped: every score in the gradebook set again (the batch's students' from
    the kit's records, everyone else's as the batch found them), the kit's notebooks written again, then
    the feedback."""
    graded = [r for r in results if isinstance(r, Graded)]
    write_scores(course, {**before, **{item.grade.student: item.scores for item in graded}})
    for item in graded:
        write_autograded(course, item.grade.student, item.notebook)
    try:
        withheld = feedback.generate_feedback(course, feedback_dir, [g.grade.student for g in graded])
    except Exception as e:  # the scores stand without pages: `specdec-course feedback` can render them later
        withheld = {g.grade.student: f"rendering the pages failed ({type(e).__name__}: {e})" for g in graded}
    grades = [r.grade if isinstance(r, Graded) else r for r in results]
    for grade in grades:
        if withheld.get(grade.student):
            grade.message = _join(grade.message, f"feedback page withheld: {withheld[grade.student]}")
    return grades


def grade(course: Path, submission: Submission, setup: BatchSetup, before: dict | None = None) -> Graded | Grade:
    """Grade one submission (`before`: its scores in the gradebook before the batch). Never raises for a bad
    submission: what went wrong is the row's status."""
    started = time.perf_counter()
    if submission.path is None:
        return Grade(submission.student, "missing", message=submission.problem)
    try:
        notebook, notes = read_submission(submission.path)
    except InvalidSubmission as e:
        return Grade(submission.student, "invalid", message=str(e))
    notes += match_release(notebook, setup.release)
    student = submission.student
    target = course / "submitted" / student / ASSIGNMENT / NOTEBOOK
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    log_dir = course.parent / "logs"
    log_dir.mkdir(exist_ok=True)
    run = NotebookRun(course, student, setup, log_dir)
    kernel = threading.Thread(target=run.run, name=f"nbgrader {student}")
    kernel.start()
    judged = verdict.judge(notebook, setup.plan, setup.threads, setup.timing_threads,
                           log_dir / f"{student}.verdict.log", before_timing=kernel.join)
    kernel.join()
    return conclude(course, student, notebook, notes, judged, run, setup, before or {},
                    time.perf_counter() - started)


class InvalidSubmission(ValueError):
    """A file that cannot be graded as a notebook, with what the student can do about it."""


def read_submission(path: Path) -> tuple[nbformat.NotebookNode, list[str]]:
    """The notebook in nbformat 4, and notes on what had to be done to it (conversion, missing metadata)."""
    redownload = "re-download it from Colab (File > Download > Download .ipynb) or Jupyter and submit again"
    if path.stat().st_size == 0:
        raise InvalidSubmission(f"the file is empty: {redownload}")
    try:
        raw = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    except Exception as e:  # nbformat raises several unrelated types for a malformed file
        raise InvalidSubmission(f"not a Jupyter notebook ({type(e).__name__}): {redownload}") from None
    notes = []
    version = raw.get("nbformat")
    if not isinstance(version, int) or version < 1:
        raise InvalidSubmission(f"not a Jupyter notebook (JSON without a notebook's fields): {redownload}")
    if version < 4:
        try:
            notebook = nbformat.convert(raw, 4)
        except Exception:
            raise InvalidSubmission(f"notebook format {version} is too old to convert: open it in Jupyter, "
                                    "save it, and submit the saved file") from None
        notes.append(f"notebook format {version} (Jupyter before 2015): converted to format 4 and graded")
    else:
        notebook = raw
    if "cells" not in notebook:
        raise InvalidSubmission(f"not a Jupyter notebook (JSON without cells): {redownload}")
    if not any(cell.get("cell_type") == "code" and cell.get("source") for cell in notebook["cells"]):
        raise InvalidSubmission("the notebook holds no code: check that this is the file you meant to submit")
    nbformat.validator.normalize(notebook)
    if not any(cell.get("metadata", {}).get("nbgrader") for cell in notebook.cells):
        notes.append("the notebook's grading metadata was gone (an editor removed it): graded from the classes "
                     "found in its code")
    return nbformat.from_dict(notebook), notes


def match_release(notebook: nbformat.NotebookNode, release: nbformat.NotebookNode) -> list[str]:
    """Give back, in place, what an editor took from the assignment's cells, matching them to the release's:
    an answer cell turned into markdown becomes code again (as nbgrader does), and a cell whose grading
    metadata was stripped gets it back when it is the same cell (same text; for an answer cell, the same
    class defined, or the same first line). Returns notes for the row; unmatched cells stay as they are
    (nbgrader restores missing test cells itself)."""
    notes = []
    release_cells = {c.metadata["nbgrader"]["grade_id"]: c for c in release.cells if c.metadata.get("nbgrader")}
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        original = release_cells.get(grade_id)
        if original is not None and original.cell_type == "code" and cell.cell_type != "code":
            cell.cell_type, cell.outputs, cell.execution_count = "code", [], None
            notes.append(f"the answer cell {grade_id} had been turned into {cell.get('cell_type', 'text')}: graded "
                         "as code, as the assignment has it")
    present = {c.metadata.get("nbgrader", {}).get("grade_id") for c in notebook.cells}
    restored = []
    for grade_id, original in release_cells.items():
        if grade_id in present:
            continue
        match = next((c for c in notebook.cells if not c.metadata.get("nbgrader") and _same_cell(c, original)), None)
        if match is not None:
            match.metadata["nbgrader"] = copy.deepcopy(original.metadata["nbgrader"])
            restored.append(grade_id)
    if restored:
        notes.append(f"grading metadata restored on {len(restored)} cells matched to the assignment's")
    return notes


def _same_cell(cell: nbformat.NotebookNode, original: nbformat.NotebookNode) -> bool:
    if cell.cell_type != original.cell_type:
        return False
    if cell.source.strip() == original.source.strip():
        return True
    if not original.metadata["nbgrader"].get("solution"):
        return False
    if original.cell_type == "code":
        return bool(_classes(original.source)) and _classes(cell.source) == _classes(original.source)
    first = original.source.strip().splitlines()[0]
    return cell.source.strip().startswith(first)


def _classes(source: str) -> set[str]:
    try:
        return {node.name for node in parse_python(source).body if isinstance(node, ast.ClassDef)}
    except SyntaxError:
        return set()


@dataclass
class NotebookRun:
    """nbgrader autograde of one student, in its own process group, with the kit's limits."""

    course: Path
    student: str
    setup: BatchSetup
    log_dir: Path
    record: dict | None = None
    killed: bool = False  # the whole nbgrader run outlived its limit and was killed
    error: str = ""  # nbgrader's last words when it failed

    def run(self) -> None:
        record_path = self.log_dir / f"{self.student}.run.json"
        record_path.unlink(missing_ok=True)
        env = kernel_env(self.setup.threads, record_path)
        args = ["autograde", ASSIGNMENT, "--student", self.student, "--create", "--force"]
        limit = self.setup.notebook_seconds + NBGRADER_MARGIN
        for _ in range(DB_RETRIES):
            try:
                done = _run_nbgrader(self.course, args, env, limit, self.setup.plan.memory_mb)
            except subprocess.TimeoutExpired:
                self.killed = True
                break
            if "database is locked" not in done.stdout + done.stderr:  # parallel jobs share one gradebook
                break
        else:
            done = None
        if done is not None:
            (self.log_dir / f"{self.student}.nbgrader.log").write_text(done.stdout + done.stderr)
            if done.returncode != 0:
                self.error = _nbgrader_error(done.stdout + done.stderr) or f"exit status {done.returncode}"
        self.record = read_run_record(record_path)


def kernel_env(threads: int, record_path: Path) -> dict:
    """The environment of nbgrader and its kernel: offline, threads pinned, no instructor folder importable."""
    env = nbgrader_env()
    thread_count = str(threads)
    env.update({settings.GRADING: "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                settings.THREADS: thread_count, "OMP_NUM_THREADS": thread_count, "MKL_NUM_THREADS": thread_count,
                settings.RUN_RECORD: str(record_path)})
    env.pop(settings.SELFTEST, None)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
             if p and not any((Path(p) / folder).exists() for folder in ("autograder", "solutions"))]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _nbgrader_error(output: str) -> str:
    """The exception that stopped nbgrader (the last `Name: message` line of its traceback), or ""."""
    lines = [line.strip() for line in output.splitlines()]
    return next((line for line in reversed(lines) if re.match(r"^[A-Za-z_.]*(Error|Exception)\b.*:", line)), "")


def _run_nbgrader(course: Path, args: list[str], env: dict, timeout: int,
                  memory_mb: int) -> subprocess.CompletedProcess:
    """nbgrader in its own process group with a memory limit: on timeout the whole group is killed."""
    def limit_memory():
        if memory_mb:
            resource.setrlimit(resource.RLIMIT_DATA, (memory_mb << 20, memory_mb << 20))

    process = subprocess.Popen([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                               preexec_fn=limit_memory)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


# ---------------------------------------------------------------------------------------------
# The row, the gradebook and the autograded notebook


def conclude(course: Path, student: str, submitted: nbformat.NotebookNode, notes: list[str], judged: verdict.Verdict,
             run: NotebookRun, setup: BatchSetup, before: dict, seconds: float) -> Graded:
    """The row, the gradebook's scores and the autograded notebook, from the verdict and the notebook's run."""
    points = {test: setup.points[test] if judged.tests[test].passed else 0.0 for test in setup.points}
    bonus = {test: credit if judged.tests[test].passed else 0.0 for test, credit in setup.extra_credit.items()}
    scores = student_scores(submitted, points, setup.release, before, bonus)
    kernel_scores = record_scores(course, student, scores)
    status, run_note = _run_status(run)
    messages = [*notes, run_note, *judged.load_problems,
                *(f"{test}: {result.message.splitlines()[0]}" for test, result in judged.tests.items()
                  if not result.passed and result.aborted),
                *_disagreements(judged, kernel_scores, setup.points, run)]
    grade = Grade(student, status, score=sum(points.values()), max_score=sum(setup.points.values()),
                  manual_pending=any(values[2] for name, values in scores.items() if name not in points),
                  message=_join(*messages), tests={**points, **bonus}, extra_credit=sum(bonus.values()),
                  seconds=seconds, flags=scan.scan_notebook(submitted),
                  failures={test: result.message.splitlines()[0] if result.message else "failed"
                            for test, result in judged.tests.items() if not result.passed},
                  vs_hf_assisted=judged.speed["vs_hf_assisted"] if judged.speed else None,
                  hidden_failed=[test for test, result in judged.tests.items()
                                 if not result.passed and result.visible_passed])
    autograded = read_autograded(course, student)
    notebook = show_verdict(autograded or _bare(submitted), judged, {**setup.points, **setup.extra_credit},
                            grade, kernel_scores,
                            run_note if autograded is None else "")
    write_autograded(course, student, notebook)
    return Graded(grade, notebook, scores)


def _run_status(run: NotebookRun) -> tuple[str, str]:
    """The row's status and, if the notebook's own run went wrong, a sentence on it for the student."""
    record = run.record or {}
    tail = "; the auto-graded points come from the kit's checks of the code, which ran on their own"
    if record.get("died"):
        died = record["died"]
        return "kernel_died", f"the notebook's kernel died in cell {died['label']} ({died['cause']}){tail}"
    if record.get("timed_out") or run.killed:
        where = (record.get("timed_out") or record.get("current") or {}).get("label", "?")
        return "timeout", f"the notebook's own run was stopped at its time limit in cell {where}{tail}"
    if run.error:
        return "error", ("the notebook's own run could not start from the notebook as handed in: its cells did "
                         f"not match the assignment's ({run.error}){tail}")
    return "graded", ""


def _disagreements(judged: verdict.Verdict, kernel: dict[str, float | None], points: dict[str, float],
                   run: NotebookRun) -> list[str]:
    """Tests whose visible check the notebook's own run judged otherwise than the kit: the kit's verdict stands."""
    if run.error or (run.record or {}).get("died") or (run.record or {}).get("timed_out") or run.killed:
        return []
    out = []
    for test, result in judged.tests.items():
        if test not in kernel or kernel[test] is None or result.visible_passed is None or not points.get(test):
            continue  # a bonus cell has 0 nbgrader points (and is not run): its kernel score says nothing
        kernel_passed = kernel[test] >= points[test]
        if kernel_passed != result.visible_passed:
            seen = "passed" if kernel_passed else "failed"
            out.append(f"{test}: the notebook's own run {seen} its visible check, the kit's grading "
                       f"{'passed' if result.visible_passed else 'failed'} it; the kit's verdict stands")
    return out


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def student_scores(notebook: nbformat.NotebookNode, points: dict[str, float], release: nbformat.NotebookNode,
                   before: dict[str, tuple], extra_credit: dict[str, float] | None = None) -> dict[str, tuple]:
    """(auto_score, manual_score, needs_manual_grade) of every graded cell, as the gradebook must hold them, and
    a bonus test cell's extra credit fourth.

    The test cells get the verdict's points; a hand-graded cell gets nbgrader's own rule (an answer left as
    handed out scores 0, any other waits for a person), computed here from the submission rather than read
    back from a gradebook that kernels can write; a score a person gave before the batch is kept.
    """
    from nbgrader.utils import determine_grade

    cells = {c.metadata["nbgrader"]["grade_id"]: c for c in notebook.cells if is_graded_cell(c)}
    scores = {}
    for original in release.cells:
        name = original.metadata.get("nbgrader", {}).get("grade_id")
        if not is_graded_cell(original):
            continue
        manual = before.get(name, (None, None, None))[1]
        if name in points:
            auto = points[name]
        else:  # a cell the notebook lost counts as left as handed out, as nbgrader restores it
            auto = determine_grade(cells.get(name, original))[0]
        scores[name] = (auto, manual, manual is not None or auto is None)
        if name in (extra_credit or {}):
            scores[name] += (extra_credit[name],)
    return scores


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


def record_scores(course: Path, student: str, scores: dict[str, tuple]) -> dict[str, float | None]:
    """Write one student's scores right after the notebook's own run; return the auto scores that run gave.

    A submission nbgrader could not record (its run failed before) is created first.
    """
    from nbgrader.api import Gradebook

    def write():
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
            notebook = _submission_notebook(gradebook, student)
            ran = {g.name: None if g.auto_score is None else float(g.auto_score) for g in notebook.grades}
            _set(notebook, scores)
            gradebook.db.commit()
            return ran

    return _retry_locked(write)


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


def _bare(submitted: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The submission without grading metadata: what the feedback shows when nbgrader could not run it."""
    notebook = copy.deepcopy(submitted)
    for cell in notebook.cells:
        cell.metadata.pop("nbgrader", None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return notebook


def show_verdict(notebook: nbformat.NotebookNode, judged: verdict.Verdict, points: dict[str, float], grade: Grade,
                 kernel: dict[str, float | None], run_note: str) -> nbformat.NotebookNode:
    """The autograded notebook with the verdict closing each test cell's outputs (after what the notebook's own
    run printed there), a summary on top and the staff's notes."""
    notebook = copy.deepcopy(notebook)
    for cell in notebook.cells:
        test = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.cell_type == "code" and test in judged.tests:
            cell.outputs = [*cell.get("outputs", []), verdict_output(test, judged.tests[test], points[test])]
    notebook.cells[:0] = [_role_cell("verdict", summary(judged, points, grade, run_note)),
                          _role_cell(feedback.STAFF_ROLE, staff_notes(grade))]
    return notebook


def verdict_output(test: str, result: verdict.TestResult, points: float) -> nbformat.NotebookNode:
    if result.passed:
        detail = f": {result.message}" if result.message else ""
        return nbformat.v4.new_output("stream", name="stdout",
                                      text=f"The kit's grading of {test}: passed ({points:g} points){detail}\n")
    return nbformat.v4.new_output("error", ename="CheckFailed", evalue=result.message,
                                  traceback=[f"CheckFailed: {result.message}"])


def summary(judged: verdict.Verdict, points: dict[str, float], grade: Grade, run_note: str) -> str:
    """The feedback's opening cell: the score and each test's verdict, in the student's terms."""
    extra = f" plus {grade.extra_credit:g} extra credit" if grade.extra_credit else ""
    lines = [f"**Auto-graded by the kit: {grade.score:g} / {grade.max_score:g} points{extra}.** Each test ran the "
             "kit's checks (its visible cases and hidden ones) on your classes, outside your notebook's own run."]
    if run_note or grade.message:
        lines.append(f"\nNotes: {_plain(run_note or grade.message)}")
    lines.append("")
    for test, result in judged.tests.items():
        outcome = "passed" if result.passed else "failed: " + _plain(result.message.splitlines()[0])
        lines.append(f"- `{test}` ({points.get(test, 0):g} points): {outcome}")
    if judged.not_run:
        lines.append("\nTop-level statements in your cells that grading does not run (only imports, functions, "
                     "classes and constants do):")
        lines += [f"- {_plain(item)}" for item in judged.not_run]
    return "\n".join(lines)


def _plain(text: str) -> str:
    """`text` shown as written in markdown (`__init__` would otherwise turn bold)."""
    return re.sub(r"([\\`*_\[\]<>#|])", r"\\\1", text)


def staff_notes(grade: Grade) -> str:
    flags = grade.flags or ["none"]
    return "\n".join(["**For staff only** (removed from the student's feedback).", "",
                      "Static scan flags (advisory, no score changed):", *(f"- {f}" for f in flags)])


def _role_cell(role: str, text: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_markdown_cell(text)
    cell.metadata[feedback.ROLE_KEY] = {"role": role}
    return cell


# ---------------------------------------------------------------------------------------------
# grades.csv


def clear_course(course: Path) -> None:
    if course.exists():
        shutil.rmtree(course)
