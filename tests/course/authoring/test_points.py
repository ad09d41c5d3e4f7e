"""The assignment's points have one home, the solution's cell headers (`specdec_course.authoring.points`): the
notebook's table and docs/students.md's follow them (the screenshots of `make views` show no points).

Example run: python -m pytest tests/course/authoring/test_points.py -q
"""

import re
import shutil

from specdec_course.authoring.points import read_points
from specdec_course.cli import main

from conftest import REPO

SOURCE = REPO / "solutions" / "speculative_decoding.py"


def test_changing_points_in_the_headers_alone_updates_every_table(tmp_path, capsys):
    """Two points moved from test_exact to test_counts in the cell headers alone: build-notebook --check finds both
    tables stale, build-notebook writes them (the totals kept), and --check then passes."""
    solution, docs = tmp_path / "speculative_decoding.py", tmp_path / "students.md"
    shutil.copy(SOURCE, solution)
    shutil.copy(REPO / "docs" / "students.md", docs)
    text, points = solution.read_text(), read_points(SOURCE).points
    totals = re.search(r"\d+ points: part 1 \d+,", text).group(0)
    moved = {"test_counts": points["test_counts"] + 2, "test_exact": points["test_exact"] - 2}
    for test, new in moved.items():
        header = f'"grade_id": "{test}", "locked": true, "points": {points[test]:g},'
        assert text.count(header) == 1, f"the header of {test} must give {points[test]:g} points"
        text = text.replace(header, header.replace(f'"points": {points[test]:g},', f'"points": {new:g},'))
    solution.write_text(text)
    assert main(["build-notebook", "--check", str(solution), "--docs", str(docs)]) == 1
    assert "stale" in capsys.readouterr().err
    assert main(["build-notebook", str(solution), "--docs", str(docs)]) == 0
    for page in (solution, docs):
        written = page.read_text()
        assert all(f"`{test}` ({new:g})" in written for test, new in moved.items()), f"{page.name}: {written[:2000]}"
        assert totals in written, f"a transfer keeps the totals ({totals!r})"
    assert main(["build-notebook", "--check", str(solution), "--docs", str(docs)]) == 0


def test_the_report_rubric_adds_up_to_the_report_cells_points(tmp_path, capsys):
    solution, docs = tmp_path / "speculative_decoding.py", tmp_path / "students.md"
    shutil.copy(REPO / "docs" / "students.md", docs)
    row = "# | 3 | why the measured speedup"
    solution.write_text(SOURCE.read_text().replace(row, row.replace("3", "4")))
    assert main(["build-notebook", "--check", str(solution), "--docs", str(docs)]) == 1
    assert "rubric adds up to 11" in capsys.readouterr().err
