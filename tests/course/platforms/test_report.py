"""The class report: near-identical code found through renamed variables and new layout, an independent
solution left alone, and a page that renders in headless Chromium with real images and runs no student's script.

The graded folder is laid out by hand (grades.csv, done/ records, the course's source and submitted
notebooks), so no nbgrader run is needed.
"""

import re
import shutil

import nbformat
import pytest

from specdec_course.core.nbgrader_course import ASSIGNMENT, NOTEBOOK
from specdec_course.grading import results, safe_html
from specdec_course.grading.collect import Submission
from specdec_course.grading.course import course_points, hand_graded_cells
from specdec_course.grading.row import Grade
from specdec_course.platforms import report
from specdec_course.platforms.similarity import similar_pairs

from conftest import REPO, image_widths, needs_chromium, screenshot, title_after_scripts
from corpora import blank, solved
from independent import independent

# What a student's code can put into a check's message, which the report lists among the class's failures.
HOSTILE = "<img src=x onerror=\"document.title='PWNED'\"><script>document.title='PWNED'</script>"
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


@pytest.fixture(scope="module")
def class_folder(tmp_path_factory):
    """amy hands in the reference, ben a disguised copy, cleo an independent solution, zed the blank release."""
    graded = tmp_path_factory.mktemp("report") / "graded"
    course = graded / "course"
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    shutil.copy(REPO / "assignment" / NOTEBOOK, course / "source" / ASSIGNMENT / NOTEBOOK)
    points = course_points(course)
    auto = [t for t in points if t not in hand_graded_cells(course)]
    notebooks = {"amy": solved(), "ben": disguised(solved()), "cleo": independent(), "zed": blank()}
    rows = []
    for student, notebook in notebooks.items():
        path = course / "submitted" / student / ASSIGNMENT / NOTEBOOK
        path.parent.mkdir(parents=True)
        nbformat.write(notebook, path)
        failed = {"test_counts": f"the kit saw 12 target forward passes for a decode that takes 6 rounds {HOSTILE}"} \
            if student == "cleo" else {t: "NotImplementedError" for t in auto} if student == "zed" else {}
        tests = {t: 0.0 if t in failed else points[t] for t in auto}
        grade = Grade(student, "graded", score=sum(tests.values()), max_score=sum(points[t] for t in auto),
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


def test_the_report_names_the_class_failures_speed_flags_and_pairs(class_folder):
    graded, _ = class_folder
    page = report.build_report(graded, min_ratio=0.75)
    assert "5 students: 4 graded, 1 missing" in page, "the opening line counts the students by status"
    assert "NotImplementedError" in page and "the kit saw # target forward passes" in page, \
        "the most common failures are listed with their numbers set aside"
    assert "3 timed; median ratio 1.05x" in page and "reads grades.csv" in page, "speed and static-scan flags shown"
    assert "<td>amy</td><td>ben</td>" in page, "the near-identical pair is listed"
    assert "http://" not in page and "https://" not in page and "<script" not in page, \
        "the page is self-contained: no external link, no script"
    assert page.count("data:image/png;base64,") == 3, "three inline plots: scores, pass rates, speed"


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
