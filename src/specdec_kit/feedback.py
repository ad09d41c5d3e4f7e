"""Student feedback from nbgrader, without the hidden tests or the grader's paths.

nbgrader's `generate_feedback` renders the autograded notebook as it is: test cells with their hidden
regions, and full tracebacks that quote the hidden checks' source lines and the grader's file paths.
`write_feedback` renders a cleaned copy instead (hidden regions cut, each traceback reduced to the
frames in the student's own cells and its last line, grader paths replaced by `<grader>`) and refuses
to hand back HTML in which `leaks` still finds any of that. nbgrader's own autograded copy, which
instructors read in formgrader, is not touched.

    page = write_feedback(course, "alice", Path("feedback"), grader_secrets(course, Path("autograder")))
"""

from __future__ import annotations

import copy
import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from .release import ASSIGNMENT, BEGIN_HIDDEN, END_HIDDEN, FORBIDDEN_TEXT, NOTEBOOK, nbgrader_env

FEEDBACK_SOURCE = "feedback_source"  # course folder of cleaned notebooks; nbgrader reads it as "autograded"
SCRUBBED = "<grader>"
# Hidden-test text, from release's constants so that this public file never holds it literally. Solution
# markers are left out: feedback shows the student's own answers, never the reference's.
HIDDEN_TEXT = (*(m for m in FORBIDDEN_TEXT if "SOLUTION" not in m), "hidden.check")
TRACEBACK = "Traceback (most recent call last)"
_HIDDEN_REGION = re.compile(rf"^[ \t]*{re.escape(BEGIN_HIDDEN)}.*?{re.escape(END_HIDDEN)}[ \t]*\n?", re.S | re.M)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_TAG = re.compile(r"<[^>]*>")
# A traceback frame in a file: Python's `File "/x.py", line 3` (`\"` in notebook JSON), IPython's `File /x.py:3`.
_FRAME = re.compile(rf'File \\?"?(/|{re.escape(SCRUBBED)})')


_CELL_FRAME = re.compile(r"^Cell In\[(\d+)\], line \d+")


def _is_test_cell(cell: nbformat.NotebookNode) -> bool:
    nbgrader = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and nbgrader.get("grade", False) and not nbgrader.get("solution", False)


class FeedbackError(RuntimeError):
    """Feedback could not be generated, or the generated HTML shows what students must not see."""


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:  # longest first (grader_secrets), so no prefix is replaced before its longer path
        text = text.replace(secret, SCRUBBED)
    return text


def _student_frames(traceback: list[str], test_cells: set[int], secrets: list[str]) -> list[str]:
    """The frames in the student's own cells (IPython's `Cell In[n], line m`): where their code failed.

    Frames in files quote the checks' and hidden checks' lines, and a test cell's own frame its hidden
    region, so only frames of cells that are not graded test cells stay.
    """
    kept = []
    for frame in map(lambda f: _ANSI.sub("", f), traceback):
        cell = _CELL_FRAME.match(frame)
        if cell and int(cell.group(1)) not in test_cells:
            kept.append(_scrub(frame, secrets))
    return kept


def _clean_output(output: nbformat.NotebookNode, secrets: list[str], test_cells: set[int]) -> None:
    if output.output_type == "error":
        output.evalue = _scrub(_ANSI.sub("", output.evalue), secrets)
        # The checks' frames quote hidden source lines and files: the student's frames and the verdict stay.
        output.traceback = [*_student_frames(output.traceback, test_cells, secrets),
                            f"{output.ename}: {output.evalue}"]
    elif output.output_type == "stream":
        output.text = _scrub(output.text, secrets)
    elif output.output_type in ("display_data", "execute_result"):
        for mime, value in output.data.items():
            if mime.startswith("text/"):  # images are base64 and could be corrupted by a replacement
                output.data[mime] = _scrub(value, secrets)


def clean_for_feedback(notebook: nbformat.NotebookNode, secrets: list[str]) -> nbformat.NotebookNode:
    """A copy of `notebook` with hidden-test regions cut, tracebacks reduced to one line and secrets scrubbed."""
    cleaned = copy.deepcopy(notebook)
    test_cells = {cell.get("execution_count") for cell in cleaned.cells if _is_test_cell(cell)}
    for cell in cleaned.cells:
        cell.source = _HIDDEN_REGION.sub("", cell.source)
        for output in cell.get("outputs", []):
            _clean_output(output, secrets, test_cells)
    return cleaned


def leaks(text: str, secrets: list[str]) -> list[str]:
    """The hidden-test text, traceback frames and secrets that `text` (a notebook or its HTML) contains."""
    # HTML splits code into highlighting spans and escapes quotes (&quot;): search its plain text too.
    plain = html.unescape(_TAG.sub("", _ANSI.sub("", text)))
    found = [item for item in (*HIDDEN_TEXT, TRACEBACK, *secrets) if item in text or item in plain]
    frame = _FRAME.search(text) or _FRAME.search(plain)
    if frame:
        found.append(f"traceback frame {frame.group(0)!r}")
    return found


def grader_secrets(course: Path, autograder_dir: Path) -> list[str]:
    """Absolute paths of the grading machine, as given and resolved, longest first."""
    package = Path(__file__).parent
    paths = [course, autograder_dir, autograder_dir.parent, package, Path(sys.prefix)]
    forms = {str(form) for path in paths for form in (path.absolute(), path.resolve())}
    # The root would scrub every path in every output and flag all of them as leaks.
    return sorted((form for form in forms if form != Path(form).anchor), key=len, reverse=True)


def write_feedback(course: Path, student: str, out_dir: Path, secrets: list[str]) -> Path:
    """`out_dir/<student>.html`: nbgrader's feedback on a cleaned copy of the student's autograded notebook."""
    autograded = course / "autograded" / student / ASSIGNMENT / NOTEBOOK
    if not autograded.is_file():
        raise FeedbackError(f"no autograded notebook for {student!r} at {autograded}: run autograde first")
    source = course / FEEDBACK_SOURCE / student / ASSIGNMENT / NOTEBOOK
    source.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(clean_for_feedback(nbformat.read(autograded, as_version=4), secrets), source)
    # generate_feedback reads `<autograded_directory>/<student>/<assignment>/` and takes the scores from
    # the gradebook; --force because the cleaned folder has no timestamp.txt to tell it the HTML is stale.
    args = ["generate_feedback", ASSIGNMENT, "--student", student, "--force",
            f"--CourseDirectory.autograded_directory={FEEDBACK_SOURCE}"]
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=nbgrader_env(),
                          capture_output=True, text=True)
    generated = course / "feedback" / student / ASSIGNMENT / Path(NOTEBOOK).with_suffix(".html")
    if done.returncode != 0 or not generated.is_file():
        raise FeedbackError(f"nbgrader generate_feedback failed for {student!r}:\n{done.stdout}\n{done.stderr}")
    found = leaks(generated.read_text(), secrets)
    if found:  # checked before the copy, so out_dir, which goes to students, never holds a leaking file
        generated.unlink()  # nor nbgrader's feedback folder, which `nbgrader release_feedback` hands out
        raise FeedbackError(f"feedback for {student!r} ({generated}) still shows: {', '.join(found)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{student}.html"
    shutil.copy(generated, target)
    return target
