"""Grading at class scale with the engines courses use: Gradescope's autograder bundle, run as Gradescope
lays out /autograder, and one submission per container (`autograde-one`) gathered by `merge`.

The bundle's setup.sh is not run (it installs into the image); its run_autograder is, on this venv, which
`make` built with the same packaging/install.sh.
"""

import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile

import nbformat
import pytest

from specdec_course.catalogue import load_catalogue
from specdec_course.cli import main
from specdec_course.gradescope import build_bundle
from specdec_kit import settings

from conftest import REPO, SOLUTION
from corpora import blank, solved

pytestmark = pytest.mark.slow
BUG = next(e for e in load_catalogue(REPO / "autograder") if e.name == "off_by_one_late")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    root = tmp_path_factory.mktemp("bundle")
    zipped = build_bundle(REPO, root / "autograder.zip")
    with zipfile.ZipFile(zipped) as z:
        names = z.namelist()
        z.extractall(root / "source")
    assert {"setup.sh", "run_autograder", "packaging/install.sh", "README.md", "autograder/hidden.py"} <= set(names), \
        f"the bundle holds Gradescope's two scripts, the install script and the hidden checks: {names[:20]}"
    return root / "source"


def gradescope_run(bundle, root, sid: str, write) -> dict:
    """One Gradescope container: /autograder/source from the bundle, the submission and its metadata, then
    run_autograder."""
    shutil.copytree(bundle, root / "source")
    (root / "submission").mkdir()
    write(root / "submission" / "speculative_decoding.ipynb")
    metadata = {"users": [{"sid": sid, "email": f"{sid}@example.org", "name": sid.title()}],
                "created_at": "2026-12-06T00:10:00-08:00"}
    (root / "submission_metadata.json").write_text(json.dumps(metadata))
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable,
           "SPECDEC_KIT_CACHE": str(settings.cache_dir()),  # the models this machine built (setup.sh is not run)
           "SPECDEC_SELFTEST": "1"}  # the speed test times one repeat, as in the selftest
    done = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"run_autograder exits 0 for {sid}: {done.stderr[-2000:]}"
    return json.loads((root / "results" / "results.json").read_text())


@pytest.fixture(scope="module")
def containers(bundle, tmp_path_factory):
    """Four Gradescope containers: the solution (amy), the blank release (zed), a catalogued bug (bugsy) and a
    broken file (Émilie)."""
    from specdec_course.catalogue import make_submission

    root = tmp_path_factory.mktemp("containers")
    cases = {"amy": lambda p: nbformat.write(solved(), p), "zed": lambda p: nbformat.write(blank(), p),
             "bugsy": lambda p: nbformat.write(make_submission(SOLUTION, BUG), p),
             "Émilie": lambda p: p.write_text("not a notebook")}
    return {sid: (root / sid, gradescope_run(bundle, root / sid, sid, write)) for sid, write in cases.items()}


def lost(document: dict) -> set[str]:
    return {t["name"] for t in document["tests"] if t["score"] < t["max_score"]}


def test_gradescope_solution_blank_bug_and_broken_file(containers):
    solution = containers["amy"][1]
    assert solution["score"] == 101 and not lost(solution), \
        f"the solution earns all 90 points and the bonus tests' 5 + 3 + 3 of extra credit: {solution}"
    bonus = {t["name"]: t["score"] for t in solution["tests"] if t["max_score"] == 0}
    assert bonus == {"test_sampling": 5, "test_lookup": 3, "test_adaptive": 3}, \
        "the bonus tests show their points over a maximum of 0, Gradescope's extra credit"
    assert all(t["visibility"] == "visible" for t in solution["tests"]), "passed tests are shown at once"
    empty = containers["zed"][1]
    assert empty["score"] == 0 and len(lost(empty)) == 10 and len(empty["tests"]) == 13, \
        f"the blank release earns 0 on the 10 tests and no extra credit: {empty}"
    assert all("NotImplementedError" in t["output"] for t in empty["tests"]), "each test names the stub"
    bug = containers["bugsy"][1]
    assert lost(bug) == set(BUG.fails), f"{BUG.name} loses exactly {sorted(BUG.fails)}; lost {sorted(lost(bug))}"
    assert bug["score"] == 101 - sum(t["max_score"] for t in bug["tests"] if t["name"] in BUG.fails), bug["score"]
    broken = containers["Émilie"][1]
    assert broken["score"] == 0 and "invalid" in broken["output"] and "re-download" in broken["output"], \
        f"a broken file scores 0 and says what to do: {broken['output']}"


def test_one_submission_per_container_then_merge(containers, tmp_path):
    """The containers' folders and one more from autograde-one merge into a class with its export and report."""
    (tmp_path / "carl.ipynb").write_text("{ broken")
    common = ["--solution", str(SOLUTION), "--autograder", str(REPO / "autograder")]
    assert main(["autograde-one", str(tmp_path / "carl.ipynb"), "--out", str(tmp_path / "carl"), *common]) == 0, \
        "autograde-one grades carl's file"
    parts = [str(folder / "work") for folder, _ in containers.values()] + [str(tmp_path / "carl")]
    graded = tmp_path / "graded"
    assert main(["merge", *parts, "--out", str(graded), *common]) == 0, "merge gathers the five folders"
    with (graded / "grades.csv").open() as f:
        rows = {r["name"]: r for r in csv.DictReader(f)}
    statuses = {name: (row["status"], float(row["score"])) for name, row in rows.items()}
    assert statuses == {"amy": ("graded", 90), "zed": ("graded", 0), "bugsy": ("graded", 90 - 46),
                        "Émilie": ("invalid", 0), "carl": ("invalid", 0)}, statuses
    assert rows["amy"]["submitted_at"] == "2026-12-06T00:10:00-08:00", "Gradescope's submission time is kept"
    assert (graded / "feedback" / "amy.html").is_file(), "merge renders the graded students' feedback pages"
    page = (graded / "report.html").read_text()
    assert "5 students: 3 graded, 2 invalid" in page, "the report covers the merged class"
    with (graded / "grades_export.csv").open() as f:
        exported = {r["SID"]: r for r in csv.DictReader(f)}
    assert exported["amy"]["Late"] == "yes" and exported["amy"]["Manual Pending"] == "yes", \
        f"10 minutes past the deadline is late, and amy's report waits for a person: {exported['amy']}"
