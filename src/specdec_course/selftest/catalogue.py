"""The catalogue of known student bugs and correct variants (`autograder/catalogue.py`), read by the
selftest, the kit's tests and the table in docs/instructors.md.

    entries = load_catalogue(Path("autograder"))
    notebook = make_submission(Path("solutions/speculative_decoding.ipynb"), entries[0])   # as handed in

Each entry is the reference solution with `edits` (exact (old, new) replacements, each found once in the
solution's code), its `kind` (`bug` or `variant`: correct code written differently, which loses only what it gives
up, as `variant_uncached_only` gives up the caches), the tests it must lose (`fails`), `message`, the words of
the check's verdict its feedback must show, and `messages`, the words each lost test's message must hold (its
cause). `losses` finds which tests an entry loses, without nbgrader or timing.
Importing this module needs no nbgrader.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..authoring.release import source_notebook
from ..core.nbgrader_course import BEGIN_SOLUTION, END_SOLUTION, FORBIDDEN_TEXT, remove_hidden_tests

KINDS = ("bug", "variant")
_MARKER = re.compile(rf"^[ \t]*({BEGIN_SOLUTION}|{END_SOLUTION})[ \t]*(\n|$)", re.M)


@dataclass(frozen=True)
class Entry:
    """One catalogue submission: edits to the solution's code and the tests expected to lose points."""

    name: str
    description: str
    kind: str = "bug"  # or "variant"
    edits: tuple[tuple[str, str], ...] = ()
    fails: frozenset[str] = field(default_factory=frozenset)
    message: str = ""  # text the student's feedback must show: the check's words for this bug
    messages: tuple[tuple[str, str], ...] = ()  # (test, words its message must hold) for each test a bug loses


def load_catalogue(autograder_dir: Path) -> list[Entry]:
    spec = importlib.util.spec_from_file_location("specdec_catalogue", autograder_dir / "catalogue.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    entries = [Entry(e["name"], e["description"], e.get("kind", ""), tuple(e.get("edits", ())),
                     frozenset(e.get("fails", ())), e.get("message", ""),
                     tuple(sorted(e.get("messages", {}).items())))
               for e in module.CATALOGUE]
    wrong = [e.name for e in entries if e.kind not in KINDS]
    if wrong:
        raise ValueError(f"{autograder_dir / 'catalogue.py'}: the entries {', '.join(wrong)} need a kind, one of "
                         f"{KINDS}")
    return entries


def make_submission(solution: Path, entry: Entry) -> nbformat.NotebookNode:
    """The solution as a student would hand it in, with `entry`'s edits (each must apply exactly once)."""
    notebook = nbformat.reads(source_notebook(solution), as_version=4)
    for cell in notebook.cells:  # the report, a markdown answer cell, keeps its text as a written report
        cell.source = _MARKER.sub("", remove_hidden_tests(cell.source))
    for old, new in entry.edits:
        cells = [cell for cell in notebook.cells if cell.cell_type == "code" and old in cell.source]
        count = sum(cell.source.count(old) for cell in cells)
        if count != 1:
            raise ValueError(f"catalogue entry {entry.name!r}: {old!r} occurs {count} times in the solution's code, "
                             "not once; update the entry")
        cells[0].source = cells[0].source.replace(old, new)
    text = nbformat.writes(notebook)
    leaks = [marker for marker in FORBIDDEN_TEXT if marker in text]
    if leaks:
        raise ValueError(f"submission {entry.name!r} still holds {leaks}")
    return notebook




def catalogue_table(entries: list[Entry]) -> str:
    """docs/instructors.md's table of the catalogue: one row per entry, what the student wrote and what it loses."""
    rows = ["| entry | what the student wrote | tests it loses |", "|---|---|---|"]
    for entry in entries:
        lost = ", ".join(f"`{t}`" for t in sorted(entry.fails)) or "none (a correct variant)"
        rows.append(f"| `{entry.name}` | {entry.description} | {lost} |")
    return "\n".join(rows) + "\n"
