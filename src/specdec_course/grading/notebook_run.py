"""A submission's own run: the file read as a notebook (given back what an editor took from the assignment's
cells), then nbgrader autograde running it whole in a kernel, for the feedback page, the hand-graded report and
formgrader. The course's source is the student release, so the kernel runs the visible tests only; it has
neither `autograder/` nor `solutions/` on its import path or under its working directory; demo cells are skipped;
the notebook and each cell have time limits and a dying kernel is reported in its cell (`nbgrader_course.py`). The
kernel alone runs in a sandbox of its own (`kernel.py`), with the submission's files as its scratch folder and
the batch's isolation; nbgrader, its gradebook and the course stay outside.
"""

from __future__ import annotations

import ast
import copy
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

from specdec_kit.checks.core import WALL_FACTOR
from specdec_kit.core import settings
from specdec_kit.protocol.adapters import parse_python

from ..core.nbgrader_course import ASSIGNMENT, nbgrader_env
from ..core.regular_files import RefusedEntry, read_below
from ..sandbox.box import Limits, Sandbox
from ..sandbox.kernel import SANDBOX_ENV
from .course import BatchSetup
from .gradebook import DB_RETRIES
from .preprocessors import cell_label, read_run_record
from .verdict import sandbox_limits

NBGRADER_MARGIN = 120  # seconds beyond the notebook's limit for nbgrader itself (kernel start, saving)
SPACE_ERRORS = ("[Errno 28]", "[Errno 122]", "[Errno 27]")  # how OSError shows ENOSPC, EDQUOT, EFBIG


class InvalidSubmission(ValueError):
    """A file that cannot be graded as a notebook, with what the student can do about it."""


def read_submission(path: Path, root: Path | None = None) -> tuple[nbformat.NotebookNode, list[str]]:
    """The notebook in nbformat 4, and notes on what had to be done to it (conversion, missing metadata). `path` is
    read as a regular file, following no link below `root` (by default its own folder): anything else is invalid."""
    redownload = "re-download it from Colab (File > Download > Download .ipynb) or Jupyter and submit again"
    root = root or path.parent
    try:
        data = read_below(root, path.relative_to(root))
    except RefusedEntry as e:
        raise InvalidSubmission(f"not read: {e}; hand in the notebook itself (the .ipynb file, not a link or a "
                                "shortcut to it)") from None
    if not data:
        raise InvalidSubmission(f"the file is empty: {redownload}")
    try:
        raw = nbformat.reads(data.decode("utf-8"), as_version=nbformat.NO_CONVERT)
    except Exception as e:  # nbformat raises several unrelated types for a malformed file
        raise InvalidSubmission(f"not a Jupyter notebook ({type(e).__name__}): {redownload}") from None
    notes = []
    version = raw.get("nbformat")
    if not isinstance(version, int) or version < 1:
        raise InvalidSubmission(f"not a Jupyter notebook (JSON without a notebook's fields): {redownload}")
    if version < 4:
        try:
            notebook = nbformat.convert(raw, 4)
        except Exception:
            raise InvalidSubmission(f"notebook format {version} is too old to convert: open it in Jupyter, "
                                    "save it, and submit the saved file") from None
        notes.append(f"notebook format {version} (Jupyter before 2015): converted to format 4 and graded")
    else:
        notebook = raw
    if "cells" not in notebook:
        raise InvalidSubmission(f"not a Jupyter notebook (JSON without cells): {redownload}")
    if not any(cell.get("cell_type") == "code" and cell.get("source") for cell in notebook["cells"]):
        raise InvalidSubmission("the notebook holds no code: check that this is the file you meant to submit")
    nbformat.validator.normalize(notebook)
    if not any(cell.get("metadata", {}).get("nbgrader") for cell in notebook.cells):
        notes.append("the notebook's grading metadata was gone (an editor removed it): graded from the classes "
                     "found in its code")
    return nbformat.from_dict(notebook), notes


def match_release(notebook: nbformat.NotebookNode, release: nbformat.NotebookNode) -> list[str]:
    """Give back, in place, what an editor took from the assignment's cells, matching them to the release's:
    an answer cell turned into markdown becomes code again (as nbgrader does), and a cell whose grading
    metadata was stripped gets it back when it is the same cell (same text; for an answer cell, the same
    class defined, or the same first line). Returns notes for the row; unmatched cells stay as they are
    (nbgrader restores missing test cells itself)."""
    notes = []
    release_cells = {c.metadata["nbgrader"]["grade_id"]: c for c in release.cells if c.metadata.get("nbgrader")}
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        original = release_cells.get(grade_id)
        if original is not None and original.cell_type == "code" and cell.cell_type != "code":
            cell.cell_type, cell.outputs, cell.execution_count = "code", [], None
            notes.append(f"the answer cell {grade_id} had been turned into {cell.get('cell_type', 'text')}: graded "
                         "as code, as the assignment has it")
    present = {c.metadata.get("nbgrader", {}).get("grade_id") for c in notebook.cells}
    restored = []
    for grade_id, original in release_cells.items():
        if grade_id in present:
            continue
        match = next((c for c in notebook.cells if not c.metadata.get("nbgrader") and _same_cell(c, original)), None)
        if match is not None:
            match.metadata["nbgrader"] = copy.deepcopy(original.metadata["nbgrader"])
            restored.append(grade_id)
    if restored:
        notes.append(f"grading metadata restored on {len(restored)} cells matched to the assignment's")
    return notes


