"""The solution notebook runs top to bottom on the CPU, offline, demo and benchmark cells included."""

import shutil

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO, SOLUTION


@pytest.mark.slow  # a kernel runs the whole notebook: about a minute
def test_solution_runs_top_to_bottom(tmp_path, monkeypatch):
    """Test cells included: their hidden parts import `autograder`, which grading puts on the path."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the kernel inherits both
    monkeypatch.setenv("SPECDEC_GRADING", "1")  # as the grader runs it: offline, on the tiny pair
    notebook_path = tmp_path / SOLUTION.name
    shutil.copy(SOLUTION, notebook_path)
    notebook = nbformat.read(notebook_path, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
                   ).execute()
    outputs = "".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for out in cell.outputs)
    assert "acceptance rate" in outputs and "'speedup'" in outputs, (
        f"the notebook's outputs should print an acceptance rate and a 'speedup' entry; they end:\n{outputs[-2000:]}"
    )
    assert any(out.output_type == "display_data" and "image/png" in out.data
               for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs), "the plot shows"
