"""A row's scores come from the course's release and the kit's verdict, never from what a submission says about
itself (`specdec_course.grading.row.student_scores`).

Example run: python -m pytest tests/course/grading/test_row.py -q
"""

import copy

import nbformat

from specdec_course.grading.row import student_scores

from conftest import REPO

RELEASE = nbformat.read(REPO / "assignment" / "speculative_decoding.ipynb", as_version=4)
TESTS = {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"]) for c in RELEASE.cells
         if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")}


def cell(notebook: nbformat.NotebookNode, grade_id: str) -> nbformat.NotebookNode:
    return next(c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def test_edited_grading_metadata_earns_nothing():
    """Points of a test cell raised, the hand-graded report turned into a test cell worth 100, with no error."""
    forged = copy.deepcopy(RELEASE)
    cell(forged, "test_exact").metadata["nbgrader"]["points"] = 1000
    report = cell(forged, "report")
    report.cell_type, report.outputs, report.execution_count = "code", [], 1
    report.metadata["nbgrader"].update(grade=True, solution=False, points=100)
    report.source = "print('all good')"
    failed = dict.fromkeys(TESTS, 0.0)  # the verdict: nothing passed
    scores = student_scores(forged, failed, RELEASE, before={})
    assert all(scores[test][0] == 0.0 for test in TESTS), f"a test cell scores what the verdict gave it: {scores}"
    auto, manual, needs_person = scores["report"]
    assert auto is None and needs_person, f"the written report waits for a person, whatever its metadata: {auto}"
    assert set(scores) == {c.metadata["nbgrader"]["grade_id"] for c in RELEASE.cells
                           if c.metadata.get("nbgrader", {}).get("grade")}, "only the release's graded cells"


def test_untouched_report_scores_zero():
    scores = student_scores(copy.deepcopy(RELEASE), dict.fromkeys(TESTS, 0.0), RELEASE, before={})
    assert scores["report"][0] == 0.0, f"a report left as handed out scores 0, as nbgrader has it: {scores['report']}"


def ran(notebook: nbformat.NotebookNode, grade_id: str, *outputs) -> None:
    test = cell(notebook, grade_id)
    test.execution_count, test.outputs = 1, list(outputs)


def test_a_library_warning_on_stderr_is_no_failure_of_the_notebooks_own_run(tmp_path):
    """nbgrader scores a test cell that wrote to stderr as failed; the kit reads the notebook's own run by its errors,
    so a passing cell that a library warned in gets no note, and a cell that raised still does."""
    from specdec_course.grading.notebook_run import NotebookRun
    from specdec_course.grading.row import _disagreements
    from specdec_course.grading.verdict import TestResult, Verdict

    autograded = copy.deepcopy(RELEASE)
    ran(autograded, "test_exact", nbformat.v4.new_output("stream", name="stderr",
                                                         text="FutureWarning: `past_key_values` is deprecated\n"))
    ran(autograded, "test_counts", nbformat.v4.new_output("error", ename="CheckFailed", evalue="", traceback=[]))
    judged = Verdict({test: TestResult(True, visible_passed=True) for test in TESTS})
    run = NotebookRun(tmp_path, "amy", None, tmp_path, record={"finished": True})
    notes = _disagreements(judged, autograded, TESTS, run)
    assert notes == ["test_counts: the notebook's own run failed its visible check, the kit's grading passed it; "
                     "the kit's verdict stands"], notes


def test_the_verdict_beneath_a_test_cell_says_it_is_the_kits_grading():
    """Beneath the notebook's own run of a visible check (which may have failed with the same words), the kit's
    verdict names itself and the points, passed or failed."""
    from specdec_course.grading.row import verdict_output
    from specdec_course.grading.verdict import TestResult

    failed = verdict_output("test_counts", TestResult(False, "10 target forward passes"), 8)
    assert f"{failed.ename}: {failed.evalue}" == failed.traceback[0] \
        == "The kit's grading of test_counts: failed (0 of 8 points): 10 target forward passes", failed
    passed = verdict_output("test_exact", TestResult(True), 12)
    assert passed.text == "The kit's grading of test_exact: passed (12 points)\n", passed
    bonus = verdict_output("test_lookup", TestResult(True), 5, extra=True)
    assert bonus.text == "The kit's grading of test_lookup: passed (5 points of extra credit)\n", bonus
