"""`specdec-course time-notebook`: run the student notebook top to bottom as a student would, timing each cell.

    specdec-course time-notebook                          # the blank release
    specdec-course time-notebook --finished               # the solution as a student hands it in
    specdec-course time-notebook --finished --fresh-cache # as on a first run: the offline models built anew

Not as the grader runs it: demo cells run, nothing is graded, errors are recorded and the run goes on,
as "Run all" with a failing cell would in Jupyter. The student README's figures come from here.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import nbformat

from specdec_kit.core import settings

from .catalogue import Entry, make_submission


@dataclass(frozen=True)
class CellTime:
    cell: str  # grade_id, or the cell's tags and position
    seconds: float
    error: str  # the exception's name, "" if the cell ran through


def finished_notebook(solution: Path) -> nbformat.NotebookNode:
    """The solution as a student hands it in: solution markers and hidden tests removed."""
    return make_submission(solution, Entry("solution", "the reference solution"))


def cell_name(cell: nbformat.NotebookNode, index: int) -> str:
    grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
    return grade_id or f"cell {index} ({', '.join(cell.metadata.get('tags', [])) or 'untagged'})"


def time_cells(notebook: nbformat.NotebookNode, workdir: Path, fresh_cache: bool = False,
               progress: Callable[[CellTime], None] = lambda row: None) -> list[CellTime]:
    """Execute every code cell in a new kernel in `workdir`, each timed by this process's clock."""
    from nbclient import NotebookClient
    from traitlets.config import Config

    env = {settings.GRADING: ""}  # a student's run, even when the kit's own tests call this while grading
    with ExitStack() as stack:
        if fresh_cache:
            env[settings.CACHE] = stack.enter_context(tempfile.TemporaryDirectory(prefix="specdec-zoo-"))
        stack.enter_context(mock.patch.dict("os.environ", env))
        # The kernel on local sockets, as the student README's headless run has it (no TCP warning to print); their
        # path absolute, as the kernel runs in `workdir`, not here.
        sockets = {"transport": "ipc", "ip": str(workdir.resolve() / "kernel-ipc")}
        client = NotebookClient(notebook, timeout=1800, allow_errors=True, kernel_name="python3",
                                resources={"metadata": {"path": str(workdir)}},
                                config=Config({"KernelManager": sockets}))
        rows = []
        with client.setup_kernel():
            for index, cell in enumerate(notebook.cells):
                if cell.cell_type != "code":
                    continue
                started = time.perf_counter()
                client.execute_cell(cell, index)
                errors = [o.ename for o in cell.outputs if o.output_type == "error"]
                rows.append(CellTime(cell_name(cell, index), time.perf_counter() - started, ", ".join(errors)))
                progress(rows[-1])
    return rows
