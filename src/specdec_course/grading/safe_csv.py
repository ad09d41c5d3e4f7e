"""CSV cells that a spreadsheet reads as text, never as a formula (OWASP's rule against CSV injection).

Students choose much of what the kit writes to a CSV: their id and name (file and folder names) and the
messages their code's exceptions carry. Excel, LibreOffice and Google Sheets run a cell that starts with `=`, `+`,
`-` or `@`, and OWASP adds a leading tab or carriage return. Such a cell gets a leading apostrophe, which the
spreadsheets show as text; numbers ("-1.5", "+3") stay numbers. Every CSV the kit writes goes through here:

    with path.open("w", newline="", encoding="utf-8") as f:
        write_table(f, columns, rows)      # grades.csv, regrades.csv: the kit reads them back with read_table
    inert('=HYPERLINK("http://...")')     # "'=HYPERLINK(...)": a cell of a file for the LMS (platforms/lms.py)

In the files the kit reads back, a value that starts with an apostrophe gets one more, so that `read_table`
gives back every value exactly as it was written (tests/course/grading/test_safe_csv.py checks both properties).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from typing import IO

FORMULA_STARTS = ("=", "+", "-", "@")  # after any leading whitespace: LibreOffice's "trim spaces" would drop it
CONTROL_STARTS = ("\t", "\r")  # OWASP's: a spreadsheet may drop them and read what follows
QUOTE = "'"
# What a spreadsheet reads as a number: ASCII digits only (Python's \d also takes "٠", which a spreadsheet does not).
_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


def starts_formula(cell: str) -> bool:
    """Whether a spreadsheet could read `cell` as a formula: a formula's or OWASP's first character (after any
    leading whitespace), and not a number as written (no space around it)."""
    return (cell.startswith(CONTROL_STARTS) or cell.lstrip().startswith(FORMULA_STARTS)) \
        and not _NUMBER.fullmatch(cell)


def inert(value: object) -> str:
    """`value` as a cell that a spreadsheet reads as text: an apostrophe before a formula."""
    cell = str(value)
    return QUOTE + cell if starts_formula(cell) else cell


def escape(value: object) -> str:
    """`inert`, and an apostrophe before a value that already starts with one, so that `unescape` is exact."""
    cell = str(value)
    return QUOTE + cell if cell.startswith(QUOTE) else inert(cell)


def unescape(cell: str) -> str:
    """The value `escape` was given."""
    return cell[1:] if cell.startswith(QUOTE) else cell


def write_table(f: IO[str], columns: list[str], rows: Iterable[dict[str, object]]) -> None:
    """A header of `columns`, then `rows` (a missing key an empty cell), every cell through `escape`."""
    writer = csv.writer(f)
    writer.writerow([escape(column) for column in columns])
    writer.writerows([escape(row.get(column, "")) for column in columns] for row in rows)


def read_table(f: IO[str]) -> list[dict[str, str]]:
    """The rows `write_table` wrote, as dicts of the values it was given (a short row's missing cells empty)."""
    reader = csv.reader(f)
    header = [unescape(cell) for cell in next(reader, [])]
    return [dict(zip(header, [*map(unescape, row), *[""] * (len(header) - len(row))])) for row in reader]
