"""Collecting a class's submissions and reading its roster, in the shapes LMSs and class folders come in.

    submissions = collect(Path("downloads.zip"), roster=read_roster(Path("roster.csv")))

A submissions folder (or a zip of one) may hold, mixed:
- flat files, `<student>.ipynb` ("Copy of alice.ipynb" and "alice (1).ipynb" are alice's);
- one folder per student with a notebook of any name (`frank/Speculative Decoding (1).ipynb`);
- nbgrader's `submitted/<student>/speculative_decoding/*.ipynb`;
- Gradescope's export (`submission_<n>/` folders and `submission_metadata.yml`, which names the student
  and the upload time of each).
Ids keep their Unicode ("Émilie"); nbgrader gets an ASCII id only where one is needed, and the row keeps
both. Two files of one student: the newest is graded (the later LMS upload time, then the larger "(n)"
download suffix, then the later file time) and the other is named in the row. Each submission carries
its time (the LMS's, else the file's, or the zip entry's, which LMS downloads set to the upload time).
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
import time
import unicodedata
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

SKIPPED_PARTS = {".ipynb_checkpoints", "__MACOSX"}
ROSTER_COLUMNS = ("student_id", "id", "sid", "login_id", "sis user id", "username", "email")  # tried in order


@dataclass
class Submission:
    student: str  # nbgrader's id: the name below when it is plain ASCII
    path: Path | None  # None for a roster student who submitted nothing
    problem: str = ""  # why it cannot be graded, empty if none
    name: str = ""  # the id as the folder or file gave it, Unicode kept
    submitted_at: str = ""  # ISO 8601 UTC: the file's time, or the zip entry's
    superseded: list[str] = field(default_factory=list)  # the student's other files, older, not graded
    on_roster: bool | None = None  # None when no roster was given

    def __post_init__(self):
        self.name = self.name or self.student


def student_name(stem: str, id_regex: str | None = None) -> str:
    """The id in a file or folder name: without "Copy of " and a "(n)" download suffix, or a regex group."""
    if id_regex:
        match = re.search(id_regex, stem)
        if not match:
            raise ValueError(f"--id-regex {id_regex!r} does not match {stem!r}")
        return match.group(1) if match.groups() else match.group(0)
    name = unicodedata.normalize("NFC", stem)
    name = re.sub(r"^Copy of\s+", "", name)
    name = re.sub(r"\s*\(\d+\)$", "", name)
    return re.sub(r"[^\w.-]+", "_", name).strip("_") or "unnamed"


def nbgrader_id(name: str) -> str:
    """An id nbgrader's paths and database take: ASCII letters, digits, `_`, `.`, `-`; accents dropped, and a
    short hash added where letters had to go, so that two names never meet in one id."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    plain = re.sub(r"[^A-Za-z0-9_.-]+", "_", ascii_name).strip("_.")
    if plain == name:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:6]
    return f"{plain}_{digest}" if plain else f"student_{digest}"


def download_index(stem: str) -> int:
    """The n of a browser's "name (n)" second download; 0 for the first."""
    match = re.search(r"\((\d+)\)$", stem)
    return int(match.group(1)) if match else 0


def _owner(relative: Path, id_regex: str | None, metadata: dict[str, tuple[str, str]]) -> str:
    """Whose file this is: by the LMS's metadata for its folder, else a top-level file by its own name and
    anything in a folder by the folder's."""
    if len(relative.parts) == 1:
        return student_name(relative.stem, id_regex)
    if relative.parts[0] in metadata:
        return unicodedata.normalize("NFC", metadata[relative.parts[0]][0])
    return student_name(relative.parts[0], id_regex)


def lms_metadata(root: Path) -> dict[str, tuple[str, str]]:
    """{folder: (student, upload time ISO 8601)} from Gradescope's submission_metadata.yml, if `root` has one
    (the first submitter's SID, else email, else name)."""
    path = root / "submission_metadata.yml"
    if not path.is_file():
        return {}
    import yaml

    def field(entry: dict, key: str):  # Gradescope writes Ruby symbols: ":created_at"
        return entry.get(f":{key}", entry.get(key))

    out = {}
    for folder, entry in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).items():
        who = (field(entry, "submitters") or [{}])[0]
        name = field(who, "sid") or field(who, "email") or field(who, "name")
        created = field(entry, "created_at")
        if name:
            out[str(folder)] = (str(name), created.isoformat() if isinstance(created, datetime) else str(created or ""))
    return out


