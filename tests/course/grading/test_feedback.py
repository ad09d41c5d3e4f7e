"""Feedback pages from nbgrader's own generate_feedback show each verdict and the student's own frames, never a
hidden check, a grader path or the staff's notes.

One throwaway course is shared by the module: a released notebook (answer, locked test, report graded by hand, a
bonus test worth extra credit), students' autograded notebooks as the kit writes them (row.py's summary and
verdicts), their gradebook rows set through nbgrader's API, and a fake autograder folder whose hidden.py a student
printed. The pages come from the `nbgrader generate_feedback` command.

Example run: python -m pytest tests/course/grading/test_feedback.py -q
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from nbgrader.api import Gradebook

from specdec_course.core.nbgrader_course import (
    ASSIGNMENT,
    BEGIN_HIDDEN,
    END_HIDDEN,
    FORBIDDEN_TEXT,
    NOTEBOOK,
    nbgrader_env,
    write_course_config,
)
from specdec_course.grading import feedback, safe_html, verdict
from specdec_course.grading.feedback import (
    NOT_ATTEMPTED,
    PENDING,
    SCRUBBED,
    clean_for_feedback,
    feedback_config,
    generate_feedback,
    kit_total,
    summary_for_page,
)
from specdec_course.grading.leaks import grader_secrets, hidden_lines, leaks, strings
from specdec_course.grading.row import Grade, summary, verdict_output

from conftest import REPO, image_widths, needs_chromium, pixels_of_colour, screenshot, title_after_scripts
from corpora import HOSTILE_MARKDOWN, PLOT_WIDTH, READER_MARKER, hostile_outputs

# nbgrader's gradebook API warns about objects "not in session" on every new submission: noise (TOOLCHAIN.md).
pytestmark = pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")
NBGRADER_TIMEOUT = 120  # a hung nbgrader fails the test instead of stalling the suite
NOTEBOOK_ID = Path(NOTEBOOK).stem
TEST_POINTS, REPORT_POINTS, BONUS_CREDIT = 5, 10, 2
MESSAGE = "add(1, 2) must be 3, got -1"
# The verdict on a method left as released, as verdict.failure_message words it (its traceback after).
STUB = "add_many raised NotImplementedError (not written yet)"
STUB_FAILURE = f'{STUB}\n  File "<submission adder>", line 3, in add_many\n    raise NotImplementedError()'
LEFT_AS_RELEASED = verdict.TestResult(False, STUB_FAILURE)
OPENING = "Auto-graded by the kit:"  # how the summary on top of every page begins
STAFF_NOTE = "static scan flag: the answer cell opens files outside the notebook"
# The fake hidden.py: the lines a page must never show, then lines students may see or that are too plain to count.
HIDDEN = [
    '"""Fake hidden checks of the feedback tests: a page that shows these lines is withheld."""',
    'SECRET_CASES = ("the quartermaster counts seventeen lanterns", 40, 2)',
    "def check_add_hidden(add):",
    'assert add(40, 2) == 42, "the hidden sum of forty and two went wrong"',
]
PUBLIC_ASSERT = 'assert add(1, 2) == 3, "add(1, 2) must be 3"'  # the visible test, in the release
NOT_HIDDEN = [
    "from specdec_kit import checks",  # an import students write themselves
    "# a comment that is long enough to count as a line",
    'ASSIGNMENT = "speculative_decoding"',  # in the public package (release.py)
    PUBLIC_ASSERT,
    'return "too short"',
]
HIDDEN_PY = "\n".join([HIDDEN[0], "", NOT_HIDDEN[0], NOT_HIDDEN[1], HIDDEN[1], NOT_HIDDEN[2], "", "",
                       HIDDEN[2], f"    {HIDDEN[3]}", f"    {PUBLIC_ASSERT}", f"    {NOT_HIDDEN[4]}", ""])


def nbgrader_meta(**nbgrader) -> dict:
    return {"nbgrader": {"schema_version": 3, **nbgrader}}


def source_notebook() -> nbformat.NotebookNode:
    """What the kit's grading course holds as its source: a student release (no solutions, no hidden tests)."""
    return new_notebook(cells=[
        new_markdown_cell("# Adding numbers"),
        new_code_cell("def add(a, b):\n    # YOUR CODE HERE\n    raise NotImplementedError()",
                      metadata=nbgrader_meta(grade=False, solution=True, locked=False, grade_id="add")),
        new_code_cell(f'"""Check that add sums two numbers"""\n{PUBLIC_ASSERT}',
                      metadata=nbgrader_meta(grade=True, solution=False, locked=True, grade_id="test_add",
                                             points=TEST_POINTS)),
        new_markdown_cell("Explain how `add` works.",
                          metadata=nbgrader_meta(grade=True, solution=True, locked=False, grade_id="report",
                                                 points=REPORT_POINTS)),
        new_code_cell('"""Check that add_many sums a list (bonus)"""\nassert add_many([1, 2, 3]) == 6',
                      metadata={**nbgrader_meta(grade=True, solution=False, locked=True, grade_id="test_bonus",
                                                points=0), "specdec": {"extra_credit": BONUS_CREDIT}}),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})


