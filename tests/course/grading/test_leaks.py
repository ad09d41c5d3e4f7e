"""What a student's page must not show (`specdec_course.grading.leaks`): the markers, a grader path, a line of the
instructors' autograder files in any form it may be printed in, while the student's own output stays theirs.

Example run: python -m pytest tests/course/grading/test_leaks.py -q
"""

import base64
import sys

import pytest

from course.grading.test_feedback import HIDDEN, NOT_HIDDEN, source_notebook, write_grader
from specdec_course.grading.leaks import FeedbackError, grader_secrets, hidden_lines, leaks


def test_leaks_sees_through_html_escaping_and_highlighting():
    page = ('<span class="n">check_add_hidden</span><span class="p">(</span>add<span class="p">):</span> '
            'File &quot;<span class="ansi-green-fg">/opt/x.py</span>&quot;, line 3 '
            '<span class="kn">from</span> <span class="nn">autograder</span>')
    assert leaks(page, [], ["def check_add_hidden(add):", "check_add_hidden(add):"]) == \
        ["from autograder", "check_add_hidden(add):"], "leaks must find the marker and the hidden line in its text"
    line = r"""note = "it's " + "\n".join(cases)"""
    shown = r"""'note = "it\'s " + "\\n".join(cases)\n'"""  # the file's text as an expression cell shows it
    assert leaks(shown, [], [line]) == [line], "leaks must find a hidden line inside the repr of the file's text"


@pytest.mark.parametrize("prefix", ["", "x", "xy"])
def test_leaks_sees_hidden_lines_encoded(prefix):
    """The hidden file printed as hex or base64, the line anywhere in it (base64's three alignments)."""
    line = "def check_add_hidden(add, cases=HIDDEN_CASES):"
    text = f"{prefix}# hidden checks\n{line}\n    return add(2, 3) == 5\n".encode()
    for shown in (text.hex(), base64.b64encode(text).decode()):
        assert leaks(f"output: {shown}", [], [line]) == [line], f"{shown[:40]}... holds the hidden line encoded"


def test_students_own_warnings_are_not_leaks():
    """A library's warning with its file and frames (torch.compile prints such), paths scrubbed: shown, not withheld."""
    warning = ('<grader>/lib/python3.11/site-packages/torch/_dynamo/convert_frame.py:1016: UserWarning: '
               'recompile limit reached\n  File "<grader>/lib/python3.11/site-packages/torch/nn/modules/module.py", '
               'line 1751, in _call_impl\nTraceback (most recent call last):\n')
    assert leaks(warning, ["/srv/grader"], ["def check_add_hidden(add):"]) == [], \
        "a student's own output (a library's warning, a traceback they printed) is theirs to see"


def test_hidden_lines_skip_short_import_comment_and_public_lines(tmp_path):
    autograder = write_grader(tmp_path, source_notebook())
    lines = hidden_lines(autograder)
    assert sorted(HIDDEN) == sorted(line for line in lines if "check_seconds" not in line), \
        f"hidden lines must be the fake hidden.py's long, private lines; got {lines}"
    assert "check_seconds = 60  # any one check, in seconds" in lines, "*.toml lines count too"
    assert not set(NOT_HIDDEN) & set(lines), "short, import, comment and public lines must not count"


def test_hidden_lines_need_the_release(tmp_path):
    (tmp_path / "autograder").mkdir()
    with pytest.raises(FeedbackError, match="no student release"):
        hidden_lines(tmp_path / "autograder")


def test_grader_secrets_are_resolved_and_longest_first(tmp_path):
    real = tmp_path / "real"
    (real / "autograder").mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    secrets = grader_secrets(tmp_path / "course", tmp_path / "link" / "autograder")
    assert {str(tmp_path / "link" / "autograder"), str(real / "autograder"), sys.prefix} <= set(secrets), \
        f"secrets must hold the autograder folder as given and resolved, and sys.prefix; got {secrets}"
    assert [len(s) for s in secrets] == sorted((len(s) for s in secrets), reverse=True), \
        f"secrets must be longest first, so no prefix is replaced before its longer path; got {secrets}"