def _same_cell(cell: nbformat.NotebookNode, original: nbformat.NotebookNode) -> bool:
    if cell.cell_type != original.cell_type:
        return False
    if cell.source.strip() == original.source.strip():
        return True
    if not original.metadata["nbgrader"].get("solution"):
        return False
    if original.cell_type == "code":
        return bool(_classes(original.source)) and _classes(cell.source) == _classes(original.source)
    first = original.source.strip().splitlines()[0]
    return cell.source.strip().startswith(first)


def _classes(source: str) -> set[str]:
    try:
        return {node.name for node in parse_python(source).body if isinstance(node, ast.ClassDef)}
    except SyntaxError:
        return set()


@dataclass
class NotebookRun:
    """nbgrader autograde of one student, in its own process group, with the kit's limits."""

    course: Path
    student: str
    setup: BatchSetup
    log_dir: Path
    record: dict | None = None
    killed: bool = False  # the whole nbgrader run outlived its limit and was killed
    error: str = ""  # nbgrader's last words when it failed

    def run(self) -> None:
        record_path = self.log_dir / f"{self.student}.run.json"
        record_path.unlink(missing_ok=True)
        args = ["autograde", ASSIGNMENT, "--student", self.student, "--create", "--force"]
        limit = nbgrader_backstop(self.setup)
        limits = sandbox_limits(self.setup.plan, extra_memory_mb=1024)  # a kernel, no verdict's host
        box = Sandbox(f"{self.student}-kernel", self.setup.isolation, limits)
        try:
            box.seed(self.course / "submitted" / self.student / ASSIGNMENT)
            env = {**kernel_env(self.setup.threads, record_path), SANDBOX_ENV: box.describe()}
            for _ in range(DB_RETRIES):
                try:
                    done = _run_nbgrader(self.course, args, env, limit)
                except subprocess.TimeoutExpired:
                    self.killed = True
                    break
                if "database is locked" not in done.stdout + done.stderr:  # parallel jobs share one gradebook
                    break
            else:
                done = None
        finally:
            box.close()  # every process the notebook started is gone before the speed test or the next student
        if done is not None:
            (self.log_dir / f"{self.student}.nbgrader.log").write_text(done.stdout + done.stderr)
            if done.returncode != 0:
                self.error = _nbgrader_error(done.stdout + done.stderr) or f"exit status {done.returncode}"
        self.record = read_run_record(record_path)


def nbgrader_backstop(setup: BatchSetup) -> float:
    """Seconds on the clock after which nbgrader's whole run is killed: past the notebook's budget's own backstop
    (its limit is in the kernel's own time, `cell_watch.py`), with a margin for nbgrader itself."""
    return setup.notebook_seconds * WALL_FACTOR + NBGRADER_MARGIN


def space_notes(autograded: nbformat.NotebookNode | None, limits: Limits) -> list[str]:
    """A sentence on the cells of the notebook's own run that ran out of the sandbox's space, if any did: a write
    past the scratch folder's bytes or files (ENOSPC), a quota (EDQUOT) or the largest file (EFBIG)."""
    def out_of_space(output) -> bool:
        return output.output_type == "error" and any(code in output.get("evalue", "") for code in SPACE_ERRORS)

    full = [cell_label(cell, index) for index, cell in enumerate(autograded.cells if autograded else [])
            if cell.cell_type == "code" and any(map(out_of_space, cell.get("outputs", [])))]
    if not full:
        return []
    return [f"the notebook's own run ran out of its sandbox's space in {', '.join(full)} (its scratch folder and /tmp "
            f"hold {limits.scratch_mb} MB in {limits.scratch_files} files, a file at most {limits.file_mb} MB): "
            "those cells failed, and the run went on"]


def kernel_env(threads: int, record_path: Path) -> dict:
    """The environment of nbgrader and its kernel: offline, threads pinned, no instructor folder importable."""
    env = nbgrader_env()
    thread_count = str(threads)
    env.update({settings.GRADING: "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                settings.THREADS: thread_count, "OMP_NUM_THREADS": thread_count, "MKL_NUM_THREADS": thread_count,
                settings.RUN_RECORD: str(record_path)})
    env.pop(settings.SELFTEST, None)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
             if p and not any((Path(p) / folder).exists() for folder in ("autograder", "solutions"))]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _nbgrader_error(output: str) -> str:
    """The exception that stopped nbgrader (the last `Name: message` line of its traceback), or ""."""
    lines = [line.strip() for line in output.splitlines()]
    return next((line for line in reversed(lines) if re.match(r"^[A-Za-z_.]*(Error|Exception)\b.*:", line)), "")


def _run_nbgrader(course: Path, args: list[str], env: dict, timeout: int) -> subprocess.CompletedProcess:
    """nbgrader in its own process group (its kernel in the sandbox): on timeout the whole group is killed."""
    process = subprocess.Popen([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
