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


def with_points(text: str, test: str, was: float, new: float) -> str:
    """`text` (the solution's source) with the header of `test` giving `new` points instead of `was`."""
    header = f'"grade_id": "{test}", "locked": true, "points": {was:g},'
    assert text.count(header) == 1, f"the header of {test} must give {was:g} points"
    return text.replace(header, header.replace(f'"points": {was:g},', f'"points": {new:g},'))


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
        text = with_points(text, test, points[test], new)
    solution.write_text(text)
    assert main(["build-notebook", "--check", str(solution), "--docs", str(docs)]) == 1
    assert "stale" in capsys.readouterr().err
    assert main(["build-notebook", str(solution), "--docs", str(docs)]) == 0
    out = capsys.readouterr().out
    assert "total" not in out and f"wrote the points tables of {solution} and {docs}" in out, (
        f"a transfer keeps the total, and build-notebook names both tables it wrote: {out!r}")
    for page in (solution, docs):
        written = page.read_text()
        assert all(f"`{test}` ({new:g})" in written for test, new in moved.items()), f"{page.name}: {written[:2000]}"
        assert totals in written, f"a transfer keeps the totals ({totals!r})"
    assert main(["build-notebook", "--check", str(solution), "--docs", str(docs)]) == 0


def test_a_points_change_that_moves_the_total_is_said_with_every_page_it_rewrote(tmp_path, capsys):
    """test_exact raised by 2 in its header alone: build-notebook says the new total and the old (the one its tables
    stated), naming docs/students.md among the pages it rewrote, in one line; a second build says nothing of it."""
    solution, docs = tmp_path / "speculative_decoding.py", tmp_path / "students.md"
    shutil.copy(SOURCE, solution)
    shutil.copy(REPO / "docs" / "students.md", docs)
    points = read_points(SOURCE)
    was, now = points.total, points.total + 2
    solution.write_text(with_points(SOURCE.read_text(), "test_exact", points.points["test_exact"],
                                    points.points["test_exact"] + 2))
    assert main(["build-notebook", "--check", str(solution), "--docs", str(docs)]) == 1
    err = capsys.readouterr().err
    assert f"the total is now {now:g} points, was {was:g}" in err, f"--check says how the total moved: {err!r}"
    assert main(["build-notebook", str(solution), "--docs", str(docs)]) == 0
    out = capsys.readouterr().out
    line = f"the total is now {now:g} points, was {was:g}: wrote the points tables of {solution} and {docs}"
    assert line in out.splitlines(), f"one line should give the new total, the old and both pages written: {out!r}"
    assert f"{now:g} points: part 1" in docs.read_text(), "docs/students.md's table states the new total"
    assert main(["build-notebook", str(solution), "--docs", str(docs)]) == 0
    again = capsys.readouterr().out
    assert "total" not in again and "points table" not in again, f"a second build changes no table: {again!r}"


def test_a_release_says_how_the_total_moved_from_the_notebook_it_replaces(tmp_path):
    """The release notebook replaced gave 100 points, the solution now gives 102: the note says so; against an equal
    total, a missing notebook or a file that is no notebook, there is none."""
    import nbformat

    from specdec_course.authoring.release import points_note

    source = nbformat.read(REPO / "solutions" / "speculative_decoding.ipynb", as_version=4)
    was = read_points(SOURCE).total
    replaced = tmp_path / "replaced.ipynb"
    nbformat.write(source, replaced)
    cell = next(c for c in source.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_exact")
    cell.metadata["nbgrader"]["points"] += 2
    solution = tmp_path / "solution.ipynb"
    nbformat.write(source, solution)
    assert points_note(solution, replaced) == f"the total is now {was + 2:g} points, was {was:g}"
    assert points_note(replaced, replaced) is None, "an equal total needs no note"
    assert points_note(solution, tmp_path / "none.ipynb") is None, "a first release has nothing to compare with"
    (tmp_path / "text.ipynb").write_text("not a notebook")
    assert points_note(solution, tmp_path / "text.ipynb") is None, "a file that is no notebook gives no total"


def test_the_report_rubric_adds_up_to_the_report_cells_points(tmp_path, capsys):
    solution, docs = tmp_path / "speculative_decoding.py", tmp_path / "students.md"
    shutil.copy(REPO / "docs" / "students.md", docs)
    row = "# | 3 | why the measured speedup"
    solution.write_text(SOURCE.read_text().replace(row, row.replace("3", "4")))
    assert main(["build-notebook", "--check", str(solution), "--docs", str(docs)]) == 1
    assert "rubric adds up to 11" in capsys.readouterr().err
