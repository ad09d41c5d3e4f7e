"""Student feedback shows the visible tests and each failure's message, never a hidden test or a grader path.

Example run: python -m pytest tests/test_feedback.py -q
"""

import html
import re

import nbformat
import pytest

from specdec_kit import grading
from specdec_kit.feedback import FeedbackError, clean_for_feedback, grader_secrets, leaks, write_feedback
from specdec_kit.release import ASSIGNMENT, BEGIN_HIDDEN, NOTEBOOK, source_notebook

from conftest import REPO, SOLUTION

FAKE_SECRETS = ["/srv/grader/autograder", "/srv/grader/venv", "/srv/grader"]  # longest first, as grader_secrets
MESSAGE = "greedy speculative output must equal target-only greedy output; first mismatch at position 7"


def _cell(notebook, grade_id):
    return next(c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


@pytest.fixture
def failed_notebook():
    """The solution notebook with a hidden check's failure in `test_exact`, as nbgrader's kernel records it."""
    notebook = nbformat.reads(source_notebook(SOLUTION), as_version=4)
    _cell(notebook, "speculative_decoder").execution_count = 5
    cell = _cell(notebook, "test_exact")
    cell.execution_count = 12
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stderr",
                               text="/srv/grader/venv/lib/python3.11/site-packages/torch/x.py:3: UserWarning: w\n"),
        nbformat.v4.new_output("execute_result", data={"text/plain": "'/srv/grader/autograder'",
                                                       "text/html": "<b>/srv/grader/autograder</b>"},
                               execution_count=12),
        nbformat.v4.new_output("error", ename="CheckFailed", evalue=f"{MESSAGE} (/srv/grader/autograder/hidden.py)",
                               traceback=[
            "\x1b[0;31mCheckFailed\x1b[0m                               Traceback (most recent call last)",
            "Cell \x1b[0;32mIn[12], line 7\x1b[0m\n      5 " + BEGIN_HIDDEN + "\n      6 from autograder import hidden"
            "\n----> 7 hidden.check_exact(SpeculativeDecoder)",
            "File \x1b[0;32m/srv/grader/autograder/hidden.py:33\x1b[0m, in \x1b[0;36mcheck_exact\x1b[0;34m()\x1b[0m\n"
            '---> 33     checks.check_exact(decoder_class, pair="tiny-b")',
            'File "/srv/grader/venv/lib/python3.11/site-packages/specdec_kit/checks.py", line 80, in check_exact',
            "Cell \x1b[0;32mIn[5], line 120\x1b[0m, in SpeculativeDecoder.speculative_decode\n"
            "----> 120 raise RuntimeError('student code')",
            f"\x1b[0;31mCheckFailed\x1b[0m: {MESSAGE}",
        ]),
    ]
    return notebook


def test_cleaning_removes_hidden_tests_frames_and_paths(failed_notebook):
    raw = nbformat.writes(failed_notebook)
    assert BEGIN_HIDDEN in raw and "/srv/grader" in raw, "the uncleaned notebook must hold what cleaning removes"
    cleaned = clean_for_feedback(failed_notebook, FAKE_SECRETS)
    found = leaks(nbformat.writes(cleaned), FAKE_SECRETS)
    assert found == [], f"the cleaned notebook still shows {found}"
    assert BEGIN_HIDDEN in nbformat.writes(failed_notebook), "cleaning must work on a copy"
    cell = _cell(cleaned, "test_exact")
    assert "checks.check_exact(SpeculativeDecoder)" in cell.source, "the visible test call must stay"
    error = cell.outputs[2]
    assert error.traceback == ["Cell In[5], line 120, in SpeculativeDecoder.speculative_decode\n"
                               "----> 120 raise RuntimeError('student code')",
                               f"CheckFailed: {MESSAGE} (<grader>/hidden.py)"], \
        f"a traceback must keep the student's own frames and the error line, paths scrubbed; got {error.traceback}"
    assert cell.outputs[0].text.startswith("<grader>/lib/python3.11/"), \
        f"the longest secret must be replaced before its prefix; got {cell.outputs[0].text!r}"
    assert cell.outputs[1].data["text/html"] == "<b><grader></b>"


