"""Student feedback pages from nbgrader's own generate_feedback, without the hidden checks or the grader's paths.

The course's nbgrader_config.py (lines from `feedback_config`) runs `CleanFeedback` after nbgrader's own feedback
preprocessors, so every page nbgrader renders is cleaned: `nbgrader generate_feedback`, formgrader's "generate
feedback" button, and what `nbgrader release_feedback` hands out. For each student's notebook it

- removes the kit's staff-only cell and cuts hidden-test regions (older courses: a course the kit sets up is
  generated from the student release, so its notebooks hold none);
- reduces each traceback to the frames in the student's own cells and its last line, and replaces grader
  paths by `<grader>` in the outputs;
- shows a hand-graded cell that nobody has graded yet as "Graded by hand: pending" instead of a score of 0;
- shows one total, the kit's (the required tests' points out of their maximum, from the gradebook), in nbgrader's
  heading and in the kit's summary, extra credit said apart; in the summary, a message that several tests failed
  with once, naming them, and a bonus part left as released (its methods still raise NotImplementedError) as "not
  attempted", in its test cell too. This is done here, not when grading, so that pages rendered again later (after
  the report is graded by hand, or a score changed in formgrader) show the gradebook's total;
- is run by nbgrader's exporter only if that is `safe_nbconvert.SafePageExporter` (it raises otherwise), which
  sanitises the whole page (safe_html.py): nothing a student wrote runs or fetches anything where it is opened;
- raises if `leaks` still finds a grader path, a line of the instructors' autograder files (as printed, in a
  repr, in hex or in base64), or a hidden-test or solution marker: nbgrader then writes no page for that student,
  which is better than a page that shows them. What the student's code printed (warnings with library frames
  included) is shown as they would see it locally, paths scrubbed: in a sandbox the kernel cannot read the
  instructors' files, so its own output is no reason to withhold a page.

`generate_feedback` runs nbgrader for a batch of students, checks every page again (`leaks`, `safe_html.unsafe`)
and copies it out:

    withheld = generate_feedback(course, Path("feedback"), ["alice", "bob"])  # {"alice": "", "bob": "<why>"}

This module runs inside nbgrader's process (the `instructor` extra); no notebook imports it.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
from nbgrader import utils
from nbgrader.api import Grade, Gradebook
from nbgrader.converters.generate_feedback import GenerateFeedback
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode
from traitlets.config.loader import PyFileConfigLoader

from specdec_kit.protocol.adapters import is_test_cell

from ..authoring.points import extra_credit
from ..core.nbgrader_course import (
    ASSIGNMENT,
    NOTEBOOK,
    import_name,
    list_setting,
    nbgrader_env,
    remove_hidden_tests,
)
from . import safe_html, safe_nbconvert
from .leaks import ANSI, FeedbackError, describe, grader_secrets, hidden_lines, leaks, strings

SCRUBBED = "<grader>"
ROLE_KEY, STAFF_ROLE = "specdec", "staff"  # the cell metadata row.py gives its notes for staff
VERDICT_ROLE = "verdict"  # ... and its summary of the kit's verdict, on top of the page
PENDING = "Graded by hand: pending"
KIT_VERDICT = "The kit's grading of"  # how row.verdict_output names the kit's verdict beneath a test cell
NOT_ATTEMPTED = "not attempted (left as released; a bonus part costs nothing)"
# verdict.failure_message's first line for a method that still raises the release's NotImplementedError.
_NOT_WRITTEN = re.compile(r"^\S+ raised NotImplementedError \(not written yet\)")
# row.summary's opening sentence, and its line for one test: "- `test_exact` (12 points): failed: <message>".
_SUMMARY_TOTAL = re.compile(r"^\*\*Auto-graded by the kit: [^*]*\*\*")
_SUMMARY_TEST = re.compile(r"^- `(?P<test>[^`]+)` \((?P<worth>[^)]*)\): (?P<outcome>.*)$")
_CELL_FRAME = re.compile(r"^Cell In\[(\d+)\], line \d+")
# nbgrader logs a failed student as this line, then the traceback in its next record.
_FAILED = re.compile(r"There was an error processing assignment: (\S+)")
_LOG_RECORD = re.compile(r"^\[\w+ [^\]]*\] ", re.M)  # `[GenerateFeedbackApp | ERROR] `
_EXCEPTION_MODULE = re.compile(r"^(\w+\.)+(?=\w+: )")  # `specdec_course.grading.feedback.` before `FeedbackError: `


# ---------------------------------------------------------------------------------------------
# Cleaning one notebook


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:  # longest first (grader_secrets), so no prefix is replaced before its longer path
        text = text.replace(secret, SCRUBBED)
    return text


def _student_frames(traceback: list[str], test_cells: set[int], secrets: list[str]) -> list[str]:
    """The frames in the student's own cells (IPython's `Cell In[n], line m`): where their code failed.

    Frames in files quote the checks' lines and the grader's paths, and a test cell's own frame its hidden
    region in older courses, so only frames of cells that are not graded test cells stay.
    """
    kept = []
    for frame in (ANSI.sub("", f) for f in traceback):
        cell = _CELL_FRAME.match(frame)
        if cell and int(cell.group(1)) not in test_cells:
            kept.append(_scrub(frame, secrets))
    return kept


def _clean_output(output: nbformat.NotebookNode, secrets: list[str], test_cells: set[int]) -> None:
    if output.output_type == "error":
        output.evalue = _scrub(ANSI.sub("", output.evalue), secrets)
        output.traceback = [*_student_frames(output.traceback, test_cells, secrets),
                            f"{output.ename}: {output.evalue}"]
    elif output.output_type == "stream":
        output.text = _scrub(output.text, secrets)
    elif output.output_type in ("display_data", "execute_result"):
        for mime, value in output.data.items():
            if mime.startswith("text/"):  # images are base64 and could be corrupted by a replacement
                output.data[mime] = _scrub(value, secrets)


def _is_staff_cell(cell: nbformat.NotebookNode) -> bool:
    return cell.metadata.get(ROLE_KEY, {}).get("role") == STAFF_ROLE


def clean_for_feedback(notebook: nbformat.NotebookNode, secrets: list[str]) -> nbformat.NotebookNode:
    """A copy of `notebook` without staff cells and hidden-test regions, tracebacks reduced, secrets scrubbed."""
    cleaned = copy.deepcopy(notebook)
    cleaned.cells = [cell for cell in cleaned.cells if not _is_staff_cell(cell)]
    test_cells = {cell.get("execution_count") for cell in cleaned.cells if is_test_cell(cell)}
    for cell in cleaned.cells:
        cell.source = remove_hidden_tests(cell.source)
        for output in cell.get("outputs", []):
            _clean_output(output, secrets, test_cells)
    return cleaned


def _mark_pending(cell: nbformat.NotebookNode, points: float) -> None:
    """Show a hand-graded cell as awaiting its grade: without the `grade` and `task` flags, nbgrader's feedback
    template prints no score for it (it would print 0.0), and the cell's first line says why."""
    for flag in ("grade", "task"):
        cell.metadata.nbgrader.pop(flag, None)
    line = f"{PENDING} ({points:g} points)."
    cell.source = f"**{line}**\n\n{cell.source}" if cell.cell_type == "markdown" else f"# {line}\n{cell.source}"


