"""The assignment's points, told once: in the cell headers of solutions/speculative_decoding.py (nbgrader's `points`,
a bonus test cell's `specdec={"extra_credit": N}`). The tables that show them, in the notebook's introduction and
in docs/students.md, are written from there between `<!-- points -->` and `<!-- /points -->`:

    points = read_points(Path("solutions/speculative_decoding.py"))   # {"test_loading": 6, ..., "report": 10}
    text = with_table(text, table(points))                           # the block between the markers, made afresh

`specdec-course build-notebook` writes both tables before it builds the notebook, and `--check` fails on a stale
one; the report's rubric must add up to the report cell's points. A change of the total is said, against the total
the replaced table stated (`stated_total`) or the replaced notebook's cells (`notebook_points`):

    total_change(points.total, {"docs/students.md": 100.0})   # "the total is now 102 points, was 100"
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from specdec_kit.protocol.adapters import is_graded_cell

BEGIN, END = "<!-- points -->", "<!-- /points -->"
EXTRA_CREDIT_KEY = "specdec"  # a bonus test cell's metadata: {"extra_credit": points}
REPORT = "report"


@dataclass(frozen=True)
class Part:
    name: str
    writes: str  # what students write in it
    tests: tuple[str, ...]  # its graded cells, in the notebook's order


PARTS = (
    Part("1. speculative decoding without caches", "`SpeculativeDecoder`: loading, drafting, verification, the loop",
         ("test_loading", "test_draft_tokens", "test_verify_alignment", "test_correction_and_bonus", "test_exact",
          "test_eos_and_budget", "test_counts")),
    Part("2. KV caches", "`CachedSpeculativeDecoder`", ("test_cached_exact", "test_cache_use", "test_speedup")),
    Part("report", "at most 400 words on the measured speedup against k, graded by hand against its rubric",
         (REPORT,)),
    Part("bonus: speculative sampling", "`SpeculativeSampler`", ("test_sampling",)),
    Part("bonus: prompt lookup", "`PromptLookupDecoder`", ("test_lookup",)),
    Part("bonus: adaptive k", "`AdaptiveSpeculativeDecoder`", ("test_adaptive",)),
)


@dataclass(frozen=True)
class Points:
    points: dict[str, float]  # graded cell -> nbgrader's points
    extra_credit: dict[str, float]  # bonus test cell -> its extra credit (0 nbgrader points)
    rubric: list[float]  # the report's rubric, row by row

    @property
    def total(self) -> float:
        """The assignment's points, extra credit aside (a bonus test cell gives 0 of nbgrader's points)."""
        return sum(self.points.values())


def read_points(solution_py: Path) -> Points:
    """The points of every graded cell of the jupytext source `solution_py`, and its report's rubric."""
    import jupytext

    return notebook_points(jupytext.read(solution_py))


def notebook_points(notebook) -> Points:
    """The points of every graded cell of `notebook` (an nbformat NotebookNode: jupytext's reading of the source, the
    nbgrader source or the release), and its report's rubric."""
    points, extra, rubric = {}, {}, []
    for cell in notebook.cells:
        nbgrader = cell.metadata.get("nbgrader", {})
        if nbgrader.get("grade"):
            points[nbgrader["grade_id"]] = float(nbgrader["points"])
            credit = cell.metadata.get(EXTRA_CREDIT_KEY, {}).get("extra_credit")
            if credit:
                extra[nbgrader["grade_id"]] = float(credit)
            if nbgrader["grade_id"] == REPORT:
                rubric = [float(row) for row in re.findall(r"^\| (\d+(?:\.\d+)?) \|", cell.source, re.M)]
    return Points(points, extra, rubric)


def problems(points: Points) -> list[str]:
    """What keeps the tables from being made: a graded cell no part lists, a part's test with no cell, a rubric
    that does not add up to the report's points."""
    listed = {test for part in PARTS for test in part.tests}
    found = [f"the graded cell {cell} is in no part of specdec_course.authoring.points.PARTS: add it there"
             for cell in points.points if cell not in listed]
    found += [f"{test} of PARTS has no graded cell in the solution" for test in listed if test not in points.points]
    if REPORT in points.points and sum(points.rubric) != points.points[REPORT]:
        found.append(f"the report's rubric adds up to {sum(points.rubric):g}, its cell gives "
                     f"{points.points[REPORT]:g}: make them agree")
    return found


def table(points: Points) -> str:
    """The points block: the table by part and the totals, as markdown."""
    def shown(test: str) -> str:
        if test in points.extra_credit:
            return f"`{test}` (+{points.extra_credit[test]:g} extra credit)"
        return f"{points.points[test]:g}" if test == REPORT else f"`{test}` ({points.points[test]:g})"

    total = points.total
    parts = {part.name: sum(points.points[t] for t in part.tests) for part in PARTS[:2]}
    rows = ["| part | what you write | tests (points) |", "|---|---|---|",
            *(f"| {part.name} | {part.writes} | {', '.join(map(shown, part.tests))} |" for part in PARTS)]
    return "\n".join([*rows, "", f"{total:g} points: part 1 {parts[PARTS[0].name]:g}, part 2 {parts[PARTS[1].name]:g}, "
                      f"the report {points.points[REPORT]:g}; extra credit up to {sum(points.extra_credit.values()):g} "
                      "more."])


def stated_total(text: str, prefix: str = "") -> float | None:
    """The total that the points block of `text` states (its last line, "100 points: ..."); None without a block."""
    found = re.search(rf"^{re.escape(prefix)}{re.escape(BEGIN)}\n.*?^{re.escape(prefix)}(\d+(?:\.\d+)?) points:.*?"
                      rf"^{re.escape(prefix)}{re.escape(END)}$", text, re.M | re.S)
    return float(found.group(1)) if found else None


def total_change(total: float, was: dict[str, float | None]) -> str | None:
    """The note "the total is now 102 points, was 100", where `was` maps each replaced file to the total it stated
    (None: unknown); None when every file stated `total` already. Files that stated different totals are named."""
    before = {name: old for name, old in was.items() if old is not None}
    if not before or all(old == total for old in before.values()):
        return None
    if len(set(before.values())) == 1:
        return f"the total is now {total:g} points, was {next(iter(before.values())):g}"
    return f"the total is now {total:g} points, was " + ", ".join(f"{old:g} in {name}" for name, old in before.items())


def with_table(text: str, block: str, prefix: str = "") -> str:
    """`text` with the lines between its markers replaced by `block` (each line after `prefix`: `# ` in a jupytext
    markdown cell)."""
    pattern = re.compile(rf"(^{re.escape(prefix)}{re.escape(BEGIN)}\n).*?(^{re.escape(prefix)}{re.escape(END)}$)",
                         re.M | re.S)
    if not pattern.search(text):
        raise ValueError(f"no {BEGIN} ... {END} block to write the points table in")
    body = "".join(f"{prefix}{line}".rstrip() + "\n" for line in block.splitlines())
    return pattern.sub(lambda m: m.group(1) + body + m.group(2), text, count=1)


def extra_credit(notebook) -> dict[str, float]:
    """Extra credit of every bonus test cell of `notebook`, by grade_id (its EXTRA_CREDIT_KEY metadata)."""
    return {c.metadata["nbgrader"]["grade_id"]: float(c.metadata[EXTRA_CREDIT_KEY]["extra_credit"])
            for c in notebook.cells if is_graded_cell(c) and EXTRA_CREDIT_KEY in c.metadata}
