"""Build a notebook from its jupytext percent-format twin, byte for byte the same every time.

    specdec-course build-notebook solutions/speculative_decoding.py           # writes the .ipynb beside it
    specdec-course build-notebook solutions/speculative_decoding.py --check   # exit 1 if the .ipynb is stale

The `.py` is the file people edit and review; the `.ipynb` is derived. jupytext gives new cells random
ids, so ids are set here: a cell's nbgrader `grade_id` when it has one, else its type and position.
"""

from __future__ import annotations

from pathlib import Path

import nbformat


def render_notebook(py_path: str | Path) -> str:
    """The .ipynb text for the percent-format script at `py_path`, outputs empty."""
    try:
        import jupytext
    except ImportError:
        raise ImportError("building notebooks needs jupytext: pip install 'specdec-kit[dev]'") from None
    notebook = jupytext.read(py_path)
    for index, cell in enumerate(notebook.cells):
        cell.id = cell.metadata.get("nbgrader", {}).get("grade_id") or f"{cell.cell_type}-{index:02d}"
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.validate(notebook)
    return nbformat.writes(notebook) + "\n"


def ipynb_path(py_path: str | Path) -> Path:
    return Path(py_path).with_suffix(".ipynb")


def build_notebook(py_path: str | Path) -> Path:
    """Write the .ipynb beside `py_path` and return its path."""
    out = ipynb_path(py_path)
    out.write_text(render_notebook(py_path))
    return out


def notebook_is_current(py_path: str | Path) -> bool:
    out = ipynb_path(py_path)
    return out.is_file() and out.read_text() == render_notebook(py_path)
