"""Collecting a class's submissions and reading its roster, in the shapes LMSs and class folders come in.

    submissions = collect(Path("downloads.zip"), roster=read_roster(Path("roster.csv")), unpack_dir=Path("unpacked"))

A submissions folder (or a zip or tar of one, `archives.py`) may hold, mixed:
- flat files, `<student>.ipynb` ("Copy of alice.ipynb" and "alice (1).ipynb" are alice's);
- one folder per student with a notebook of any name (`frank/Speculative Decoding (1).ipynb`);
- nbgrader's `submitted/<student>/speculative_decoding/*.ipynb`;
- Gradescope's export (`submission_<n>/` folders and `submission_metadata.yml`, which names the student
  and the upload time of each).
Only regular files are read, never through a link (`regular_files.py`): a student whose files include a symbolic
or hard link, a device, a FIFO or an archive entry leading outside the folder gets a row of status `invalid` that
names it, and nothing of theirs is read. Ids keep their Unicode ("Émilie") as the file or folder gives it; nbgrader
gets an ASCII id only where one is needed, and the row keeps both. Two ids that differ only in case or Unicode
normalisation are two students (two rows); a roster, like an LMS's export, matches an id regardless of case only
where no other id is the same but for case (`match_ids`). Two files of one student: the newest is graded (the later
LMS upload time, then the larger "(n)" download suffix, then the later file time) and the other is named in the
row. Each submission carries its time (the LMS's, else the file's, or the archive entry's, which LMS downloads set
to the upload time).
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
import stat
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from ..core.regular_files import Refused, read_below, walk
from .archives import ArchiveLimits, ArchiveRefused, archive_stem, is_archive, unpack

SKIPPED_PARTS = {".ipynb_checkpoints", "__MACOSX"}
ROSTER_COLUMNS = ("student_id", "id", "sid", "login_id", "sis user id", "username", "email")  # tried in order


@dataclass
class Submission:
    student: str  # nbgrader's id: the name below when it is plain ASCII
    path: Path | None  # None for a roster student who submitted nothing
    problem: str = ""  # why it cannot be graded (nothing submitted, or an entry refused), empty if none
    name: str = ""  # the id as the folder or file gave it, Unicode kept
    submitted_at: str = ""  # ISO 8601 UTC: the file's time, or the zip entry's
    superseded: list[str] = field(default_factory=list)  # the student's other files, older, not graded
    on_roster: bool | None = None  # None when no roster was given
    root: Path | None = None  # the folder it was found in: reading `path` follows no link below it (default: its own)

    def __post_init__(self):
        self.name = self.name or self.student


def student_name(stem: str, id_regex: str | None = None) -> str:
    """The id in a file or folder name: without "Copy of " and a "(n)" download suffix, or a regex group."""
    if id_regex:
        match = re.search(id_regex, stem)
        if not match:
            raise ValueError(f"--id-regex {id_regex!r} does not match {stem!r}")
        return match.group(1) if match.groups() else match.group(0)
    name = re.sub(r"^Copy of\s+", "", stem)
    name = re.sub(r"\s*\(\d+\)$", "", name)
    # Letters, digits and the marks of a decomposed letter ("E" + U+0301) stay; any other run becomes "_".
    kept = "".join(c if c.isalnum() or c in "_.-" or unicodedata.category(c).startswith("M") else "\0" for c in name)
    return re.sub("\0+", "_", kept).strip("_") or "unnamed"


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


def id_key(name: str) -> str:
    """What two ids share when they differ only in case or Unicode normalisation."""
    return unicodedata.normalize("NFC", name).casefold()


def match_ids(wanted: Iterable[str], have: Iterable[str]) -> dict[str, str]:
    """Each id of `wanted` that is an id of `have`: the same string, else the one id of `have` that differs from it
    only in case or Unicode normalisation, where neither side has another such id (then nothing is matched by
    guess: "Bob" and "bob" are two students and "BOB" is neither)."""
    have = set(have)
    groups: dict[str, tuple[set[str], set[str]]] = {}
    for side, ids in enumerate((set(wanted), have)):
        for name in ids:
            groups.setdefault(id_key(name), (set(), set()))[side].add(name)
    matched = {}
    for wanted_ids, have_ids in groups.values():
        for name in wanted_ids:
            if name in have_ids:
                matched[name] = name
            elif len(wanted_ids) == 1 and len(have_ids) == 1:
                matched[name] = next(iter(have_ids))
    return matched


def _owner(relative: PurePosixPath, id_regex: str | None, metadata: dict[str, tuple[str, str]]) -> str:
    """Whose file this is: by the LMS's metadata for its folder, else a top-level file by its own name and
    anything in a folder by the folder's."""
    if not relative.parts:
        return "unnamed"
    if len(relative.parts) == 1:
        return student_name(relative.stem, id_regex)
    if relative.parts[0] in metadata:
        return metadata[relative.parts[0]][0]
    return student_name(relative.parts[0], id_regex)