def write_grader(root: Path, release: nbformat.NotebookNode) -> Path:
    """The instructors' side: autograder/ (the fake hidden.py, a config) next to assignment/ (the release)."""
    autograder = root / "autograder"
    autograder.mkdir(parents=True)
    (autograder / "hidden.py").write_text(HIDDEN_PY)
    (autograder / "config.toml").write_text("[limits]\ncheck_seconds = 60  # any one check, in seconds\n")
    (root / "assignment").mkdir()
    nbformat.write(release, root / "assignment" / NOTEBOOK)
    return autograder


def kernel_error(autograder: Path) -> nbformat.NotebookNode:
    """A failure as IPython records it: the test cell, a frame in a hidden file, the student's own frame."""
    return new_output("error", ename="CheckFailed", evalue=f"{MESSAGE} (checked by {autograder}/hidden.py)",
                      traceback=[
        "\x1b[0;31mCheckFailed\x1b[0m                               Traceback (most recent call last)",
        f"Cell \x1b[0;32mIn[2], line 3\x1b[0m\n      1 {BEGIN_HIDDEN}\n----> 3 check_add_hidden(add)",
        f"File \x1b[0;32m{autograder}/hidden.py:9\x1b[0m, in \x1b[0;36mcheck_add_hidden\x1b[0;34m()\x1b[0m\n"
        f"----> 9     {HIDDEN[3]}",
        "Cell \x1b[0;32mIn[1], line 2\x1b[0m, in \x1b[0;36madd\x1b[0;34m(a, b)\x1b[0m\n----> 2 return a - b",
        f"\x1b[0;31mCheckFailed\x1b[0m: {MESSAGE}",
    ])


def rounds_picture() -> nbformat.NotebookNode:
    """What a failing visible check draws in its test cell (`checks.run_test`): a decode's rounds, here correct
    decoding's on the scripted pair with one bonus token dropped, over correct decoding's."""
    import copy

    from specdec_kit import zoo
    from specdec_kit.checks.answers import answers_or_recorded
    from specdec_kit.models.baseline import prompt_for_token, zoo_tokenizer
    from specdec_kit.rounds.expected import scripted_rounds
    from specdec_kit.rounds.view import compare, compare_text

    start = zoo.scripted_script().cycle[10]
    tokenizer = zoo_tokenizer()
    expected = scripted_rounds(tokenizer(prompt_for_token(start)).input_ids,
                               answers_or_recorded(None).rounds(start, 4, 24), 24, tokenizer.decode)
    yours = copy.deepcopy(expected)
    next(r for r in yours.rounds if r.bonus).target_token = None
    title = "test_counts, a prompt (k=4, max_tokens=24): your rounds, each above correct decoding's"
    return new_output("display_data", data={"text/html": compare(yours, expected, title),
                                            "text/plain": compare_text(yours, expected, title)})


