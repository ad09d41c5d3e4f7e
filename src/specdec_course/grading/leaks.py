"""What a student's page or message must not show (`leaks`): the hidden-test and solution markers, the grading
machine's paths (`grader_secrets`), and the lines of the instructors' autograder files that students never see
(`hidden_lines`), as printed, in a repr, in hex or in base64.

    secrets, hidden = grader_secrets(course, Path("autograder")), hidden_lines(Path("autograder"))
    leaks(page_text, secrets, hidden)      # [] where the page shows none of them
"""

from __future__ import annotations

import base64
import html
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import nbformat

from ..core.nbgrader_course import FORBIDDEN_TEXT, NOTEBOOK

MIN_HIDDEN_LINE = 25  # shorter lines (`return decoder`, `k=3)`) are too common to mean the file was shown
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
TAG = re.compile(r"<[^>]*>")
_IMPORT_ONLY = re.compile(r"^(from\s+\S+\s+)?import\s")
_PUBLIC_SUFFIXES = {".py", ".json", ".toml", ".md", ".txt"}


class FeedbackError(RuntimeError):
    """The feedback would show what students must not see, or the course is not set up to clean it."""




def grader_secrets(course: Path, autograder_dir: Path) -> list[str]:
    """Absolute paths of the grading machine, as given and resolved, longest first."""
    package = Path(__file__).parents[1]  # the instructor package
    paths = [course, autograder_dir, autograder_dir.parent, package, Path(sys.prefix)]
    forms = {str(form) for path in paths for form in (path.absolute(), path.resolve())}
    # The root would scrub every path in every output and flag all of them as leaks.
    return sorted((form for form in forms if form != Path(form).anchor), key=len, reverse=True)


def _text_files(folder: Path, suffixes: set[str]) -> Iterator[Path]:
    return (p for p in sorted(folder.rglob("*")) if p.suffix in suffixes and "__pycache__" not in p.parts)


def _public_text(autograder_dir: Path) -> str:
    """What students may see: the release notebook's cells (next to autograder/) and the kit's package."""
    release = autograder_dir.parent / "assignment" / NOTEBOOK
    if not release.is_file():
        raise FeedbackError(f"no student release at {release}: hidden_lines needs it to tell the autograder's "
                            "lines that students see from those they must not")
    cells = [cell.source for cell in nbformat.read(release, as_version=4).cells]
    package = [p.read_text(errors="replace") for p in _text_files(Path(__file__).parents[1], _PUBLIC_SUFFIXES)]
    return "\n".join([*cells, *package])


def hidden_lines(autograder_dir: Path) -> list[str]:
    """Lines of the instructors' autograder files (*.py, *.toml) that only a printed copy of them would show.

    A line counts if, stripped, it has at least MIN_HIDDEN_LINE characters, is not only a comment or an
    import, and is nowhere in the student release or the public package (as a substring: a line students
    see inside a longer one of theirs, `from specdec_kit import checks`, must not flag their page).
    """
    public = _public_text(autograder_dir)
    lines = set()
    for path in _text_files(autograder_dir, {".py", ".toml"}):
        for line in path.read_text(errors="replace").splitlines():
            line = line.strip()
            if (len(line) >= MIN_HIDDEN_LINE and not line.startswith("#") and not _IMPORT_ONLY.match(line)
                    and line not in public):
                lines.add(line)
    return sorted(lines)


def _shown_forms(line: str) -> set[str]:
    """The line as printed, as inside the repr of the file's text (an expression cell's output shows that), and
    inside the file's text encoded as hex or base64 (at each of base64's three alignments)."""
    escaped = line.replace("\\", "\\\\")
    data = line.encode()
    # A repr escapes ' only when it quotes with '.
    forms = {line, escaped, escaped.replace("'", "\\'"), data.hex(), data.hex().upper()}
    for offset in range(3):  # the line's bytes start `offset` bytes into a 3-byte group of the encoded file
        encoded = base64.b64encode(bytes(offset) + data).decode()
        forms.add(encoded[4 if offset else 0:-4])  # the ends depend on the bytes around the line: left out
    return forms


def leaks(text: str, secrets: list[str], hidden: Iterable[str] = ()) -> list[str]:
    """What `text` (a notebook's text or its HTML page) shows that students must not see, in that order:

    the hidden-test and solution markers and imports of the hidden package (release.FORBIDDEN_TEXT), a grader
    path in `secrets`, and a line in `hidden` (hidden_lines) in any form `_shown_forms` knows.
    """
    # HTML splits code into highlighting spans and escapes quotes (&quot;): search its plain text too.
    plain = html.unescape(TAG.sub("", ANSI.sub("", text)))
    found = [item for item in (*FORBIDDEN_TEXT, *secrets) if item in text or item in plain]
    found += [line for line in hidden if any(form in text or form in plain for form in _shown_forms(line))]
    return found


def strings(node) -> Iterator[str]:
    """Every string in a notebook, unescaped (JSON would show `pair=\\"tiny-b\\"`, not the line as written)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)


def describe(found: list[str]) -> str:
    return "; ".join(repr(item if len(item) <= 60 else item[:57] + "...") for item in found)
