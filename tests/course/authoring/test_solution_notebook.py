"""The solution notebook runs top to bottom on the CPU, offline, demo and benchmark cells included."""

import re
import shutil

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO, SOLUTION


@pytest.mark.slow  # a kernel runs the whole notebook: about a minute
@pytest.mark.release
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
    warned = [line for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs
              if out.get("name") == "stderr" for line in out.text.splitlines() if re.search(r"(?i)warn|deprecat", line)]
    assert not warned, f"a finished notebook's run shows no warning (the kit's, the solution's, a library's): {warned}"


def test_report_terms_are_defined_and_its_rubric_adds_up_to_its_points():
    """The report asks about alpha, c and the theory curves: the notebook defines each before it, and the
    rubric's points add up to the report cell's."""
    cells = nbformat.read(SOLUTION, as_version=4).cells
    report = next(i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "report")
    before = "".join(c.source for c in cells[:report] if c.cell_type == "markdown")
    for term in ("speedup", "acceptance rate", "alpha", "c", "Leviathan's prediction", "forward-bound speedup"):
        assert f"**{term}**" in before, f"the notebook should define **{term}** before the report asks about it"
    rubric = [int(line.split("|")[1]) for line in cells[report].source.splitlines()
              if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    points = cells[report].metadata["nbgrader"]["points"]
    assert rubric and sum(rubric) == points, f"the rubric's points {rubric} should add up to the report's {points}"