def _notebooks(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.ipynb")
                  if p.is_file() and not SKIPPED_PARTS & set(p.relative_to(root).parts)
                  and not any(part.startswith(".") for part in p.relative_to(root).parts))


def unpack(archive: Path, into: Path) -> Path:
    """Extract a zip of submissions into `into`, each file keeping the zip entry's time (an LMS's upload time);
    a zip holding one folder is that folder."""
    into.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            target = (into / info.filename).resolve()
            if not target.is_relative_to(into.resolve()):
                raise ValueError(f"{archive}: the entry {info.filename!r} points outside the folder; not extracting")
            zipped.extract(info, into)
            if not info.is_dir():
                stamp = time.mktime((*info.date_time, 0, 0, -1))
                os.utime(target, (stamp, stamp))
    entries = [p for p in into.iterdir() if p.name not in SKIPPED_PARTS]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else into


def collect(submissions: Path, id_regex: str | None = None, roster: list[str] | None = None,
            unpack_dir: Path | None = None) -> list[Submission]:
    """Every student's submission under `submissions` (a folder or a zip, unpacked into `unpack_dir`), the
    newest of two files graded, roster students without a file added and students not on it marked."""
    if not submissions.exists():
        raise ValueError(f"{submissions} does not exist: pass the folder (or zip) of the class's notebooks")
    if submissions.is_file() and zipfile.is_zipfile(submissions):
        if unpack_dir is None:
            raise ValueError(f"{submissions} is a zip: pass a folder to unpack it into")
        submissions = unpack(submissions, unpack_dir)
    if not submissions.is_dir():
        raise ValueError(f"{submissions} is neither a folder nor a zip of submissions")
    if (submissions / "submitted").is_dir():  # an nbgrader course directory
        submissions = submissions / "submitted"
    metadata = lms_metadata(submissions)
    by_name: dict[str, list[Path]] = {}
    for path in _notebooks(submissions):
        by_name.setdefault(_owner(path.relative_to(submissions), id_regex, metadata), []).append(path)

    def uploaded(path: Path) -> str:
        folder = path.relative_to(submissions).parts[0]
        return metadata[folder][1] if folder in metadata and len(path.relative_to(submissions).parts) > 1 else ""

    def newness(path: Path) -> tuple:
        stamp = uploaded(path)
        return (datetime.fromisoformat(stamp).timestamp() if stamp else 0.0, download_index(path.stem),
                path.stat().st_mtime)

    on_roster = {unicodedata.normalize("NFC", s).casefold() for s in roster} if roster is not None else None
    taken: dict[str, str] = {}
    result = []
    for name, paths in sorted(by_name.items()):
        newest, *older = sorted(paths, key=newness, reverse=True)
        student = _unique(nbgrader_id(name), name, taken)
        result.append(Submission(student, newest, name=name, submitted_at=uploaded(newest) or file_time(newest),
                                 superseded=[str(p.relative_to(submissions)) for p in older],
                                 on_roster=None if on_roster is None else name.casefold() in on_roster))
    found = {name.casefold() for name in by_name}
    for name in roster or []:
        name = unicodedata.normalize("NFC", name)
        if name.casefold() not in found:
            result.append(Submission(_unique(nbgrader_id(name), name, taken), None, "no submission", name=name,
                                     on_roster=True))
    return result


def _unique(student: str, name: str, taken: dict[str, str]) -> str:
    """`student`, or with the name's hash when another name already has it (ids that differ only in case)."""
    if taken.get(student.casefold(), name) != name:
        student = f"{student}_{hashlib.sha1(name.encode()).hexdigest()[:6]}"
    taken[student.casefold()] = name
    return student


def file_time(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat(timespec="seconds")


def read_roster(path: Path, column: str | None = None) -> list[str]:
    """Student ids from a roster: a CSV with a header (Canvas's, Gradescope's: the id column is `column`, else
    the first of ROSTER_COLUMNS it has, else its first), or a plain file of one id per line."""
    text = path.read_text(encoding="utf-8-sig")
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"--roster: {path} lists no student")
    if column is None and "," not in lines[0]:
        return [line.strip() for line in lines]
    reader = csv.DictReader(lines)
    headers = reader.fieldnames or []
    if column is not None and column not in headers:
        raise ValueError(f"--roster-column {column!r} is not a column of {path}; its columns: {', '.join(headers)}")
    lower = {h.strip().casefold(): h for h in headers}
    chosen = column or next((lower[c] for c in ROSTER_COLUMNS if c in lower), headers[0])
    return [row[chosen].strip() for row in reader if (row.get(chosen) or "").strip()]
