"""Collecting a class's submissions and reading its roster, in the shapes LMSs and class folders come in.

    submissions = collect(Path("downloads.zip"), roster=read_roster(Path("roster.csv")), unpack_dir=Path("unpacked"))

A submissions folder (or a zip or tar of one, `archives.py`) may hold:
- an LMS's bulk download, its names read as the LMS writes them (LMS_SHAPES): Canvas's
  `<sortablename>[_LATE]_<user id>_<attachment id>_<file>`, Moodle's
  `<full name>_<participant id>_assignsubmission_file` folders or files, Blackboard's
  `<assignment>_<username>_attempt_<time>_<file>`;
- Gradescope's export (`submission_<n>/` folders and `submission_metadata.yml`, which names the student and the upload
  time of each);
- flat files, `<student>.ipynb` ("Copy of alice.ipynb" and "alice (1).ipynb" are alice's), one folder per student
  with a notebook of any name (`frank/Speculative Decoding (1).ipynb`), nbgrader's
  `submitted/<student>/speculative_decoding/*.ipynb`, mixed.
Where one name is an LMS's, every name must be an LMS's (`names.owner_of`): a name that fits none stops the collection
with the shapes tried and how to pass `--id-regex`, instead of becoming a student of its own.
Only regular files are read, never through a link (`regular_files.py`): a student whose files include a symbolic
or hard link, a device, a FIFO or an archive entry leading outside the folder gets a row of status `invalid` that
names it, and nothing of theirs is read. Ids keep their Unicode ("Émilie") as the file or folder gives it; nbgrader
gets an ASCII id only where one is needed, and the row keeps both. Two ids that differ only in case or Unicode
normalisation are two students (two rows); a roster, like an LMS's export, matches an id regardless of case only
where no other id is the same but for case (`match_ids`). Several files of one student: the newest is graded (the
later upload in the LMS's record: Gradescope's upload time, Blackboard's attempt time, Canvas's attachment id; then
the larger download suffix, "(n)" or Canvas's "-n"; then the later file time) and the others are named in the row.
Each submission carries its upload time where the LMS gives one (Gradescope's metadata, Blackboard's name), else,
in a class folder, the file's or the archive entry's; an LMS's zip stamps every entry with the time of the download,
so a Canvas or Moodle name gets none. The LMS's own late mark stays in the file's name (`marked_late`).
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from ..core.regular_files import Refused, read_below, walk
from .archives import ArchiveLimits, ArchiveRefused, archive_stem, is_archive, unpack
from .names import Owner, download_index, match_ids, nbgrader_id, owner_of, plain_name, read_lms_name, student_name

SKIPPED_PARTS = {".ipynb_checkpoints", "__MACOSX"}
ROSTER_COLUMNS = ("student_id", "id", "sid", "login_id", "sis user id", "username", "email")  # tried in order


@dataclass
class Submission:
    student: str  # nbgrader's id: the name below when it is plain ASCII
    path: Path | None  # None for a roster student who submitted nothing
    problem: str = ""  # why it cannot be graded (nothing submitted, or an entry refused), empty if none
    name: str = ""  # the id as the folder or file gave it, Unicode kept
    submitted_at: str = ""  # ISO 8601 UTC: the LMS's upload time, else the file's (or the zip entry's); "" if unknown
    superseded: list[str] = field(default_factory=list)  # the student's other files, older, not graded
    on_roster: bool | None = None  # None when no roster was given
    root: Path | None = None  # the folder it was found in: reading `path` follows no link below it (default: its own)

    def __post_init__(self):
        self.name = self.name or self.student


def _top_name(relative: PurePosixPath) -> str:
    """The name that says whose `relative` is: a top-level file's stem, else its top folder's name."""
    return relative.stem if len(relative.parts) == 1 else relative.parts[0]


def _owner(relative: PurePosixPath, id_regex: str | None, metadata: dict[str, tuple[str, str]],
           lms_download: str) -> Owner:
    """Whose file this is: by the LMS's metadata for its folder, else by the name of the file (at the top) or of
    its folder; with --id-regex the regex names the student and an LMS's name still gives its marks and times."""
    if len(relative.parts) > 1 and relative.parts[0] in metadata:
        student, created = metadata[relative.parts[0]]
        return Owner(student, "Gradescope", uploaded=created)
    name = _top_name(relative)
    if id_regex:
        return replace(read_lms_name(name) or Owner(""), student=student_name(name, id_regex))
    return owner_of(name, lms_download)


def _lms_download(notebooks: list[PurePosixPath], metadata: dict[str, tuple[str, str]]) -> str:
    """The LMS whose download the class is, by the first name of one among its notebooks; "" for none."""
    for relative in notebooks:
        if not (len(relative.parts) > 1 and relative.parts[0] in metadata):
            owner = read_lms_name(_top_name(relative))
            if owner is not None:
                return owner.lms
    return ""


