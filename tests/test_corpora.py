"""Both corpora (tests/corpora.py) graded in one batch with `specdec-course autograde --jobs 2`: every row as
expected, no tamper above the blank release on the tests it targets, no feedback page that leaks or runs a
student's script, no formula in grades.csv.

Example run: python -m pytest tests/test_corpora.py -q -s   (prints the figures CI shows)
"""

import csv
import shutil
from pathlib import Path

import nbformat
import pytest

from specdec_course.cli import main
from specdec_course.core.plan import load_plan
from specdec_course.grading import gradebook, leaks, results, safe_html

from conftest import REPO, image_widths, needs_chromium, spreadsheet_formulas, title_after_scripts
from corpora import (
    AUTO,
    BROKEN,
    FORMULA,
    MARKER,
    NOT_FILES,
    PLOT_WIDTH,
    READER_MARKER,
    STALLS,
    STUDENTS,
    TAMPERS,
    TWINS,
    Case,
    blank,
    write_corpus,
)

pytestmark = pytest.mark.slow
# Shorter limits than config.toml's for the notebook's own run, so that its loop and its sleep cost less; a check's
# limit as config.toml's (60 s), which counts all of a check's requests on a machine two jobs share: the solution's
# longest check, test_exact, takes about 20 s alone and has taken over 45 s beside another job.
LIMITS = {"notebook_seconds": 360, "cell_seconds": 60, "check_seconds": 60}
PLAN_TESTS = tuple(load_plan(REPO / "autograder").tests)
REFERENCE = Case("blank_reference", blank)  # the honest blank release, what every tamper is measured against
CASES = [*BROKEN, *NOT_FILES, *STALLS, *STUDENTS, *TAMPERS, REFERENCE]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The corpora graded as a class: (rows by student, the output folder, the autograder folder used).

    The speed test times one repeat, as under the selftest: its timed prompts are still ones the sandbox has not
    seen, so an output kept from the warm-up is still no help."""
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("SPECDEC_SELFTEST", "1")
    root = tmp_path_factory.mktemp("corpora")
    autograder = root / "autograder"  # a sibling of the output, where a tamper walking up the tree finds it
    shutil.copytree(REPO / "autograder", autograder, ignore=shutil.ignore_patterns("__pycache__"))
    config = (autograder / "config.toml").read_text()
    for key, value in LIMITS.items():
        config = "\n".join(f"{key} = {value}" if line.startswith(f"{key} =") else line for line in config.splitlines())
    (autograder / "config.toml").write_text(config + "\n")
    (root / "assignment").mkdir()
    shutil.copy(REPO / "assignment" / "speculative_decoding.ipynb", root / "assignment")
    write_corpus(root / "submissions", [*CASES, *TWINS])
    out = root / "graded"
    code = main(["autograde", str(root / "submissions"), "--out", str(out), "--jobs", "2",
                 "--solution", str(REPO / "solutions" / "speculative_decoding.ipynb"), "--autograder", str(autograder)])
    assert code == 0, f"autograde exits 0 on a class with broken submissions; got {code}"
    monkeypatch.undo()
    return results.read_rows(out / "grades.csv"), out, autograder


def lost(row: dict) -> set[str]:
    return {test for test in AUTO if float(row[test] or 0) == 0}


@pytest.mark.parametrize("case", CASES[:-1], ids=lambda c: c.name)
def test_row_is_as_expected(graded, case):
    rows, out, _ = graded
    row, expected = rows[case.name], case.expected
    assert row["status"] == expected.status, f"{case.name}: status {row['status']!r} ({row['message']})"
    assert lost(row) == set(expected.loses), f"{case.name}: lost {sorted(lost(row))}, expected " \
                                             f"{sorted(expected.loses)}; message: {row['message']}"
    verdict = "" if expected.message in row["message"] else " ".join(verdicts(out, case.name).values())
    assert expected.message in row["message"] + verdict, f"{case.name}: the row's message or a test's verdict must " \
        f"say {expected.message!r}; got {row['message']!r} and verdicts {verdict!r}"
    assert expected.flag in row["flags"], f"{case.name}: the flags must say {expected.flag!r}; got {row['flags']!r}"
    if row["status"] not in ("invalid", "missing"):
        assert (out / "feedback" / f"{case.name}.html").is_file() and "withheld" not in row["message"], \
            f"{case.name}: every graded student gets a feedback page; message {row['message']!r}"
    if expected.marker:
        assert MARKER in _printed(out, case.name), f"{case.name} never printed its marker: it crashed before acting"


def test_ids_the_same_but_for_case_are_two_students_in_every_file(graded, tmp_path):
    """Twin and twin, Émile composed and decomposed: a row each in grades.csv, and a line each in the export."""
    rows, out, autograder = graded
    names = [row["name"] for row in rows.values() if row["name"] in {case.name for case in TWINS}]
    assert sorted(names) == sorted(case.name for case in TWINS), f"one row per id: {names}"
    assert main(["export", str(out), "--autograder", str(autograder), "--out", str(tmp_path / "export.csv")]) == 0
    with (tmp_path / "export.csv").open() as f:
        exported = [r["SID"] for r in csv.DictReader(f)]
    assert sorted(s for s in exported if s in names) == sorted(names), f"one export line per id: {exported}"


def test_points_come_from_the_release(graded):
    """No row holds points above the release's: a submission raised a test cell's points and made its hand-graded
    report a test cell worth 100 (`raised_points`); that report still waits for a person."""
    rows, _, _ = graded
    release = nbformat.read(REPO / "assignment" / "speculative_decoding.ipynb", as_version=4)
    points = {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"]) for c in release.cells
              if c.metadata.get("nbgrader", {}).get("grade") and c.metadata["nbgrader"]["points"]}  # not the bonus
    for row in rows.values():
        above = {t: row[t] for t in points if float(row[t] or 0) > points[t]}
        assert not above and float(row["score"] or 0) <= sum(points[t] for t in AUTO), \
            f"{row['student']}: points above the release's: {above}, score {row['score']}"
    assert rows["raised_points"]["report"] == "" and rows["raised_points"]["manual_pending"] == "True", \
        f"the report waits for a person: {rows['raised_points']}"


@pytest.mark.parametrize("case", TAMPERS, ids=lambda c: c.name)
def test_tamper_acted_and_gained_nothing(graded, case):
    rows, _, _ = graded
    gained = {t: rows[case.name][t] for t in case.expected.targets
              if float(rows[case.name][t] or 0) > float(rows[REFERENCE.name][t] or 0)}
    assert not gained, f"{case.name} scored above the blank release on {gained}"


def test_nothing_a_submission_started_outlives_it_or_reached_the_grader(graded):
    """After the batch: no process of any sandbox's user is alive, and what the escape tamper wrote to (the kit's
    source, the offline models, the course's config, gradebook and grades) holds none of it."""
    import specdec_kit
    from specdec_course.sandbox import processes, uids
    from specdec_kit.core import settings

    _, out, _ = graded
    alive = [pid for uid in uids.uid_range() for pid in processes.pids_of_uid(uid)]
    assert not alive, f"processes of the submissions' sandboxes outlived their grading: {alive}"
    touched = [path for path in (Path(specdec_kit.__file__), out / "course" / "nbgrader_config.py", out / "grades.csv")
               if "escaped" in path.read_text(errors="replace")]
    touched += [str(path) for path in (*settings.cache_dir().rglob("escaped.txt"), *out.rglob("escaped.txt"))]
    assert not touched, f"a submission wrote outside its sandbox: {touched}"


