"""A submission's row: its `Grade` from the verdict and the notebook's own run (the verdict's points are the
auto-graded score), the scores for the gradebook, and the verdict shown in the autograded notebook's test cells.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from specdec_kit.protocol.adapters import is_graded_cell

from . import feedback, scan, verdict
from .course import BatchSetup
from .gradebook import read_autograded, record_scores, write_autograded
from .notebook_run import NotebookRun, space_notes

STATUSES = ("graded", "error", "kernel_died", "timeout", "invalid", "missing")
GRADER_FAILED = "the grader failed on this submission, not the submission"  # how an `error` row of the grader's begins


def grader_failed(student: str, error: BaseException, log: Path) -> str:
    """The message of a row the grader could not grade: its own failure, and how to grade it again."""
    return (f"{GRADER_FAILED} ({type(error).__name__}: {error}); no score is given for it: grade it again with "
            f"`specdec-course autograde ... --student {student}` (the traceback: {log})")


def is_grader_failure(status: str, message: str) -> bool:
    return status == "error" and message.startswith(GRADER_FAILED)


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
    isolation: str = ""  # what held its code's limits (box.limits_label: `bwrap+cgroup2`, `none`); "" when none ran


@dataclass
class Graded:
    """Everything the final pass of a batch writes again for one graded student."""

    grade: Grade
    notebook: nbformat.NotebookNode  # the autograded notebook, test cells showing the verdict
    scores: dict[str, tuple]  # every graded cell: (auto_score, manual_score, needs_manual_grade)


def conclude(course: Path, student: str, submitted: nbformat.NotebookNode, notes: list[str], judged: verdict.Verdict,
             run: NotebookRun, setup: BatchSetup, before: dict, seconds: float) -> Graded:
    """The row, the gradebook's scores and the autograded notebook, from the verdict and the notebook's run."""
    points = {test: setup.points[test] if judged.tests[test].passed else 0.0 for test in setup.points}
    bonus = {test: credit if judged.tests[test].passed else 0.0 for test, credit in setup.extra_credit.items()}
    scores = student_scores(submitted, points, setup.release, before, bonus)
    record_scores(course, student, scores)
    autograded = read_autograded(course, student)
    status, run_note = _run_status(run)
    if judged.out_of_time:  # the checks' own budget: the row says where grading stopped
        status = "timeout"
    messages = [*notes, run_note, *space_notes(autograded, verdict.sandbox_limits(setup.plan)), *judged.load_problems,
                *(f"{test}: {result.message.splitlines()[0]}" for test, result in judged.tests.items()
                  if not result.passed and result.aborted and not result.message.startswith("not judged")),
                *_disagreements(judged, autograded, setup.points, run)]
    grade = Grade(student, status, score=sum(points.values()), max_score=sum(setup.points.values()),
                  manual_pending=any(values[2] for name, values in scores.items() if name not in points),
                  message=join_messages(*messages), tests={**points, **bonus}, extra_credit=sum(bonus.values()),
                  seconds=seconds, flags=scan.scan_notebook(submitted),
                  failures={test: result.message.splitlines()[0] if result.message else "failed"
                            for test, result in judged.tests.items() if not result.passed},
                  vs_hf_assisted=judged.speed["vs_hf_assisted"] if judged.speed else None,
                  hidden_failed=[test for test, result in judged.tests.items()
                                 if not result.passed and result.visible_passed], isolation=setup.limits_held)
    notebook = show_verdict(autograded or _bare(submitted), judged, {**setup.points, **setup.extra_credit},
                            grade, run_note if autograded is None else "", extra=set(setup.extra_credit))
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
    if record.get("interrupted"):
        stopped = ", ".join(f"{c['label']} ({c['limit']:g} s)" for c in record["interrupted"])
        return "timeout", f"the notebook's own run stopped a cell at its time limit and went on: {stopped}{tail}"
    if run.error:
        return "error", ("the notebook's own run could not start from the notebook as handed in: its cells did "
                         f"not match the assignment's ({run.error}){tail}")
    return "graded", ""


def _disagreements(judged: verdict.Verdict, autograded: nbformat.NotebookNode | None, points: dict[str, float],
                   run: NotebookRun) -> list[str]:
    """Tests whose visible check the notebook's own run judged otherwise than the kit: the kit's verdict stands.

    A test cell of that run passed when it raised nothing. nbgrader's own score would also fail a cell that wrote
    to stderr, and libraries warn there (a deprecation, torch's recompiles): that is no failure of the check."""
    if autograded is None or run.error or (run.record or {}).get("died") or (run.record or {}).get("timed_out") \
            or run.killed:
        return []
    out = []
    for cell in autograded.cells:
        test = cell.metadata.get("nbgrader", {}).get("grade_id")
        result = judged.tests.get(test)
        if cell.cell_type != "code" or result is None or result.visible_passed is None or not points.get(test) \
                or cell.get("execution_count") is None:
            continue  # a bonus cell has 0 nbgrader points and is not run; a cell not run says nothing
        kernel_passed = not any(o.output_type == "error" for o in cell.outputs)
        if kernel_passed != result.visible_passed:
            seen = "passed" if kernel_passed else "failed"
            out.append(f"{test}: the notebook's own run {seen} its visible check, the kit's grading "
                       f"{'passed' if result.visible_passed else 'failed'} it; the kit's verdict stands")
    return out


def join_messages(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def student_scores(notebook: nbformat.NotebookNode, points: dict[str, float], release: nbformat.NotebookNode,
                   before: dict[str, tuple], extra_credit: dict[str, float] | None = None) -> dict[str, tuple]:
    """(auto_score, manual_score, needs_manual_grade) of every graded cell, as the gradebook must hold them, and
    a bonus test cell's extra credit fourth.

    The test cells get the verdict's points; a hand-graded cell gets nbgrader's own rule (an answer left as
    handed out scores 0, any other waits for a person), computed here from the submission's text with the
    release's metadata (its points, role and checksum: a submission that edits its cells' grading metadata
    changes nothing), rather than read back from a gradebook that kernels can write; a score a person gave
    before the batch is kept.
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
            auto = determine_grade(_with_text_of(original, cells.get(name)))[0]
        scores[name] = (auto, manual, manual is not None or auto is None)
        if name in (extra_credit or {}):
            scores[name] += (extra_credit[name],)
    return scores


def _with_text_of(original: nbformat.NotebookNode, submitted: nbformat.NotebookNode | None) -> nbformat.NotebookNode:
    """The release's cell (its type and grading metadata) holding what the submission wrote in it."""
    cell = copy.deepcopy(original)
    if submitted is not None:
        cell.source = submitted.get("source", "")
        if cell.cell_type == "code":
            cell.outputs = submitted.get("outputs", [])
    return cell


def _bare(submitted: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The submission without grading metadata: what the feedback shows when nbgrader could not run it."""
    notebook = copy.deepcopy(submitted)
    for cell in notebook.cells:
        cell.metadata.pop("nbgrader", None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return notebook


def show_verdict(notebook: nbformat.NotebookNode, judged: verdict.Verdict, points: dict[str, float], grade: Grade,
                 run_note: str, extra: set[str] = frozenset()) -> nbformat.NotebookNode:
    """The autograded notebook with the verdict closing each test cell's outputs (after what the notebook's own
    run printed there), a summary on top and the staff's notes; the tests in `extra` are worth extra credit."""
    notebook = copy.deepcopy(notebook)
    for cell in notebook.cells:
        test = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.cell_type == "code" and test in judged.tests:
            cell.outputs = [*cell.get("outputs", []),
                            verdict_output(test, judged.tests[test], points[test], test in extra)]
    notebook.cells[:0] = [_role_cell("verdict", summary(judged, points, grade, run_note)),
                          _role_cell(feedback.STAFF_ROLE, staff_notes(grade))]
    return notebook


def verdict_output(test: str, result: verdict.TestResult, points: float, extra: bool = False) -> nbformat.NotebookNode:
    """The kit's verdict beneath a test cell: passed or failed, with its points (of extra credit, for a bonus)."""
    worth = f"{points:g} points" + (" of extra credit" if extra else "")
    if result.passed:
        detail = f": {result.message}" if result.message else ""
        return nbformat.v4.new_output("stream", name="stdout",
                                      text=f"The kit's grading of {test}: passed ({worth}){detail}\n")
    # named as the kit's, beneath the notebook's own run of the visible check, which may have failed with the same
    # words (the feedback page shows an error as `ename: evalue`)
    ename, evalue = f"The kit's grading of {test}", f"failed (0 of {worth}): {result.message}"
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


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