def _names_agree(owners: Iterable[Owner]) -> None:
    """An LMS writes one person's name beside each id, and one file name beside each of Canvas's attachment ids
    (a concluded course's group assignment gives one attachment to every member). Names that break either only
    look like the LMS's (`hw_1_2_alice` and `hw_1_2_bob` would be Canvas's user 1, with attachment 2 named twice),
    and no student is guessed from them."""
    people: dict[tuple[str, str], str] = {}
    files: dict[tuple[str, int], str] = {}
    for owner in owners:
        if owner.person is not None and people.setdefault((owner.lms, owner.student), owner.person) != owner.person:
            _disagree(owner.lms, f"the id {owner.student!r} to both {people[owner.lms, owner.student]!r} and "
                                 f"{owner.person!r}")
        if owner.order and files.setdefault((owner.lms, owner.order), owner.original) != owner.original:
            _disagree(owner.lms, f"the attachment id {owner.order} to both {files[owner.lms, owner.order]!r} and "
                                 f"{owner.original!r}")


def _disagree(lms: str, what: str) -> None:
    raise ValueError(f"the names give {what}, which {lms}'s download never does: these are not {lms}'s names. Pass "
                     "--id-regex with a regular expression whose first group is the student id in every name")


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


def _fallback_name(stem: str) -> str:
    """The id of a row that names a refused entry: whatever of the name is plain, never an error."""
    return plain_name(stem) or "unnamed"


def collect(submissions: Path, id_regex: str | None = None, roster: list[str] | None = None,
            unpack_dir: Path | None = None, archive_limits: ArchiveLimits | None = None) -> list[Submission]:
    """Every student's submission under `submissions` (a folder, or a zip or tar unpacked into `unpack_dir`), the
    newest of several files graded, a student with an entry that is not a plain file refused (`problem` says
    which), roster students without a file added and students not on it marked. An archive past `archive_limits`
    is one row, refused before anything of it is written. A name no shape reads raises UnknownName."""
    if not submissions.exists():
        raise ValueError(f"{submissions} does not exist: pass the folder (or zip or tar) of the class's notebooks")
    refused: list[Refused] = []
    if is_archive(submissions):
        if unpack_dir is None:
            raise ValueError(f"{submissions} is an archive: pass a folder to unpack it into")
        try:
            submissions, refused = unpack(submissions, unpack_dir, archive_limits or ArchiveLimits())
        except ArchiveRefused as e:
            name = _fallback_name(archive_stem(submissions))
            return [Submission(nbgrader_id(name), submissions, str(e), name=name, root=submissions.parent)]
    if not submissions.is_dir():
        raise ValueError(f"{submissions} is neither a folder nor a zip or tar of submissions")
    with_submitted = submissions / "submitted"
    if os.path.lexists(with_submitted) and stat.S_ISDIR(os.lstat(with_submitted).st_mode):  # an nbgrader course
        submissions = with_submitted
    files, found = walk(submissions, _skipped)
    metadata = lms_metadata(submissions)
    notebooks = [f for f in files if f.suffix == ".ipynb"]
    lms_download = "" if id_regex else _lms_download(notebooks, metadata)
    owners = {submissions / f: _owner(f, id_regex, metadata, lms_download) for f in notebooks}
    if not id_regex:
        _names_agree(owners.values())
    by_name: dict[str, list[Path]] = {}
    for path, owner in owners.items():
        by_name.setdefault(owner.student, []).append(path)
    refused_by: dict[str, list[Refused]] = {}
    for entry in [*refused, *found]:
        if not any(_skipped(part) for part in entry.path.parts):
            try:
                name = _owner(entry.path, id_regex, metadata, lms_download).student
            except ValueError:  # --id-regex and the LMS's shapes name notebooks; a stray link is named as it can be
                name = _fallback_name(_top_name(entry.path))
            refused_by.setdefault(name, []).append(entry)

    def newness(path: Path) -> tuple:
        owner = owners[path]
        return (datetime.fromisoformat(owner.uploaded).timestamp() if owner.uploaded else 0.0, owner.order,
                owner.copy or download_index(path.stem), os.lstat(path).st_mtime)

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
            result.append(Submission(student, newest, name=name, submitted_at=upload_time(owners[newest], newest),
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


def upload_time(owner: Owner, path: Path) -> str:
    """When `owner` uploaded the file at `path`: the LMS's record, else the file's time where that is the upload's
    (not in an LMS's zip, whose entries carry the download's time); "" if unknown."""
    return owner.uploaded or (file_time(path) if owner.file_time_is_upload else "")


def file_time(path: Path) -> str:
    """The time of `path` itself (of a link, not of what it names), as ISO 8601 UTC."""
    return datetime.fromtimestamp(os.lstat(path).st_mtime, UTC).isoformat(timespec="seconds")


def read_roster(path: Path, column: str | None = None) -> list[str]:
    """Student ids from a roster: a CSV with a header (an LMS's export: the id column is `column`, else the first
    of ROSTER_COLUMNS it has, else its first), or a plain file of one id per line. Canvas's gradebook export gives
    its ID column, the user id of Canvas's download names; Blackboard's, its Username; Moodle's grading worksheet,
    its Identifier (its first column), read as the participant id of Moodle's download names."""
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
    # Canvas's "Points Possible" row and any other row without an id are no student.
    return [_roster_id(chosen, row[chosen].strip()) for row in reader if (row.get(chosen) or "").strip()]


def _roster_id(column: str, value: str) -> str:
    """A roster cell as a download names the student: Moodle's worksheet writes "Participant 1234567" (the word in
    the site's language) where its download's names have 1234567."""
    participant = re.fullmatch(r"\D*?(\d+)", value) if column.strip().casefold() == "identifier" else None
    return participant.group(1) if participant else value