def is_hand_graded(cell: nbformat.NotebookNode) -> bool:
    """A cell a person grades: a graded answer cell (the report) or an nbgrader task."""
    return (utils.is_grade(cell) and utils.is_solution(cell)) or utils.is_task(cell)


def _is_pending(grade: Grade) -> bool:
    """No person has scored the cell yet, and it needs one or has no score at all (a manual score, however it
    was entered, ends the wait)."""
    return grade.manual_score is None and (bool(grade.needs_manual_grade) or grade.auto_score is None)


# ---------------------------------------------------------------------------------------------
# The kit's verdict as the page shows it


def not_written(message: str) -> bool:
    """The verdict's message (its first line) says a method still raises the release's NotImplementedError: for a
    bonus part, the class was left as released. A check that failed a hidden case got past the visible one, so its
    code was written."""
    return bool(_NOT_WRITTEN.match(message))


def kit_total(scores: dict[str, tuple[float, float]], required: list[str], extra_credit: dict[str, float],
              ) -> tuple[float, float, float]:
    """(points, maximum, extra credit) of the auto-graded tests, from the gradebook's (score, max_score) by cell.

    The total is the required tests' (a bonus cell's nbgrader points are 0, its score its extra credit); hand-graded
    cells are left out: they show their own score, or that it is pending.
    """
    def summed(tests, index):
        return sum(float(scores[t][index] or 0) for t in tests if t in scores)

    return summed(required, 0), summed(required, 1), summed(extra_credit, 0)


