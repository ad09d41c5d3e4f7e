"""Grading at class scale with the engines courses use: Gradescope's autograder bundle, set up and run as Gradescope
does, and one submission per container (`autograde-one`) gathered by `merge`.

The bundle is unzipped into a fresh `source/`, its `setup.sh` runs once as root (apt, `packaging/install.sh` into
the bundle's own venv, the offline models), then its `run_autograder` runs per submission in a root laid out as
Gradescope lays out `/autograder`, without namespaces (`SPECDEC_SANDBOX=user`), as in Gradescope's containers.
"""

import csv
import json
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import nbformat
import pytest

from specdec_course.cli import main
from specdec_course.platforms.gradescope import build_bundle
from specdec_course.sandbox import processes, uids
from specdec_course.sandbox.box import limits_label
from specdec_course.selftest.catalogue import load_catalogue

from conftest import REPO, SOLUTION
from corpora import blank, solved

pytestmark = [pytest.mark.slow, pytest.mark.release]  # Gradescope's image set up from its bundle
BUG = next(e for e in load_catalogue(REPO / "autograder") if e.name == "off_by_one_late")


def gradescope_env(root: Path) -> dict:
    """What Gradescope's scripts see: the system's PATH (no virtual environment of this test run), root's pip
    settings, and no namespaces for the sandbox."""
    kept = {k: v for k, v in os.environ.items() if k.startswith(("PIP_", "SPECDEC_")) or k in ("HOME", "LANG")}
    return {**kept, "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "AUTOGRADER_ROOT": str(root), "SPECDEC_SANDBOX": "user",
            "SPECDEC_SELFTEST": "1"}  # the speed test times one repeat, as in the selftest


@pytest.fixture(scope="module")
def autograder():
    """A Gradescope image: the bundle unzipped into a fresh `source/`, then its setup.sh run as root. The root is
    outside root's home and /tmp's private folders, as /autograder is, so that the sandbox's user can reach it."""
    if os.geteuid() != 0:
        pytest.skip("setup.sh runs as root (apt-get, the sandbox's users), as on Gradescope")
    root = Path(tempfile.mkdtemp(prefix="specdec-gradescope-", dir="/var/tmp"))
    root.chmod(0o755)
    try:
        with zipfile.ZipFile(build_bundle(REPO, root / "autograder.zip")) as z:
            z.extractall(root / "source")
        for script in ("setup.sh", "run_autograder"):
            (root / "source" / script).chmod(0o755)  # zipfile drops the mode; Gradescope's unzip keeps it
        done = subprocess.run(["bash", str(root / "source" / "setup.sh")], env=gradescope_env(root),
                              capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, f"setup.sh sets the image up: {(done.stdout + done.stderr)[-3000:]}"
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def gradescope_run(root: Path, sid: str, write) -> tuple[Path, dict]:
    """One Gradescope container from the image: the submission and its metadata, then run_autograder. Returns the
    grading folder (moved aside for `merge`) and results.json."""
    for fresh in ("submission", "results", "work"):
        shutil.rmtree(root / fresh, ignore_errors=True)
    (root / "submission").mkdir()
    write(root / "submission" / "speculative_decoding.ipynb")
    metadata = {"users": [{"sid": sid, "email": f"{sid}@example.org", "name": sid.title()}],
                "created_at": "2026-12-06T00:10:00-08:00"}
    (root / "submission_metadata.json").write_text(json.dumps(metadata))
    done = subprocess.run([str(root / "source" / "run_autograder")], env=gradescope_env(root), capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, f"run_autograder exits 0 for {sid}: {done.stderr[-2000:]}"
    left = [pid for uid in uids.uid_range() for pid in processes.pids_of_uid(uid)]
    assert not left, f"every process of the sandbox's user is gone once results.json is written: {left}"
    kept = root / "graded" / sid
    kept.parent.mkdir(exist_ok=True)
    shutil.move(root / "work", kept)
    return kept, json.loads((root / "results" / "results.json").read_text())


@pytest.fixture(scope="module")
def containers(autograder):
    """Four submissions, each in a fresh container of the image: the solution (amy), the blank release (zed), a
    catalogued bug (bugsy) and a broken file (Émilie)."""
    from specdec_course.selftest.catalogue import make_submission

    cases = {"amy": lambda p: nbformat.write(solved(), p), "zed": lambda p: nbformat.write(blank(), p),
             "bugsy": lambda p: nbformat.write(make_submission(SOLUTION, BUG), p),
             "Émilie": lambda p: p.write_text("not a notebook")}
    return {sid: gradescope_run(autograder, sid, write) for sid, write in cases.items()}


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
    parts = [str(folder) for folder, _ in containers.values()] + [str(tmp_path / "carl")]
    graded = tmp_path / "graded"
    assert main(["merge", *parts, "--out", str(graded), *common]) == 0, "merge gathers the five folders"
    with (graded / "grades.csv").open() as f:
        rows = {r["name"]: r for r in csv.DictReader(f)}
    statuses = {name: (row["status"], float(row["score"])) for name, row in rows.items()}
    assert statuses == {"amy": ("graded", 90), "zed": ("graded", 0), "bugsy": ("graded", 90 - 46),
                        "Émilie": ("invalid", 0), "carl": ("invalid", 0)}, statuses
    held = limits_label("user", processes.cgroup_support()[0])  # `user, no cgroup: ...` in Gradescope's containers
    assert {rows[n]["isolation"] for n in ("amy", "zed", "bugsy")} == {held}, \
        "Gradescope's containers give no namespaces: the submissions ran as a separate user, and the rows say so"
    assert rows["amy"]["submitted_at"] == "2026-12-06T00:10:00-08:00", "Gradescope's submission time is kept"
    assert (graded / "feedback" / "amy.html").is_file(), "merge renders the graded students' feedback pages"
    page = (graded / "report.html").read_text()
    assert "5 students: 3 graded, 2 invalid" in page, "the report covers the merged class"
    with (graded / "grades_export.csv").open() as f:
        exported = {r["SID"]: r for r in csv.DictReader(f)}
    assert exported["amy"]["Late"] == "yes" and exported["amy"]["Manual Pending"] == "yes", \
        f"10 minutes past the deadline is late, and amy's report waits for a person: {exported['amy']}"
