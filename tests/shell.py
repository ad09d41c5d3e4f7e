"""A notebook's cells run in an in-process IPython shell, each cell's output kept as a kernel would send it: what it
printed, what it displayed (mime bundles) and its error (the traceback's lines, as IPython renders them).

    with shell() as run:
        outputs = run(notebook, skip=lambda cell: "demo" in cell.metadata.get("tags", []))
        outputs["test_counts"].error_lines()       # the failure as the notebook shows it, colours removed

Seconds where a kernel takes tens: the same IPython formats the tracebacks, so the kit's way of showing them is
tested as students see it. The shell is IPython's singleton, cleared afterwards.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import nbformat

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass
class CellOutput:
    printed: str = ""
    displays: list[dict] = field(default_factory=list)  # each display's mime bundle
    ename: str = ""
    traceback: list[str] = field(default_factory=list)  # as the kernel sends it: one string a frame

    def error_lines(self) -> list[str]:
        """The failure as the notebook shows it, one line each, colours removed."""
        return ANSI.sub("", "\n".join(self.traceback)).splitlines()


def cell_name(cell: nbformat.NotebookNode, index: int) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {index}"


@contextlib.contextmanager
def shell():
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False  # no history database in the home folder
    ipython = InteractiveShell.instance(config=config)
    current: list[CellOutput] = []
    ipython._showtraceback = lambda etype, value, stb: (setattr(current[-1], "ename", etype.__name__),
                                                         setattr(current[-1], "traceback", list(stb)))
    ipython.display_pub.publish = lambda data, metadata=None, **kwargs: current[-1].displays.append(dict(data))

    def run(notebook: nbformat.NotebookNode, skip: Callable[[nbformat.NotebookNode], bool] = lambda cell: False
            ) -> dict[str, CellOutput]:
        outputs = {}
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "code" or skip(cell):
                continue
            current.append(CellOutput())
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                ipython.run_cell(cell.source)
            current[-1].printed = printed.getvalue()
            outputs[cell_name(cell, index)] = current[-1]
        return outputs

    try:
        yield run
    finally:
        InteractiveShell.clear_instance()