def _total_sentence(score: float, max_score: float, extra: float) -> str:
    extra_text = f" plus {extra:g} extra credit" if extra else ""
    return f"**Auto-graded by the kit: {score:g} / {max_score:g} points{extra_text}.**"


def _outcome(test: str, outcome: str, extra_credit: dict[str, float]) -> str:
    """A summary line's outcome ("passed", "failed: <message>"), NOT_ATTEMPTED for a bonus left as released."""
    left = test in extra_credit and outcome.startswith("failed: ") and not_written(outcome.removeprefix("failed: "))
    return NOT_ATTEMPTED if left else outcome


def summary_for_page(text: str, total: tuple[float, float, float], extra_credit: dict[str, float]) -> str:
    """The kit's summary cell (row.summary) with the gradebook's `total` (kit_total) as its opening, and one line per
    outcome: tests that failed with the same message share its line, a bonus left as released reads NOT_ATTEMPTED.

    Lines are grouped in the order of their first test; the notes and other lines are kept as written.
    """
    lines = _SUMMARY_TOTAL.sub(lambda _: _total_sentence(*total), text, count=1).split("\n")
    found = {i: match for i, line in enumerate(lines) if (match := _SUMMARY_TEST.match(line))}
    if not found:
        return "\n".join(lines)
    groups: dict[str, list[str]] = {}
    for match in found.values():
        test = match["test"]
        worth = f"+{extra_credit[test]:g} extra credit" if test in extra_credit else match["worth"]
        groups.setdefault(_outcome(test, match["outcome"], extra_credit), []).append(f"`{test}` ({worth})")
    merged = [f"- {', '.join(tests)}: {outcome}" for outcome, tests in groups.items()]
    first = min(found)
    return "\n".join([*lines[:first], *merged, *(line for i, line in enumerate(lines) if i > first and i not in found)])


def _bonus_not_attempted(cell: nbformat.NotebookNode, credit: float) -> None:
    """In a bonus test cell, the kit's failed verdict on a class left as released reads NOT_ATTEMPTED instead."""
    test = cell.metadata.nbgrader["grade_id"]
    for i, output in enumerate(cell.get("outputs", [])):
        if output.output_type == "error" and output.ename == f"{KIT_VERDICT} {test}":
            message = output.evalue.partition(": ")[2]  # after "failed (0 of 5 points): "
            if (stub := _NOT_WRITTEN.match(message)) is not None:
                text = f"{KIT_VERDICT} {test}: {NOT_ATTEMPTED}; {stub.group(0)} (+{credit:g} extra credit once passed)"
                cell.outputs[i] = nbformat.v4.new_output("stream", name="stdout", text=f"{text}\n")


def show_kit_verdict(notebook: nbformat.NotebookNode, total: tuple[float, float, float],
                     extra_credit: dict[str, float]) -> None:
    """Rewrite, in place, the kit's summary cell (its total `total`, from kit_total) and its bonus verdicts as the page
    shows them."""
    for cell in notebook.cells:
        if cell.metadata.get(ROLE_KEY, {}).get("role") == VERDICT_ROLE:
            cell.source = summary_for_page(cell.source, total, extra_credit)
        elif is_test_cell(cell) and cell.metadata.nbgrader["grade_id"] in extra_credit:
            _bonus_not_attempted(cell, extra_credit[cell.metadata.nbgrader["grade_id"]])


# ---------------------------------------------------------------------------------------------
# The preprocessor nbgrader runs


