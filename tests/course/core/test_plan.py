"""The grading plan (`specdec_course.core.plan`): its tests are the solution's auto-graded cells, the one home of the
list of tests, which the parts (`authoring.points.PARTS`), the visible checks' words (`checks.cells.CHECKED`) and the
corpora's lists are checked against or made from."""

import nbformat

from specdec_course.authoring.points import PARTS, REPORT
from specdec_course.core.plan import load_plan

from conftest import REPO, SOLUTION


def graded_cells() -> list[str]:
    notebook = nbformat.read(SOLUTION, as_version=4)
    return [cell.metadata["nbgrader"]["grade_id"] for cell in notebook.cells
            if cell.metadata.get("nbgrader", {}).get("grade")]


def test_the_plan_grades_every_auto_graded_cell_of_the_solution_in_its_order():
    cells = [cell for cell in graded_cells() if cell != REPORT]
    assert list(load_plan(REPO / "autograder").tests) == cells, (
        "autograder/hidden.py's TESTS should pair every auto-graded cell of the solution with its checks, in the "
        f"notebook's order: {cells}")


def test_the_parts_list_the_graded_cells_in_their_order():
    assert [test for part in PARTS for test in part.tests] == graded_cells(), \
        "specdec_course.authoring.points.PARTS should list the solution's graded cells in the notebook's order"