def lms_metadata(root: Path) -> dict[str, tuple[str, str]]:
    """{folder: (student, upload time ISO 8601)} from Gradescope's submission_metadata.yml, if `root` has one
    (the first submitter's SID, else email, else name)."""
    if not os.path.lexists(root / "submission_metadata.yml"):
        return {}
    import yaml

    def field(entry: dict, key: str):  # Gradescope writes Ruby symbols: ":created_at"
        return entry.get(f":{key}", entry.get(key))

    out = {}
    text = read_below(root, PurePosixPath("submission_metadata.yml")).decode("utf-8")  # never through a link
    for folder, entry in (yaml.safe_load(text) or {}).items():
        who = (field(entry, "submitters") or [{}])[0]
        name = field(who, "sid") or field(who, "email") or field(who, "name")
        created = field(entry, "created_at")
        if name:
            out[str(folder)] = (str(name), created.isoformat() if isinstance(created, datetime) else str(created or ""))
    return out


def _skipped(name: str) -> bool:
    """Folders and files nobody submitted: checkpoints, an archiver's extras, hidden files."""
    return name in SKIPPED_PARTS or name.startswith(".")


def collect(submissions: Path, id_regex: str | None = None, roster: list[str] | None = None,
            unpack_dir: Path | None = None, archive_limits: ArchiveLimits | None = None) -> list[Submission]:
    """Every student's submission under `submissions` (a folder, or a zip or tar unpacked into `unpack_dir`), the
    newest of two files graded, a student with an entry that is not a plain file refused (`problem` says which),
    roster students without a file added and students not on it marked. An archive past `archive_limits` is one
    row, refused before anything of it is written."""
    if not submissions.exists():
        raise ValueError(f"{submissions} does not exist: pass the folder (or zip or tar) of the class's notebooks")
    refused: list[Refused] = []
    if is_archive(submissions):
        if unpack_dir is None:
            raise ValueError(f"{submissions} is an archive: pass a folder to unpack it into")
        try:
            submissions, refused = unpack(submissions, unpack_dir, archive_limits or ArchiveLimits())
        except ArchiveRefused as e:
            name = student_name(archive_stem(submissions))
            return [Submission(nbgrader_id(name), submissions, str(e), name=name, root=submissions.parent)]
    if not submissions.is_dir():
        raise ValueError(f"{submissions} is neither a folder nor a zip or tar of submissions")
    with_submitted = submissions / "submitted"
    if os.path.lexists(with_submitted) and stat.S_ISDIR(os.lstat(with_submitted).st_mode):  # an nbgrader course
        submissions = with_submitted
    files, found = walk(submissions, _skipped)
    metadata = lms_metadata(submissions)
    by_name: dict[str, list[Path]] = {}
    for relative in (f for f in files if f.suffix == ".ipynb"):
        by_name.setdefault(_owner(relative, id_regex, metadata), []).append(submissions / relative)
    refused_by: dict[str, list[Refused]] = {}
    for entry in [*refused, *found]:
        if not any(_skipped(part) for part in entry.path.parts):
            try:
                owner = _owner(entry.path, id_regex, metadata)
            except ValueError:  # --id-regex names notebooks; a stray link is named as its file or folder is
                owner = _owner(entry.path, None, metadata)
            refused_by.setdefault(owner, []).append(entry)

    def uploaded(path: Path) -> str:
        folder = path.relative_to(submissions).parts[0]
        return metadata[folder][1] if folder in metadata and len(path.relative_to(submissions).parts) > 1 else ""

    def newness(path: Path) -> tuple:
        stamp = uploaded(path)
        return (datetime.fromisoformat(stamp).timestamp() if stamp else 0.0, download_index(path.stem),
                os.lstat(path).st_mtime)

    names = sorted(set(by_name) | set(refused_by))
    listed = set(match_ids(names, roster)) if roster is not None else set()
    taken: dict[str, str] = {}
    result = []
    for name in names:
        student = _unique(nbgrader_id(name), name, taken)
        on_roster = None if roster is None else name in listed
        paths = sorted(by_name.get(name, []), key=newness, reverse=True)
        if name in refused_by:  # nothing of theirs is graded: their notebooks are listed as not graded
            entries = refused_by[name]
            result.append(Submission(student, submissions / entries[0].path, _refusal(entries), name=name,
                                     superseded=[str(p.relative_to(submissions)) for p in paths],
                                     on_roster=on_roster, root=submissions))
        else:
            newest, *older = paths
            result.append(Submission(student, newest, name=name, submitted_at=uploaded(newest) or file_time(newest),
                                     superseded=[str(p.relative_to(submissions)) for p in older],
                                     on_roster=on_roster, root=submissions))
    found_ids = set(match_ids(roster or [], names))
    for name in roster or []:
        if name not in found_ids:
            result.append(Submission(_unique(nbgrader_id(name), name, taken), None, "no submission", name=name,
                                     on_roster=True))
    return result


def _refusal(entries: list[Refused]) -> str:
    """The row's message for a student with entries that are not plain files: which, and what to do."""
    return (f"not graded: {'; '.join(map(str, entries))}. Nothing is read through a link or from anything but a plain "
            "file: hand in the notebook itself (the .ipynb file, not a link or a shortcut to it)")


def _unique(student: str, name: str, taken: dict[str, str]) -> str:
    """`student`, or with the name's hash when another name already has it (ids that differ only in case)."""
    if taken.get(student.casefold(), name) != name:
        student = f"{student}_{hashlib.sha1(name.encode()).hexdigest()[:6]}"
    taken[student.casefold()] = name
    return student


def file_time(path: Path) -> str:
    """The time of `path` itself (of a link, not of what it names), as ISO 8601 UTC."""
    return datetime.fromtimestamp(os.lstat(path).st_mtime, timezone.utc).isoformat(timespec="seconds")


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