class CleanFeedback(NbGraderPreprocessor):
    """Last of GenerateFeedback's preprocessors: the student's page without what they must not see.

    It runs after nbgrader's GetGrades, which puts each graded cell's score into its nbgrader metadata.
    """

    autograder_dir = Unicode("", help="The instructors' autograder folder (hidden checks, grading config).",
                             ).tag(config=True)
    course_root = Unicode("", help="The nbgrader course directory, a path students must not see.").tag(config=True)

    def guards(self) -> tuple[list[str], list[str]]:
        """The grader paths and hidden lines that no page may show."""
        if not self.autograder_dir or not self.course_root:
            raise FeedbackError("c.CleanFeedback.autograder_dir and course_root are not both set in "
                                "nbgrader_config.py: add the lines of specdec_course.grading.feedback.feedback_config")
        autograder = Path(self.autograder_dir)
        return grader_secrets(Path(self.course_root), autograder), hidden_lines(autograder)

    def preprocess(self, nb: nbformat.NotebookNode, resources: dict) -> tuple[nbformat.NotebookNode, dict]:
        if not isinstance(self.parent, safe_nbconvert.SafePageExporter):  # nbgrader's exporter runs this
            raise FeedbackError("c.GenerateFeedback.exporter_class is not SafePageExporter in nbgrader_config.py, so "
                                "the page would run what the student wrote: add the lines of "
                                "specdec_course.grading.feedback.feedback_config")
        secrets, hidden = self.guards()
        cleaned = clean_for_feedback(nb, secrets)
        ids = resources["nbgrader"]
        self._show_pending(cleaned, ids)
        required, extra_credit = self.course_tests()
        total = kit_total(self._scores(ids), required, extra_credit)
        show_kit_verdict(cleaned, total, extra_credit)
        # nbgrader's heading would add the hand-graded cells and the extra credit: it shows the kit's total instead.
        ids["score"], ids["max_score"] = total[0] - (ids.get("late_penalty") or 0), total[1]  # as GetGrades subtracts
        found = leaks("\n".join(strings(cleaned)), secrets, hidden)
        if found:
            raise FeedbackError(f"{ids['student']!r}'s feedback page would show {describe(found)}: read the outputs "
                                "of their autograded notebook and write their feedback by hand")
        return cleaned, resources

    def course_tests(self) -> tuple[list[str], dict[str, float]]:
        """The required test cells and the bonus ones' extra credit, from the course's source notebook: a student's
        own cell metadata could say otherwise."""

        source = nbformat.read(Path(self.course_root) / "source" / ASSIGNMENT / NOTEBOOK, as_version=4)
        bonus = extra_credit(source)
        tests = [cell.metadata.nbgrader["grade_id"] for cell in source.cells if is_test_cell(cell)]
        return [test for test in tests if test not in bonus], bonus

    def _scores(self, ids: dict) -> dict[str, tuple[float, float]]:
        """Each graded cell's (score, max_score) in the gradebook, a person's changes included."""
        with Gradebook(ids["db_url"]) as gradebook:
            notebook = gradebook.find_submission_notebook(ids["notebook"], ids["assignment"], ids["student"])
            return {grade.name: (grade.score, grade.max_score) for grade in notebook.grades}

    def _show_pending(self, nb: nbformat.NotebookNode, ids: dict) -> None:
        with Gradebook(ids["db_url"]) as gradebook:
            for cell in filter(is_hand_graded, nb.cells):
                grade = gradebook.find_grade(cell.metadata.nbgrader["grade_id"], ids["notebook"],
                                             ids["assignment"], ids["student"])
                if _is_pending(grade):
                    _mark_pending(cell, grade.max_score)


def feedback_config(autograder_dir: Path, course_root: Path) -> list[str]:
    """Lines of nbgrader_config.py: nbgrader's default feedback preprocessors, then CleanFeedback; and the safe
    rendering of every page nbgrader makes from a notebook (safe_nbconvert.reader_config: feedback pages and
    formgrader's view of a submission).

    The defaults (GetGrades, CSSHTMLHeaderPreprocessor) are read from the installed nbgrader and written out
    by name, so the config says exactly what runs.
    """
    preprocessors = [*map(import_name, GenerateFeedback.class_traits()["preprocessors"].default()),
                     import_name(CleanFeedback)]
    return [*list_setting("c.GenerateFeedback.preprocessors", preprocessors),
            f"c.CleanFeedback.autograder_dir = {str(autograder_dir)!r}",
            f"c.CleanFeedback.course_root = {str(course_root)!r}",
            *safe_nbconvert.reader_config()]


