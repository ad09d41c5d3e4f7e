"""Gradescope: the autograder bundle, and what its run_autograder does for each submission.

    specdec-course gradescope --out autograder.zip           # upload as the assignment's autograder

Gradescope unpacks the zip into /autograder/source, runs setup.sh once to build its image (the kit's own
install script, packaging/install.sh, and the offline models), then for each submission runs
run_autograder, which calls `python -m specdec_course.platforms.gradescope /autograder`: the newest notebook in
/autograder/submission is graded through the same path as `specdec-course autograde` (nbgrader's run and the
kit's verdict, the submission's code in a sandbox: a separate user in Gradescope's containers, whose every process
is gone before results.json is written) and /autograder/results/results.json gets the auto-graded score and one
entry per test with its points and its check's message. A test failed by hidden cases only is shown
`after_published`; the hand-graded report is left to Gradescope's own manual questions.
"""

from __future__ import annotations

import json
import sys
import time
import zipfile
from pathlib import Path

from ..core.nbgrader_course import NOTEBOOK
from ..grading import course, leaks, results, row
from ..grading.collect import Submission, file_time
from ..grading.names import download_index, nbgrader_id
from ..sandbox.host import GraderFailed

# What the install and grading read: pyproject.toml names README.md, install.sh reads environment.yml.
BUNDLE_FILES = ("pyproject.toml", "README.md", "environment.yml", "packaging/install.sh", "src", "data", "autograder",
                f"assignment/{NOTEBOOK}", f"solutions/{NOTEBOOK}")
SETUP_SH = f"""\
#!/usr/bin/env bash
# Gradescope runs this once, as root, to build the autograder's image.
set -euo pipefail
root=${{AUTOGRADER_ROOT:-/autograder}}
apt-get update -q && apt-get install -y -q python3 python3-venv python3-pip
python=python3
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then  # the kit needs 3.11 (pyproject.toml)
    apt-get install -y -q python3.11 python3.11-venv && python=python3.11
fi
cd "$root/source"
PYTHON=$python bash packaging/install.sh "$root/source/.venv" notebook,instructor
# The offline models where the sandbox's user can read them (root's home is closed to it).
export SPECDEC_KIT_CACHE="$root/source/.zoo"
"$root/source/.venv/bin/specdec-kit" zoo {" ".join(course.GRADING_PAIRS)}  # grading's pairs, built once
"""
RUN_AUTOGRADER = """\
#!/usr/bin/env bash
# Gradescope runs this for each submission and reads /autograder/results/results.json.
root=${AUTOGRADER_ROOT:-/autograder}
export SPECDEC_KIT_CACHE="$root/source/.zoo"  # setup.sh built the models there
cd "$root/source"
exec "$root/source/.venv/bin/python" -m specdec_course.platforms.gradescope "$root"
"""
WITHHELD = "message withheld: it showed the grader's files; ask the course staff"


def build_bundle(repo: Path, out: Path) -> Path:
    """The autograder zip: setup.sh and run_autograder at its top, the kit's sources beside them."""
    missing = [name for name in BUNDLE_FILES if not (repo / name).exists()]
    if missing:
        raise ValueError(f"the bundle needs {', '.join(missing)} under {repo}: run from the repository root")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bundle:
        for name, text in (("setup.sh", SETUP_SH), ("run_autograder", RUN_AUTOGRADER)):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o755 << 16  # executable, as Gradescope runs them
            bundle.writestr(info, text)
        for name in BUNDLE_FILES:
            path = repo / name
            files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
            for file in files:
                relative = file.relative_to(repo)
                if "__pycache__" not in relative.parts and not any(p.endswith(".egg-info") for p in relative.parts):
                    bundle.write(file, relative.as_posix())
    return out


def run(root: Path) -> dict:
    """Grade the submission under `root` (Gradescope's /autograder) and write results/results.json."""
    started = time.perf_counter()
    source, out = root / "source", root / "work"
    notebooks = sorted((root / "submission").rglob("*.ipynb"),
                       key=lambda p: (download_index(p.stem), p.stat().st_mtime), reverse=True)
    if not notebooks:
        document = {"score": 0, "output": f"No notebook in the submission: upload {NOTEBOOK} (in Colab: File > "
                                          "Download > Download .ipynb)."}
    else:
        # One submission per container, discarded after it: no cgroup required (the row says if none held).
        setup = course.setup_batch(out / "course", source / "solutions" / NOTEBOOK, source / "autograder",
                                   one_per_container=True)
        [grade], _ = results.grade_class(out, [submission(root, notebooks[0])], setup)
        if row.is_grader_failure(grade.status, grade.message):  # no results.json: Gradescope says the autograder
            raise GraderFailed(grade.message)                   # failed and staff can run it again, never a 0
        document = results_json(grade, setup.points, _guard(out / "course", source / "autograder"))
        others = [p.name for p in notebooks[1:]]
        if others:
            document["output"] += f" Graded {notebooks[0].name}, the newest; not graded: {', '.join(others)}."
    document["execution_time"] = round(time.perf_counter() - started)
    (root / "results").mkdir(parents=True, exist_ok=True)
    (root / "results" / "results.json").write_text(json.dumps(document, indent=1))
    return document


def submission(root: Path, path: Path) -> Submission:
    """Who handed `path` in and when, from Gradescope's submission_metadata.json (the first submitter's SID,
    else email, else name; its created_at), or "student" and the file's time without it."""
    metadata_path = root / "submission_metadata.json"
    metadata = json.loads(metadata_path.read_text()) if metadata_path.is_file() else {}
    user = (metadata.get("users") or [{}])[0]
    name = str(user.get("sid") or user.get("email") or user.get("name") or "student")
    return Submission(nbgrader_id(name), path, name=name, submitted_at=metadata.get("created_at") or file_time(path),
                      root=root / "submission")  # the notebook is read following no link below it


def _guard(course: Path, autograder_dir: Path):
    """A message as students may see it: withheld if it shows a grader path or a line of the hidden checks."""
    secrets, hidden = leaks.grader_secrets(course, autograder_dir), leaks.hidden_lines(autograder_dir)
    return lambda message: WITHHELD if leaks.leaks(message, secrets, hidden) else message


def results_json(grade: row.Grade, points: dict[str, float], shown) -> dict:
    """Gradescope's results.json for one graded submission: the score and one entry per auto-graded test. A bonus
    test has max_score 0, so the points it earns show as extra credit, and the score includes them."""
    def outcome(test: str, max_points: float) -> str:
        if test in grade.failures:
            return shown(grade.failures[test])
        return "passed" if grade.tests.get(test, 0.0) >= max_points else "not run: see the submission's status"

    tests = [{"name": test, "score": grade.tests.get(test, 0.0), "max_score": max_points,
              "output": outcome(test, max_points),
              "visibility": "after_published" if test in grade.hidden_failed else "visible"}
             for test, max_points in points.items()]
    output = "Graded by the kit's checks." if grade.status == "graded" else f"Status: {grade.status}."
    if grade.message:
        output += f" {shown(grade.message)}"
    return {"score": grade.score + grade.extra_credit, "output": output, "tests": tests}


if __name__ == "__main__":
    run(Path(sys.argv[1]))