def test_leaks_sees_through_html_escaping_and_highlighting():
    page = ('<span class="kn">from</span> <span class="nn">autograder</span> '
            'File &quot;<span class="ansi-green-fg">/opt/x.py</span>&quot;, line 3')
    assert leaks(page, []) == ["from autograder", """traceback frame 'File "/'"""]
    assert leaks("File &lt;grader&gt;/hidden.py", []) == ["traceback frame 'File <grader>'"]
    assert leaks("all 6 tests passed", ["/srv/grader"]) == []


def test_grader_secrets_are_resolved_and_longest_first(tmp_path):
    real = tmp_path / "real"
    (real / "autograder").mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    secrets = grader_secrets(tmp_path / "course", tmp_path / "link" / "autograder")
    assert str(tmp_path / "link" / "autograder") in secrets and str(real / "autograder") in secrets
    assert [len(s) for s in secrets] == sorted((len(s) for s in secrets), reverse=True)


@pytest.fixture(scope="module")
def graded_blank(tmp_path_factory):
    """A course in which nbgrader has autograded the blank release: every stub raises NotImplementedError."""
    course = tmp_path_factory.mktemp("feedback") / "course"
    grading.prepare_course(course, SOLUTION)
    result = grading.grade(course, grading.Submission("blank", REPO / "assignment" / NOTEBOOK), REPO, timeout=600)
    assert result.status == "graded", f"autograding the blank release failed: {result.message}"
    return course, grader_secrets(course, REPO / "autograder")


def test_autograded_notebook_shows_hidden_tests(graded_blank):
    """nbgrader's own copy, rendered as is, would leak: the reason feedback is built from a cleaned copy."""
    course, secrets = graded_blank
    raw = (course / "autograded" / "blank" / ASSIGNMENT / NOTEBOOK).read_text()
    assert BEGIN_HIDDEN in raw, "nbgrader's autograded notebook should hold the hidden tests"
    assert leaks(raw, secrets), "leaks() must flag nbgrader's uncleaned notebook"


def test_feedback_shows_errors_but_no_hidden_tests(graded_blank, tmp_path):
    course, secrets = graded_blank
    page = write_feedback(course, "blank", tmp_path / "out", secrets)
    assert page == tmp_path / "out" / "blank.html" and page.is_file()
    text = page.read_text()
    plain = html.unescape(re.sub(r"<[^>]+>", "", text))  # code is split into syntax-highlighting spans
    assert "NotImplementedError" in plain, "feedback must tell the student that a stub is still missing"
    assert "checks.check_exact(SpeculativeDecoder)" in plain, "feedback must show the visible test calls"
    assert leaks(text, secrets) == []
    assert BEGIN_HIDDEN in (course / "autograded" / "blank" / ASSIGNMENT / NOTEBOOK).read_text(), \
        "the instructors' autograded copy must stay untouched"


def test_leaking_feedback_is_refused_and_removed(graded_blank, tmp_path):
    course, secrets = graded_blank
    # Source code is not scrubbed, so a "secret" that the test cells' code names survives cleaning.
    with pytest.raises(FeedbackError, match="still shows: SpeculativeDecoder"):
        write_feedback(course, "blank", tmp_path / "out", [*secrets, "SpeculativeDecoder"])
    assert not (tmp_path / "out" / "blank.html").exists()
    assert not (course / "feedback" / "blank" / ASSIGNMENT / "speculative_decoding.html").exists()


def test_missing_grade_reports_nbgraders_output(graded_blank, tmp_path):
    course, secrets = graded_blank
    ghost = course / "autograded" / "ghost" / ASSIGNMENT / NOTEBOOK  # a notebook the gradebook has no grade for
    ghost.parent.mkdir(parents=True)
    ghost.write_bytes((course / "autograded" / "blank" / ASSIGNMENT / NOTEBOOK).read_bytes())
    with pytest.raises(FeedbackError, match="generate_feedback failed for 'ghost'"):
        write_feedback(course, "ghost", tmp_path / "out", secrets)
    with pytest.raises(FeedbackError, match="run autograde first"):
        write_feedback(course, "nobody", tmp_path / "out", secrets)