# ---------------------------------------------------------------------------------------------
# A batch of pages


def _course_guards(course: Path) -> tuple[list[str], list[str]]:
    """CleanFeedback's guards as the course's nbgrader_config.py sets them: the page check matches nbgrader's."""
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    return CleanFeedback(config=config).guards()


def _autograded_students(course: Path) -> list[str]:
    return sorted(p.parents[1].name for p in (course / "autograded").glob(f"*/{ASSIGNMENT}/{NOTEBOOK}"))


def _nbgrader_errors(log: str) -> dict[str, str]:
    """Student -> the last line of the traceback nbgrader logged for them (its reason for writing no page)."""
    records = _LOG_RECORD.split(log)
    errors = {}
    for record, following in zip(records, records[1:]):
        failed = _FAILED.search(record)
        lines = [line for line in following.splitlines() if line.strip()]
        if failed and lines:
            errors[Path(failed.group(1)).parent.name] = _EXCEPTION_MODULE.sub("", lines[-1].strip())
    return errors


def _run_nbgrader(course: Path, students: list[str], everyone: list[str]) -> dict[str, str]:
    """One `nbgrader generate_feedback` for `students`, other autograded ones left alone: why it failed for whom.

    A student nbgrader wrote no page for and whose error its log does not name gets its exit status.
    """
    args = ["generate_feedback", ASSIGNMENT, "--force"]
    if len(students) == 1:
        args += ["--student", students[0]]
    elif others := sorted(set(everyone) - set(students)):
        args.append(f"--CourseDirectory.student_id_exclude={','.join(others)}")
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=nbgrader_env(),
                          capture_output=True, text=True)
    errors = _nbgrader_errors(done.stdout + done.stderr)
    return {student: errors.get(student) or (f"it exited with status {done.returncode}; run `nbgrader "
                                             f"generate_feedback {ASSIGNMENT} --student {student} --force` in "
                                             f"{course} to see its log")
            for student in students}


def generate_feedback(course: Path, out_dir: Path, students: list[str] | None = None) -> dict[str, str]:
    """nbgrader's feedback pages for `students` (default: every autograded one), checked and copied to out_dir.

    Returns student -> "" for a page written to `out_dir/<student>.html`, else the reason it was withheld.
    A page in which `leaks` or `safe_html.unsafe` finds anything is deleted from nbgrader's feedback folder too, so
    that `nbgrader release_feedback` cannot hand it out.
    """
    everyone = _autograded_students(course)
    students = everyone if students is None else list(students)
    secrets, hidden = _course_guards(course)
    out_dir.mkdir(parents=True, exist_ok=True)
    pages = {student: course / "feedback" / student / ASSIGNMENT / Path(NOTEBOOK).with_suffix(".html")
             for student in students}
    for student, page in pages.items():  # a page from an earlier run must not stand in for one withheld now
        page.unlink(missing_ok=True)
        (out_dir / f"{student}.html").unlink(missing_ok=True)
    runnable = [student for student in students if student in everyone]
    failures = _run_nbgrader(course, runnable, everyone) if runnable else {}
    results = {}
    for student, page in pages.items():
        if student not in everyone:
            results[student] = f"no autograded notebook for {student!r} in {course}: autograde the submission first"
        elif not page.is_file():
            results[student] = f"nbgrader generate_feedback wrote no page: {failures[student]}"
        elif found := leaks(page.read_text(), secrets, hidden):
            page.unlink()
            results[student] = f"the page showed {describe(found)}, so it was deleted; write the feedback by hand"
        elif found := safe_html.unsafe(page.read_text()):
            page.unlink()
            results[student] = (f"the page held {describe(found[:3])}, outside what a page may run or fetch, so it "
                                "was deleted; write the feedback by hand")
        else:
            shutil.copy(page, out_dir / f"{student}.html")
            results[student] = ""
    return results