def test_the_notebooks_own_run_meets_the_memory_limit(graded):
    """A cell that allocates without bound gets a MemoryError; the kernel frees what it held and goes on."""
    _, out, _ = graded
    cells = gradebook.read_autograded(out / "course", "unbounded_memory").cells
    hoard = next(c for c in cells if c.cell_type == "code" and c.source.startswith("def hoard():"))
    assert [o.get("ename") for o in hoard.outputs] == ["MemoryError"], f"outputs: {hoard.outputs}"
    stopped = [o.ename for c in cells for o in c.get("outputs", []) if o.get("ename") in ("NotRun", "KernelDied")]
    assert not stopped, f"the kernel survives the MemoryError and runs every later cell; got {stopped}"


def test_a_hang_costs_only_the_checks_it_hangs(graded):
    """The verdict on an endless loop in one edge case (once judged again by tests/course/grading/test_verdict.py, with
    the same edit): that check is cut off at its limit and named, every other test passes, bonus tests included."""
    rows, out, _ = graded
    assert lost_anywhere(rows["infinite_loop"]) == {"test_eos_and_budget"}, \
        f"only the check whose case loops may fail; failed {sorted(lost_anywhere(rows['infinite_loop']))}"
    limit = LIMITS["check_seconds"]  # the row names aborted checks only: a limit, a crash, memory
    assert "test_eos_and_budget: speculative_decode(" in rows["infinite_loop"]["message"] \
        and f"did not return within {limit} s" in rows["infinite_loop"]["message"], \
        f"the row names the check cut off at its {limit} s limit; message {rows['infinite_loop']['message']!r}"
    message = verdicts(out, "infinite_loop")["test_eos_and_budget"]
    assert "speculative_decode(prompt" in message and "max_tokens=1" in message, \
        f"the message must name the call that hung; got {message!r}"


