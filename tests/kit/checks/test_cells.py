"""The notebook's visible test cells (`specdec_kit.checks.run_test`) as students see them: a passing cell prints what
it checked; a failing one shows the student's frames only, in a few lines, and where a decode's rounds differ from
correct decoding's it draws them; a decode that never ends says what its last round returned. The cells run in an
in-process IPython shell (tests/shell.py), which formats tracebacks as a kernel does.

Example run: python -m pytest tests/kit/checks/test_cells.py -q
"""

import re

import nbformat
import pytest

from specdec_course.selftest.catalogue import Entry, load_catalogue, make_submission
from specdec_kit import checks
from specdec_kit.checks.cells import CHECKED
from specdec_kit.protocol.adapters import load_decoder_classes

from conftest import REPO, SOLUTION
from shell import shell

MAX_LINES = 25  # a failing visible check's printed failure, at most
ENTRIES = {entry.name: entry for entry in load_catalogue(REPO / "autograder")}
# A verifier with no bonus token that also returns none in a round without drafts: the loop never ends.
STUCK = Entry("stuck", "no target token after a full acceptance, also with no drafts", edits=(
    ("    return draft_tokens[:, :n_accepted], n_accepted, predicted[:, n_accepted:n_accepted + 1]\n",
     "    token = predicted[:, n_accepted:n_accepted + 1] if n_accepted < k else predicted[:, :0]\n"
     "    return draft_tokens[:, :n_accepted], n_accepted, token\n"),
    ("            if emitted[-1] in eos_ids:\n", "            if emitted and emitted[-1] in eos_ids:\n")))
# The off-by-one as a student's own loop meets it: the verifier's slice starts at L, and a round that emits nothing
# is let through, so the decode never ends (the catalogue's loop raises IndexError on it instead).
LATE_SLICE = Entry("late_slice", "draft i compared with the logit at L+i, in a loop that lets an empty round through",
                   edits=(*ENTRIES["off_by_one_late"].edits, STUCK.edits[1]))
LATE_WORDS = "A slice that starts one position late, at L instead of L-1, has only k rows, none at all when k = 0"


def run_cells(entry: Entry, tests: set[str]) -> dict:
    """The entry's notebook as handed in, run up to its Part 1 and 2 tests: every cell but the demos and the test
    cells not in `tests`."""
    def skip(cell):
        test = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        return "demo" in cell.metadata.get("tags", []) or (test.startswith("test_") and test not in tests)

    with shell() as run:
        return run(make_submission(SOLUTION, entry), skip)


def test_every_visible_test_cell_runs_its_check_through_run_test():
    notebook = nbformat.read(SOLUTION, as_version=4)
    tests = {cell.metadata["nbgrader"]["grade_id"]: cell.source for cell in notebook.cells
             if cell.metadata.get("nbgrader", {}).get("grade", False) and cell.cell_type == "code"}
    timed = {"test_speedup"}  # prints its own plan and measurement
    assert set(CHECKED) == set(tests) - timed, f"CHECKED should word every visible test: {sorted(tests)}"
    missing = [t for t, source in tests.items() if t not in timed and f'checks.run_test("{t}", checks.' not in source]
    assert not missing, f"these test cells should run their visible check through checks.run_test: {missing}"


def test_passing_cells_print_one_line_saying_what_they_checked():
    outputs = run_cells(Entry("solution", ""), {"test_loading", "test_correction_and_bonus"})
    for test in ("test_loading", "test_correction_and_bonus"):
        lines = outputs[test].printed.splitlines()
        expected = rf"{test} passed: {re.escape(CHECKED[test])} \(\d+ [^)]+\)"
        assert len(lines) == 1 and re.fullmatch(expected, lines[0]), \
            f"{test} should print one line, what it checked and what it ran: {lines}"
        assert not outputs[test].ename, f"{test} passes on the solution"


@pytest.mark.parametrize("name,test", [("off_by_one_late", "test_verify_alignment"),
                                       ("no_bonus_token", "test_correction_and_bonus")])
def test_a_catalogued_bugs_failure_shows_the_students_frames_in_a_few_lines(name, test):
    entry = ENTRIES[name]
    found = run_cells(entry, {test})[test]
    lines, text = found.error_lines(), "\n".join(found.error_lines())
    assert found.ename == "CheckFailed" and entry.message in text, f"{name}: {test} fails naming the bug:\n{text}"
    assert len(lines) <= MAX_LINES, f"{name}: the failure takes {len(lines)} lines, at most {MAX_LINES}:\n{text}"
    assert "folded away]" in text and not [line for line in lines if line.startswith("File ")], \
        f"{name}: the kit's and torch's frames (IPython's `File ...` frames) fold into one line:\n{text}"
    if name == "no_bonus_token":
        assert "got [] (shape [1, 0])" in text, f"the bonus message says what came back:\n{text}"