def with_hostile_cells(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """`notebook` with markdown in its report and outputs in a cell of its own that would run scripts in the page
    (tests/corpora.py), and a plot."""
    report = next(i for i, c in enumerate(notebook.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "report")
    notebook.cells[report].source += f"\n\n{HOSTILE_MARKDOWN}"
    notebook.cells.insert(report, new_code_cell("show()", execution_count=4, outputs=hostile_outputs()))
    return notebook


def passed() -> nbformat.NotebookNode:
    return new_output("stream", name="stdout", text=f"The kit's grading of test_add: passed ({TEST_POINTS} points)\n")


def role_cell(role: str, text: str) -> nbformat.NotebookNode:
    return new_markdown_cell(text, metadata={"specdec": {"role": role}})


def verdict_summary(add: verdict.TestResult, bonus: verdict.TestResult) -> str:
    """row.py's summary cell for the two tests' verdicts."""
    judged = verdict.Verdict({"test_add": add, "test_bonus": bonus})
    score = TEST_POINTS if add.passed else 0
    grade = Grade("x", "graded", score=score, max_score=TEST_POINTS, extra_credit=BONUS_CREDIT if bonus.passed else 0)
    return summary(judged, {"test_add": TEST_POINTS, "test_bonus": BONUS_CREDIT}, grade, "")


def autograded_notebook(release: nbformat.NotebookNode, answer: str, test_output, extra_cells=(), before=(),
                        bonus: verdict.TestResult = LEFT_AS_RELEASED):
    """The notebook the kit writes to autograded/: verdict and staff cells on top, the verdict in each test cell.
    `test_output` is test_add's verdict (a passing one, or the kernel's error); the bonus is left as released."""
    notebook = nbformat.from_dict(release)
    intro, answer_cell, test_cell, report, bonus_cell = notebook.cells
    answer_cell.source, answer_cell.execution_count = answer, 1
    answer_cell.outputs = [new_output("stream", name="stderr",
                                      text=f"{sys.prefix}/lib/python3.11/site-packages/torch/x.py:3: UserWarning\n")]
    # Older courses left the hidden region in the test cell's source: it must be cut all the same.
    test_cell.source += f"\n{BEGIN_HIDDEN}\ncheck_add_hidden(add)\n{END_HIDDEN}"
    test_cell.execution_count, test_cell.outputs = 2, [*before, test_output]
    report.source = "I add the two numbers with `+`."
    bonus_cell.execution_count, bonus_cell.outputs = 3, [verdict_output("test_bonus", bonus, BONUS_CREDIT,
                                                                     extra=True)]
    add = verdict.TestResult(True) if test_output.output_type == "stream" else verdict.TestResult(False, MESSAGE)
    notebook.cells = [role_cell("verdict", verdict_summary(add, bonus)), role_cell("staff", STAFF_NOTE),
                      intro, answer_cell, *extra_cells, test_cell, report, bonus_cell]
    return notebook


def record_grades(course: Path, student: str, test_score: float, extra_credit: float = 0) -> None:
    """The gradebook rows the kit writes after autograde: the verdict's points in the test cell's auto_score, a
    bonus test's in its extra_credit."""
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        gradebook.update_or_create_student(student)
        gradebook.update_or_create_submission(ASSIGNMENT, student)
        grade = gradebook.find_grade("test_add", NOTEBOOK_ID, ASSIGNMENT, student)
        grade.auto_score, grade.needs_manual_grade = test_score, False
        bonus = gradebook.find_grade("test_bonus", NOTEBOOK_ID, ASSIGNMENT, student)
        bonus.auto_score, bonus.extra_credit, bonus.needs_manual_grade = 0.0, extra_credit, False
        gradebook.db.commit()


def grade_report(course: Path, student: str, score: float) -> None:
    """What formgrader does when a grader saves a manual score."""
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        grade = gradebook.find_grade("report", NOTEBOOK_ID, ASSIGNMENT, student)
        grade.manual_score, grade.needs_manual_grade = score, False
        gradebook.db.commit()


def nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=nbgrader_env(),
                          capture_output=True, text=True, timeout=NBGRADER_TIMEOUT)


def page_path(course: Path, student: str) -> Path:
    return course / "feedback" / student / ASSIGNMENT / Path(NOTEBOOK).with_suffix(".html")


def plain(page: str) -> str:
    """The page's text as a reader sees it: code is split into highlighting spans and escaped."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


@dataclass
class Course:
    root: Path
    grader: Path  # the folder holding autograder/ and assignment/
    run: subprocess.CompletedProcess  # the first `nbgrader generate_feedback` over every student
    pages: dict[str, str]  # student -> the HTML that run wrote (absent: none written)

    def describe(self) -> str:
        return f"nbgrader exit {self.run.returncode}, log tail:\n{(self.run.stdout + self.run.stderr)[-3000:]}"


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Course:
    """alice fails the test in her own code (her report and a cell of hers also hold what would run scripts) and leaves
    the bonus as released, bob's extra cell printed hidden.py, carol passes both; no report graded."""
    root = tmp_path_factory.mktemp("feedback")
    course, grader = root / "course", root / "grader"
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    write_course_config(course, *feedback_config(grader / "autograder", course))
    nbformat.write(source_notebook(), course / "source" / ASSIGNMENT / NOTEBOOK)
    done = nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")
    assert done.returncode == 0, f"nbgrader generate_assignment must succeed; got:\n{done.stdout}\n{done.stderr}"
    release = nbformat.read(course / "release" / ASSIGNMENT / NOTEBOOK, as_version=4)
    autograder = write_grader(grader, release)
    printed = new_code_cell("print(open('../../../../autograder/hidden.py').read())", execution_count=5,
                            outputs=[new_output("stream", name="stdout", text=HIDDEN_PY)])
    notebooks = {
        "alice": (with_hostile_cells(autograded_notebook(release, "def add(a, b):\n    return a - b",
                                                         kernel_error(autograder), before=[rounds_picture()])), 0),
        "bob": (autograded_notebook(release, "def add(a, b):\n    return a + b", passed(), [printed]), TEST_POINTS),
        "carol": (autograded_notebook(release, "def add(a, b):\n    return a + b", passed(),
                                      bonus=verdict.TestResult(True)), TEST_POINTS),
    }
    for student, (notebook, score) in notebooks.items():
        path = course / "autograded" / student / ASSIGNMENT / NOTEBOOK
        path.parent.mkdir(parents=True)
        nbformat.write(notebook, path)
        record_grades(course, student, score, BONUS_CREDIT if student == "carol" else 0)
    run = nbgrader(course, "generate_feedback", ASSIGNMENT, "--force")
    pages = {s: page_path(course, s).read_text() for s in notebooks if page_path(course, s).is_file()}
    return Course(course, grader, run, pages)


# ---------------------------------------------------------------------------------------------
# nbgrader's own generate_feedback, with the course's config


@pytest.mark.slow
def test_page_shows_verdict_and_students_frames(course):
    assert "alice" in course.pages, f"nbgrader must write alice's page; {course.describe()}"
    text = plain(course.pages["alice"])
    assert MESSAGE in text, f"the page must show the test cell's verdict {MESSAGE!r}"
    assert "Cell In[1], line 2, in add" in text and "return a - b" in text, \
        "the page must show the frame in the student's own cell, with the line that failed"
    assert f"{SCRUBBED}/lib/python3.11/site-packages/torch" in text, \
        "a grader path in an output must read <grader>, the rest of the line kept"
    assert "carol" in course.pages and passed().text in plain(course.pages["carol"]), \
        f"carol's page must show her test cell's verdict {passed().text!r}; {course.describe()}"
    drawn = re.search(r"<tr class=.round yours sd-first.>", course.pages["alice"])  # the page quotes attributes anew
    assert drawn and "first difference: round" in text, \
        "the rounds a failing visible check drew in its test cell must be on the page"


@pytest.mark.slow
def test_page_hides_what_students_must_not_see(course):
    page = course.pages["alice"]
    text = plain(page)
    forbidden = {"course path": str(course.root), "autograder path": str(course.grader), "sys.prefix": sys.prefix,
                 "raw traceback": "Traceback (most recent call last)", "staff note": STAFF_NOTE,
                 **{f"marker {marker!r}": marker for marker in FORBIDDEN_TEXT},
                 **{f"hidden line {i}": line for i, line in enumerate(HIDDEN)}}
    shown = [name for name, item in forbidden.items() if item in page or item in text]
    assert shown == [], f"alice's page must show none of these, yet shows {shown}"
    assert OPENING in text, "the kit's verdict cell must stay on the page"


@pytest.mark.slow
@needs_chromium
def test_page_runs_no_script_of_the_students_and_still_shows_her_plot_and_rounds(course, tmp_path):
    """alice's page, as nbgrader wrote it, in headless Chromium: none of her cells' scripts ran (each would have
    set the title), her plot decodes under the page's Content-Security-Policy, the round view keeps its colours."""
    page = tmp_path / "alice.html"
    page.write_text(course.pages["alice"])
    assert safe_html.unsafe(course.pages["alice"]) == [], "the page holds nothing outside the sanitiser's allow-list"
    assert READER_MARKER not in title_after_scripts(page), "a script of alice's ran in her page"
    assert PLOT_WIDTH in image_widths(page), f"alice's plot decodes: widths {image_widths(page)}"
    assert pixels_of_colour(screenshot(page), "#c8f0c8") >= 20, "the round view's accepted drafts keep their colour"


@pytest.mark.slow
def test_report_not_graded_yet_shows_pending(course):
    text = plain(course.pages["alice"])
    assert f"{PENDING} ({REPORT_POINTS} points)." in text, f"an ungraded report must read {PENDING!r} with its points"
    assert f"/ {REPORT_POINTS:.1f}" not in text, \
        f"an ungraded report must show no score out of {REPORT_POINTS:.1f} (nbgrader would print 0.0)"
    assert "I add the two numbers" in text, "the student's report text must stay"


@pytest.mark.slow
def test_report_graded_by_hand_shows_its_score(course):
    grade_report(course.root, "carol", 7)
    done = nbgrader(course.root, "generate_feedback", ASSIGNMENT, "--student", "carol", "--force")
    page = page_path(course.root, "carol")
    assert done.returncode == 0 and page.is_file(), f"nbgrader must write carol's page; got:\n{done.stderr[-3000:]}"
    text = plain(page.read_text())
    assert f"Score: 7.0 / {REPORT_POINTS:.1f}" in text, "a graded report must show its manual score, 7.0 / 10.0"
    assert PENDING not in text, f"a graded report must not read {PENDING!r}"


@pytest.mark.slow
def test_page_shows_one_total_the_kits_with_extra_credit_apart(course):
    """nbgrader's heading would count the report (pending) and the extra credit; it shows the summary's total."""
    alice, carol = plain(course.pages["alice"]), plain(course.pages["carol"])
    assert f"(Score: 0.0 / {TEST_POINTS:.1f})" in alice and f"{OPENING} 0 / {TEST_POINTS} points." in alice, \
        "alice's heading and summary must both give the required tests' total, 0 / 5"
    assert f"(Score: {TEST_POINTS:.1f} / {TEST_POINTS:.1f})" in carol, "carol's heading must leave her extra credit out"
    assert f"{OPENING} {TEST_POINTS} / {TEST_POINTS} points plus {BONUS_CREDIT} extra credit." in carol, \
        "carol's summary must give the same total and say her extra credit apart"
    totals = re.findall(r"\(Score: [\d.]+ / ([\d.]+)\)</h4>", course.pages["carol"])
    assert totals == [f"{TEST_POINTS:.1f}"], f"the page's one heading total is out of {TEST_POINTS}; got {totals}"


@pytest.mark.slow
def test_a_bonus_left_as_released_reads_not_attempted(course):
    alice, carol = plain(course.pages["alice"]), plain(course.pages["carol"])
    assert f"test_bonus (+{BONUS_CREDIT} extra credit): {NOT_ATTEMPTED}" in alice, \
        "alice's summary must say her bonus was not attempted, with what it is worth"
    assert f"The kit's grading of test_bonus: {NOT_ATTEMPTED}" in alice, "her bonus test cell must say so too"
    assert "failed (0 of" not in alice.split("test_bonus", 1)[1].split("test_add")[0] and \
        f"of {BONUS_CREDIT} points of extra credit)" not in alice, "no 'failed' verdict for a bonus left as released"
    assert f"test_bonus (+{BONUS_CREDIT} extra credit): passed" in carol, "carol's passed bonus reads passed"


@pytest.mark.slow
def test_page_that_would_show_hidden_source_is_not_written(course):
    assert "bob" not in course.pages, "bob's page quotes hidden.py: nbgrader must write none"
    log = course.run.stdout + course.run.stderr
    assert course.run.returncode != 0 and "FeedbackError" in log and "'bob'" in log, \
        f"nbgrader must fail bob's page with CleanFeedback's reason; {course.describe()}"
    assert "carol" in course.pages, f"carol's page, in the same run, must still be written; {course.describe()}"


# ---------------------------------------------------------------------------------------------
# The kit's generate_feedback


@pytest.mark.slow
def test_generate_feedback_copies_clean_pages_and_says_why_others_are_withheld(course, tmp_path):
    carol_page = page_path(course.root, "carol")
    carol_before = carol_page.stat().st_mtime_ns
    results = generate_feedback(course.root, tmp_path, ["alice", "bob"])
    assert results.keys() == {"alice", "bob"}, f"one result per student asked for; got {sorted(results)}"
    assert results["alice"] == "" and (tmp_path / "alice.html").is_file(), \
        f"alice's page must be copied out; got reason {results['alice']!r}"
    assert "would show" in results["bob"] and "check_add_hidden" in results["bob"], \
        f"bob's reason must name what his page would show; got {results['bob']!r}"
    assert not (tmp_path / "bob.html").exists(), "bob's page must not be copied out"
    assert carol_page.stat().st_mtime_ns == carol_before, "the page of a student not asked for must be left alone"


@pytest.mark.slow
def test_generate_feedback_deletes_a_page_that_leaks(course, tmp_path, monkeypatch):
    """A leak that only the HTML shows (here: a "secret" the page's verdict cell holds) withholds the page."""
    secrets, hidden = feedback._course_guards(course.root)
    monkeypatch.setattr(feedback, "_course_guards", lambda _: (secrets, [*hidden, OPENING]))
    results = generate_feedback(course.root, tmp_path, ["alice"])
    assert OPENING in results["alice"], \
        f"the reason must name what the page showed; got {results['alice']!r}"
    assert not (tmp_path / "alice.html").exists(), "a leaking page must not be copied out"
    assert not page_path(course.root, "alice").exists(), "a leaking page must be deleted from nbgrader's folder"


@pytest.mark.slow
def test_generate_feedback_names_a_student_with_no_notebook(course, tmp_path):
    reason = generate_feedback(course.root, tmp_path, ["nobody"])["nobody"]
    assert "autograde the submission first" in reason, f"a missing notebook must be named as such; got {reason!r}"


# ---------------------------------------------------------------------------------------------
# Pure units


def test_a_message_several_tests_failed_with_is_shown_once_naming_them():
    """row.py's summary lists each test; the page's lists each outcome once. A bonus that failed on code its student
    wrote stays failed, one left as released reads not attempted, and the notes stay as written."""
    hidden_case = "failed a hidden case: no answer for case 7 of 9"
    failed = {"test_exact": hidden_case, "test_cached_exact": hidden_case, "test_sampling": STUB,
              "test_lookup": "drafts must come from the prompt", "test_adaptive": STUB_FAILURE}
    tests = {test: verdict.TestResult(test not in failed, failed.get(test, "")) for test in
             ("test_exact", "test_counts", "test_cached_exact", "test_sampling", "test_lookup", "test_adaptive")}
    judged = verdict.Verdict(tests, not_run=["print(1)"])
    points = {"test_exact": 12, "test_counts": 8, "test_cached_exact": 8, "test_sampling": 5, "test_lookup": 3,
              "test_adaptive": 3}
    extra_credit = {"test_sampling": 5, "test_lookup": 3, "test_adaptive": 3}
    text = summary(judged, points, Grade("x", "graded", score=8, max_score=28, message="a note"), "")
    page = summary_for_page(text, (8, 28, 0), extra_credit)
    escaped = hidden_case.replace("_", "\\_")
    assert page.count(escaped) == 1 and f"- `test_exact` (12 points), `test_cached_exact` (8 points): failed: " \
        f"{escaped}" in page, f"the hidden-case message must be shown once, naming both tests; got\n{page}"
    assert f"- `test_sampling` (+5 extra credit), `test_adaptive` (+3 extra credit): {NOT_ATTEMPTED}" in page, \
        f"both bonuses left as released must share the not-attempted line; got\n{page}"
    assert "- `test_lookup` (+3 extra credit): failed: drafts must come from the prompt" in page, \
        f"a bonus whose code was written and failed stays failed; got\n{page}"
    assert page.startswith(f"**{OPENING} 8 / 28 points.**") and "Notes: a note" in page and "- print(1)" in page, \
        f"the opening total, the notes and the statements not run must stay; got\n{page}"


def test_kit_total_is_the_required_tests_with_extra_credit_apart():
    scores = {"test_add": (5.0, 5.0), "test_more": (0.0, 8.0), "report": (7.0, 10.0), "test_bonus": (2.0, 0.0)}
    total = kit_total(scores, ["test_add", "test_more"], {"test_bonus": 2.0})
    assert total == (5.0, 13.0, 2.0), f"the required tests' 5 / 13, the report left out, 2 extra credit; got {total}"


def test_cleaning_drops_staff_cell_hidden_region_and_other_frames(tmp_path):
    release = source_notebook()
    notebook = autograded_notebook(release, "def add(a, b):\n    return a - b", kernel_error(Path("/srv/ag")))
    cleaned = clean_for_feedback(notebook, ["/srv/ag"])
    roles = [c.metadata.get("specdec", {}).get("role") for c in cleaned.cells]
    assert roles.count("staff") == 0 and roles.count("verdict") == 1, f"only the staff cell must go; roles {roles}"
    test_cell = cleaned.cells[3]
    assert BEGIN_HIDDEN not in test_cell.source and PUBLIC_ASSERT in test_cell.source, \
        "the hidden region must be cut and the visible test kept"
    expected = ["Cell In[1], line 2, in add(a, b)\n----> 2 return a - b",
                f"CheckFailed: {MESSAGE} (checked by <grader>/hidden.py)"]
    assert test_cell.outputs[0].traceback == expected, \
        f"a traceback must keep the student's frames and its last line, paths scrubbed; got {test_cell.outputs[0]}"
    assert notebook.cells[1].metadata["specdec"]["role"] == "staff", "cleaning must work on a copy"


def test_a_failing_visible_checks_rounds_stay_and_leak_nothing(tmp_path):
    """The rounds a visible check drew pass the cleaning as they are, and the course's real guards (its autograder
    folder's hidden lines, the grader's paths) find nothing in them, so the page is written."""
    picture = rounds_picture()
    notebook = autograded_notebook(source_notebook(), "def add(a, b):\n    return a - b",
                                   kernel_error(Path("/srv/ag")), before=[picture])
    secrets = grader_secrets(tmp_path / "course", REPO / "autograder")
    cleaned = clean_for_feedback(notebook, secrets)
    kept = [o for c in cleaned.cells for o in c.get("outputs", []) if o.output_type == "display_data"]
    assert kept == [picture], "the drawn rounds must stay on the page unchanged"
    assert leaks("\n".join(strings(picture)), secrets, hidden_lines(REPO / "autograder")) == [], \
        "the drawn rounds show nothing of the grader's"


def test_config_runs_clean_feedback_after_nbgraders_preprocessors():
    lines = feedback_config(Path("/srv/ag"), Path("/srv/course"))
    text = "\n".join(lines)
    assert text.index("GetGrades") < text.index("CSSHTMLHeaderPreprocessor") < text.index(".CleanFeedback'"), \
        f"CleanFeedback must run last, after GetGrades and the CSS header; got\n{text}"
    assert "c.CleanFeedback.autograder_dir = '/srv/ag'" in lines and "c.CleanFeedback.course_root = '/srv/course'" \
        in lines, f"the config must set both traits; got\n{text}"