def test_forwards_a_method_hides_are_still_counted(graded):
    """A decoder that runs the target twice on a rejection and removes the kit's hooks from its model loses what that
    bug loses, test_counts saying why: the grading process counts the forwards it runs itself."""
    from specdec_course.selftest.catalogue import load_catalogue

    rows, out, _ = graded
    [bug] = [e for e in load_catalogue(REPO / "autograder") if e.name == "extra_target_forward"]
    assert lost(rows["hide_forwards"]) == set(bug.fails) & set(AUTO), \
        f"hiding forwards changes nothing (the bonus classes are stubs); lost {sorted(lost(rows['hide_forwards']))}"
    message = verdicts(out, "hide_forwards")["test_counts"]
    assert "more than one target forward" in message, f"test_counts names the extra forward it counted: {message}"


# The words test_exact's verdict holds for each: the checks' own, never the submission's.
LEAK_VERDICTS = {"leak_inputs": "failed a hidden case", "index_leak": "its answer came with another case's number"}


@pytest.mark.parametrize("student", LEAK_VERDICTS)
def test_no_hidden_input_reaches_a_page_or_a_row(graded, student):
    """leak_inputs raises with every prompt no visible check gave it (the hidden checks' and the timed ones); index_leak
    packs each such prompt into its answer's case number (the prompt's bytes as one integer). Neither the prompts nor
    such a number (a run of 30 digits or more) reaches the feedback page, grades.csv or the record; the verdicts say a
    hidden case failed, in the checks' words."""
    import html
    import importlib.util
    import re

    from specdec_kit.core.prompts import load_prompts

    _, out, autograder = graded
    spec = importlib.util.spec_from_file_location("hidden_of_the_corpora", autograder / "hidden.py")
    hidden = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hidden)
    timed = re.compile("|".join(re.escape(p.text) + r"\s+\d{6}" for p in load_prompts()))
    packed = re.compile(r"\d{30,}")  # a prompt of 13 bytes or more packed into an integer has 30 digits or more
    pages = {"feedback page": (out / "feedback" / f"{student}.html").read_text(), "grades.csv": (
        out / "grades.csv").read_text(), "record": (out / "done" / f"{student}.json").read_text()}
    for where, text in pages.items():
        plain = html.unescape(text).replace("\\'", "'").replace('\\"', '"')
        shown = [p for p in hidden.PROMPTS if p in plain or p.replace("\n", "\\n") in plain]
        assert not shown and not timed.search(plain), f"{where} shows hidden inputs: {shown or timed.search(plain)}"
        assert not packed.search(plain), f"{where} shows a packed input: {packed.search(plain)[0][:60]}..."
    found = verdicts(out, student)
    assert found["test_exact"].startswith("failed (0 of") and "failed a hidden case" in found["test_exact"] \
        and LEAK_VERDICTS[student] in found["test_exact"], found