@pytest.mark.parametrize("name,test", [("no_bonus_token", "test_counts"), ("off_by_one_early", "test_eos_and_budget")])
def test_a_catalogued_bugs_failing_decode_draws_its_rounds_above_correct_decodings(name, test):
    """The decode's rounds over the expected ones, the first that differs marked and named (the missing bonus token
    as such)."""
    found = run_cells(ENTRIES[name], {test})[test]
    assert found.ename == "CheckFailed" and len(found.error_lines()) <= MAX_LINES, found.error_lines()
    [drawn] = found.displays
    html, text = drawn["text/html"], drawn["text/plain"]
    assert html.count("<tr class='round yours sd-first'>") == 1 and f"{test}, " in html, html[-800:]
    assert re.search(r"first difference: round \d+: .* where correct decoding ", text), \
        f"the plain text names the first round that differs:\n{text}"
    if name == "no_bonus_token":
        assert re.search(r"adds nothing where correct decoding .*a bonus token", text), text


def test_a_decode_that_never_ends_says_what_its_last_round_returned():
    found = run_cells(STUCK, {"test_exact"})["test_exact"]
    lines, text = found.error_lines(), "\n".join(found.error_lines())
    assert found.ename == "NoProgress" and len(lines) <= MAX_LINES, f"{len(lines)} lines:\n{text}"
    assert "next_token of shape (1, 0) in a round with 0 drafts" in text and "the text stopped growing" in text, text
    assert "target_model(" not in text, f"no frame at the target forward the kit stopped it at:\n{text}"


def test_the_late_slice_that_never_ends_names_the_slice_and_draws_the_rounds_it_completed():
    """The three tests that decode: each stops the decode, says the verifier returned nothing and why, and draws the
    rounds before it stopped over correct decoding's (test_exact's from the answers the release recorded)."""
    tests = ("test_exact", "test_eos_and_budget", "test_counts")
    found = run_cells(LATE_SLICE, set(tests))
    for test in tests:
        lines = found[test].error_lines()
        assert found[test].ename == "NoProgress" and LATE_WORDS in "\n".join(lines) and len(lines) <= MAX_LINES, \
            f"{test} should name the verifier's slice:\n" + "\n".join(lines)
        [drawn] = found[test].displays
        assert "the rounds it completed before it failed" in drawn["text/plain"] and re.search(
            r"first difference: round 0: .* accepts 0 .* where correct decoding ", drawn["text/plain"]), \
            f"{test} draws the rounds it completed:\n{drawn['text/plain']}"


def test_the_catalogued_late_slice_says_why_its_own_loop_failed():
    """The catalogue's loop reads the last token of an empty round and raises IndexError: its traceback shows that
    line of the student's code, and the kit's note says what the verifier returned and why."""
    found = run_cells(ENTRIES["off_by_one_late"], {"test_eos_and_budget"})["test_eos_and_budget"]
    text = "\n".join(found.error_lines())
    assert found.ename == "IndexError" and "emitted[-1]" in text and LATE_WORDS in text, text
    assert "next_token of shape (1, 0) in a round with 0 drafts" in text and found.displays, text


def test_only_the_test_cell_draws(tmp_path, capsys, monkeypatch):
    """Outside IPython run_test prints the rounds as text; a hidden check, called as grading calls it, draws none."""
    path = tmp_path / "bug.ipynb"
    nbformat.write(make_submission(SOLUTION, ENTRIES["no_bonus_token"]), path)
    bug = load_decoder_classes(path, ("SpeculativeDecoder",))["SpeculativeDecoder"]
    with pytest.raises(checks.CheckFailed) as raised:
        checks.run_test("test_counts", checks.check_counts, bug)
    printed = capsys.readouterr().out
    assert "first difference: round" in printed and "> round" in printed, f"the rounds as text:\n{printed}"
    monkeypatch.syspath_prepend(str(REPO))  # the hidden checks, importable as grading makes them
    from autograder import hidden

    with pytest.raises(checks.CheckFailed) as hidden_failure:
        hidden.check_counts(bug)
    assert capsys.readouterr().out == "", "a hidden check prints and draws nothing"
    assert str(raised.value) and str(hidden_failure.value) != str(raised.value), "the hidden case is another one"
