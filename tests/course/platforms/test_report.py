"""The class report: what the class got wrong (required tests' bugs ranked by the points they cost, each message once;
methods left unwritten apart; bonus parts as attempted / passed), near-identical code found through renamed
variables and new layout, an independent solution left alone, and a page that renders in headless Chromium with real
images and runs no student's script.

The graded folder is laid out by hand (grades.csv, done/ records, the course's source and submitted
notebooks), so no nbgrader run is needed.
"""

import html
import re
import shutil

import nbformat
import pytest

from specdec_course.core.nbgrader_course import ASSIGNMENT, NOTEBOOK
from specdec_course.grading import results, safe_html
from specdec_course.grading.collect import Submission
from specdec_course.grading.course import course_extra_credit, course_points, hand_graded_cells
from specdec_course.grading.row import Grade
from specdec_course.platforms import report
from specdec_course.platforms.similarity import similar_pairs

from conftest import REPO, image_widths, needs_chromium, screenshot, title_after_scripts
from corpora import blank, solved
from independent import independent

# What a student's code can put into a check's message, which the report lists among the class's failures.
HOSTILE = "<img src=x onerror=\"document.title='PWNED'\"><script>document.title='PWNED'</script>"
HIDDEN_CASE = "failed a hidden case: no answer for case {} of 9: its answer came with another case's number"
SAMPLING = "the accepted tokens' distribution differs from the target's (chi-square p=0.0001)"
LOOKUP_STUB, ADAPTIVE_STUB = (f"{method} raised NotImplementedError (not written yet)"
                              for method in ("generate_draft_tokens", "speculative_decode"))
BLANK = "__init__ raised NotImplementedError (not written yet)"  # the verdict's first line on the blank release
RENAMES = {"new_tokens": "generated", "draft_tokens": "proposal", "accepted_tokens": "kept", "n_accepted": "num_ok",
           "round_tokens": "step_out", "emitted": "fresh", "sequence": "joined", "logits": "scores", "cache": "kv",
           "held": "ids_held", "next_token": "nxt", "predicted": "argmaxes", "matches": "agree"}