@needs_chromium
def test_what_staff_open_runs_no_script_and_starts_no_formula(graded, tmp_path):
    """write_gradebook's cells for the readers (corpora.for_readers): a markdown cell and outputs whose scripts would
    set the page's title, an image whose width carries an event handler, a plot, and a class that puts a formula
    first in the row's message. grades.csv opens with no formula and the kit reads the message back as it was; no
    feedback page holds anything outside the sanitiser's allow-list; that page runs none of the scripts in headless
    Chromium and shows the plot."""
    rows, out, _ = graded
    assert spreadsheet_formulas(out / "grades.csv") == [], "a spreadsheet opening grades.csv would run a formula"
    assert rows["write_gradebook"]["message"].startswith(FORMULA), \
        f"the formula starts the message, read back as written: {rows['write_gradebook']['message']!r}"
    unsafe = {page.name: found for page in (out / "feedback").glob("*.html") if (found := safe_html.unsafe(
        page.read_text()))}
    assert not unsafe, f"pages holding what the sanitiser does not allow: {unsafe}"
    page = tmp_path / "write_gradebook.html"
    page.write_text((out / "feedback" / page.name).read_text())
    assert READER_MARKER not in title_after_scripts(page), "a script of the submission ran in its feedback page"
    assert PLOT_WIDTH in image_widths(page), f"the submission's plot shows: widths {image_widths(page)}"


def lost_anywhere(row: dict) -> set[str]:
    """Every test the verdict failed, the bonus tests (extra credit, 0 when failed) included."""
    return {test for test in PLAN_TESTS if float(row[test] or 0) == 0}


def verdicts(out, student: str) -> dict[str, str]:
    """test -> the kit's verdict as shown in the autograded notebook: "" when passed, else its message."""
    found, notebook = {}, gradebook.read_autograded(out / "course", student)
    for cell in notebook.cells if notebook else []:
        test = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.cell_type == "code" and test in PLAN_TESTS:
            last = cell.outputs[-1]  # the verdict closes the cell's outputs
            found[test] = last.get("evalue", "") if last.output_type == "error" else ""
    return found


def _printed(out, student: str) -> str:
    """What a submission printed: its kernel's outputs and its grading children's logs."""
    notebook = gradebook.read_autograded(out / "course", student)
    text = ""
    for cell in notebook.cells if notebook else []:
        text += "".join(o.get("text", "") + o.get("evalue", "") for o in cell.get("outputs", []))
    return text + "".join(p.read_text(errors="replace") for p in (out / "course").parent.glob(f"logs/{student}.*"))


def test_figures(graded):
    """The figures CI prints; every row written, nothing leaked, no tamper gained."""
    rows, out, autograder = graded
    secrets = leaks.grader_secrets(out / "course", autograder)
    hidden = leaks.hidden_lines(autograder)
    leaked = [page.name for page in (out / "feedback").glob("*.html")
              if leaks.leaks(page.read_text(), secrets, hidden)]
    gained = [c.name for c in TAMPERS if any(float(rows[c.name][t] or 0) > float(rows[REFERENCE.name][t] or 0)
                                             for t in c.expected.targets)]
    graded_rows = [r for r in rows.values() if r["status"] not in ("invalid", "missing", "duplicate")]
    print(f"\ncorpora: {len(CASES)} submissions, {len(rows)} rows written, {len(graded_rows)} graded "
          f"(median {sorted(float(r['seconds']) for r in graded_rows)[len(graded_rows) // 2]:.0f} s each); "
          f"tamper attempts that gained points: {len(gained)}; feedback pages that leaked: {len(leaked)}")
    assert len(rows) == len(CASES) + len(TWINS), f"one row per submission: {len(rows)} rows for {len(CASES)} + twins"
    assert not leaked and not gained, f"leaked pages {leaked}, tampers that gained {gained}"