def disguised(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The same solution with its variables renamed, two-space indents and comments added: a copy made to hide."""
    notebook = nbformat.from_dict(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            source = re.sub(r"\b(" + "|".join(RENAMES) + r")\b", lambda m: RENAMES[m.group(1)], cell.source)
            source = re.sub(r"^((?:    )+)", lambda m: "  " * (len(m.group(1)) // 4), source, flags=re.M)
            cell.source = re.sub(r"^(\s*)(def .*:)$", r"\1\2  # my own version", source, flags=re.M)
    return notebook


def failed_tests(auto: list[str]) -> dict[str, dict[str, str]]:
    """What each student's verdict failed, with its message's first line. amy passes everything; ben and cleo fail a
    hidden case of test_exact with different numbers (ben of test_cached_exact too), cleo test_counts with a message
    that carries a script and the sampling bonus; both leave the other bonuses as released; zed hands in the release."""
    left = {"test_lookup": LOOKUP_STUB, "test_adaptive": ADAPTIVE_STUB}
    return {"amy": {},
            "ben": {"test_exact": HIDDEN_CASE.format(7), "test_cached_exact": HIDDEN_CASE.format(7), **left},
            "cleo": {"test_exact": HIDDEN_CASE.format(3), "test_sampling": SAMPLING, **left,
                     "test_counts": f"the kit saw 12 target forward passes for a decode that takes 6 rounds {HOSTILE}"},
            "zed": dict.fromkeys(auto, BLANK)}


@pytest.fixture(scope="module")
def class_folder(tmp_path_factory):
    """amy hands in the reference, ben a disguised copy, cleo an independent solution, zed the blank release; their
    verdicts are failed_tests'."""
    graded = tmp_path_factory.mktemp("report") / "graded"
    course = graded / "course"
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    shutil.copy(REPO / "assignment" / NOTEBOOK, course / "source" / ASSIGNMENT / NOTEBOOK)
    points, extra_credit = course_points(course), course_extra_credit(course)
    worth = {**points, **extra_credit}  # a bonus test earns its extra credit (its nbgrader points are 0)
    auto = [t for t in points if t not in hand_graded_cells(course)]
    notebooks = {"amy": solved(), "ben": disguised(solved()), "cleo": independent(), "zed": blank()}
    verdicts = failed_tests(auto)
    rows = []
    for student, notebook in notebooks.items():
        path = course / "submitted" / student / ASSIGNMENT / NOTEBOOK
        path.parent.mkdir(parents=True)
        nbformat.write(notebook, path)
        failed = verdicts[student]
        tests = {t: 0.0 if t in failed else worth[t] for t in auto}
        grade = Grade(student, "graded", score=sum(tests[t] for t in auto if t not in extra_credit),
                      max_score=sum(points[t] for t in auto), extra_credit=sum(tests[t] for t in extra_credit),
                      tests=tests, failures=failed, vs_hf_assisted=None if student == "zed" else 1.05,
                      flags=["reads grades.csv"] if student == "ben" else [])
        submission = Submission(student, path)
        results.save_done(graded / "done", grade, submission)
        rows.append(results.row(grade, submission, list(points)))
    rows.append(results.row(Grade("ann", "missing"), Submission("ann", None, "no submission"), list(points)))
    results.merge_rows(graded / "grades.csv", {}, rows, list(points), [])
    return graded, notebooks


def test_a_disguised_copy_is_paired_and_an_independent_solution_is_not(class_folder):
    _, notebooks = class_folder
    release = nbformat.read(REPO / "assignment" / NOTEBOOK, as_version=4)
    pairs = {(p.first, p.second): p.similarity for p in similar_pairs(notebooks, release)}
    assert ("amy", "ben") in pairs, f"renamed variables and new layout must not hide a copy; pairs {pairs}"
    assert not [pair for pair in pairs if "cleo" in pair], f"an independent solution is paired with no one: {pairs}"
    assert not [pair for pair in pairs if "zed" in pair], f"the blank release shares only the release's code: {pairs}"


def test_the_report_names_speed_flags_and_pairs_and_escapes_messages(class_page):
    page = class_page
    assert "5 students: 4 graded, 1 missing" in page, "the opening line counts the students by status"
    assert "&lt;script&gt;document.title='PWNED'&lt;/script&gt;" in page, "cleo's message is shown escaped, as text"
    assert "3 timed; median ratio 1.05x" in page and "reads grades.csv" in page, "speed and static-scan flags shown"
    assert "<td>amy</td><td>ben</td>" in page, "the near-identical pair is listed"
    assert "http://" not in page and "https://" not in page and "<script" not in page, \
        "the page is self-contained: no external link, no script"
    assert page.count("data:image/png;base64,") == 3, "three inline plots: scores, pass rates, speed"


def section(page: str, title: str) -> str:
    """The page's HTML from the heading `title` to the next heading."""
    return re.split(r"<h[23]>", page.split(f"{title}</h", 1)[1], maxsplit=1)[0]


def table_rows(html_part: str) -> list[list[str]]:
    """The text of each body row's cells in the tables of `html_part`."""
    return [[html.unescape(cell) for cell in re.findall(r"<td>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(<td>.*?)</tr>", html_part)]


@pytest.fixture(scope="module")
def class_page(class_folder) -> str:
    graded, _ = class_folder
    return report.build_report(graded, min_ratio=0.75)


def test_the_required_tests_bugs_are_ranked_by_points_lost_each_message_once(class_page):
    required = section(class_page, "Parts 1 and 2: the required tests")
    rows = table_rows(required)
    assert rows[0] == [HIDDEN_CASE.format("#").replace("9", "#"), "test_exact, test_cached_exact",
                       "2", "32", "ben, cleo"], \
        f"the hidden-case message (numbers set aside) comes first, once, with its tests, students and 32 points; {rows}"
    assert len(rows) == 2 and "the kit saw # target forward passes" in rows[1][0] and rows[1][1:4] == \
        ["test_counts", "1", "8"], f"cleo's test_counts bug comes second, with its numbers set aside; {rows}"
    assert "NotImplementedError (not written yet)" not in "".join(map(str, rows)), \
        f"a method left unwritten is no bug of the table; {rows}"
    assert "points lost: zed (90)." in required, "zed's unwritten methods are listed apart with the points they cost"


def test_bonus_parts_are_counted_apart_as_attempted_and_passed(class_page):
    bonus = section(class_page, "Bonus parts (extra credit)")
    rows = table_rows(bonus)
    counts = [["test_sampling", "5", "3 / 2"], ["test_lookup", "3", "1 / 1"], ["test_adaptive", "3", "1 / 1"]]
    assert rows[:3] == counts, f"sampling attempted by amy, ben and cleo (cleo failed), the others by amy only; {rows}"
    assert rows[3:] == [[SAMPLING.replace("0.0001", "#"), "test_sampling", "1", "5", "cleo"]], \
        f"the one bonus failure among those who attempted is cleo's sampling; no stub left as released; {rows}"


def test_ranking_is_by_points_lost_not_by_how_many_students():
    rows = {"amy": {"test_exact": "0", "test_counts": "8"}, "ben": {"test_exact": "12", "test_counts": "0"},
            "cleo": {"test_exact": "12", "test_counts": "0"}}
    failures = {"amy": {"test_exact": "greedy tokens differ at position 4"},
                "ben": {"test_counts": "10 target forwards"}, "cleo": {"test_counts": "11 target forwards"}}
    records = report.failure_records(rows, failures, {"test_exact": 12, "test_counts": 5})
    ranked = report.distinct_failures(records, ["test_exact", "test_counts"])
    assert list(ranked["message"]) == ["greedy tokens differ at position #", "# target forwards"], \
        f"one student's 12 points rank above two students' 5 each; got {ranked.to_dict('records')}"
    assert list(ranked["students"]) == [1, 2] and list(ranked["lost"]) == [12, 10], ranked.to_dict("records")


def test_a_class_with_no_failure_says_so():
    worth = {"test_exact": 12, "test_sampling": 5}
    records = report.failure_records({"amy": {"test_exact": "12", "test_sampling": "5"}}, {"amy": {}}, worth)
    page = report._what_went_wrong(records, list(worth), {"test_exact"}, {"test_sampling": 5}, 1)
    assert "No required test failed" in page and table_rows(page) == [["test_sampling", "5", "1 / 1"]], page


@pytest.mark.slow
@needs_chromium
def test_the_report_renders_in_headless_chromium_with_images_that_are_not_blank(class_folder, tmp_path):
    """Its three plots decode, and a failure message that carries a script (cleo's) runs nothing."""
    graded, _ = class_folder
    page = tmp_path / "report.html"
    page.write_text(report.build_report(graded, min_ratio=0.75))
    assert safe_html.unsafe(page.read_text()) == [], "the page holds nothing outside the sanitiser's allow-list"
    assert title_after_scripts(page) == "Class report", "no script of a student's ran in the page"
    widths = image_widths(page)
    assert len(widths) == 3 and min(widths) > 0, f"each of the 3 images decodes to a non-zero width: {widths}"
    pixels = screenshot(page)
    assert pixels.shape[1] == 1200 and pixels.std() > 0.05, \
        f"the screenshot is 1200 px wide and not blank: shape {pixels.shape}, spread {pixels.std():.3f}"
