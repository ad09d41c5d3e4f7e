"""Whose file it is: the student that a name in an LMS's bulk download (`LMS_SHAPES`: Canvas, Moodle, Blackboard) or
in a class folder names, what the name says of the upload (the LMS's late mark, its upload time or order), and the
ids nbgrader takes and rosters match.

    owner_of("smithjohn_LATE_12345_67890_speculative_decoding.ipynb"[:-6])   # Owner("12345", "Canvas", late=True, ...)
    nbgrader_id("Émilie")                                                       # "Emilie_<hash>": ASCII for nbgrader
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePosixPath


@dataclass(frozen=True)
class Shape:
    """How one LMS names the files of its bulk download."""

    lms: str
    layout: str  # the name as the LMS writes it, for messages and the docs
    regex: re.Pattern  # named groups: id; where the LMS writes them: person, late, time, order, copy
    id_prefix: str = ""  # put before the id group (Canvas's anonymous ids are "anon_<id>")


# Tried in this order, each against a file's stem (Canvas's "-n" stands before the extension) or a folder's name;
# the first that matches names the student. Each is the LMS's own code's, cited.
LMS_SHAPES = (
    # Blackboard Learn, Grade Center > Assignment File Download: the attempt's time carries no zone. The username is
    # the part before the first "_attempt_<time>" (assignment names may hold "_").
    Shape("Blackboard", "<assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<file name>",
          re.compile(r"(?P<assignment>.+?)_(?P<id>[^_]+)_attempt_(?P<time>\d{4}(?:-\d\d){5})(?:_(?P<original>.*))?",
                     re.S)),
    # Moodle's Download all submissions (mod/assign/classes/downloader.php, get_student_prefix): the full name with
    # "_" made " ", the participant id, then `_assignsubmission_file` as a folder (the default since 3.1; Moodle
    # before 4.1 ends it with "_") or `_assignsubmission_file_<file>` as one file.
    Shape("Moodle", "<full name>_<participant id>_assignsubmission_file[_<file name>] (a folder, or a file)",
          re.compile(r"(?P<person>[^_]*)_(?P<id>\d+)_assignsubmission_[a-z]+(?:_(?P<original>.*))?", re.S)),
    # Canvas's Download Submissions (lib/content_zipper.rb: get_filename, add_upload_submission): the sortable name
    # lowercased, stripped of all but word characters and of any "_<digits>_"; "LATE" for a late submission; a
    # second file of one name gets "-1", "-2" before its extension (Attachment.make_unique_filename). Canvas reads
    # its names back by their first two all-digit parts (Assignment#infer_comment_context_from_filename), as the
    # lazy person group does here. Anonymous grading writes "anon_<anonymous id>" and no name.
    Shape("Canvas", "[LATE_]anon_<anonymous id>_<attachment id>_<file name> (anonymous grading)",
          re.compile(r"(?P<late>LATE_)?anon_(?P<id>[A-Za-z0-9]+)_(?P<order>\d{1,20})_(?P<original>.+?)"
                     r"(?:-(?P<copy>\d{1,9}))?", re.S), id_prefix="anon_"),
    Shape("Canvas", "<sortablename>[_LATE]_<user id>_<attachment id>_<file name>[-<n>]",
          re.compile(r"(?P<person>.*?)_(?P<late>LATE_)?(?P<id>\d+)_(?P<order>\d{1,20})_(?P<original>.+?)"
                     r"(?:-(?P<copy>\d{1,9}))?", re.S)),
)
PLAIN_LAYOUT = '<student>.ipynb, or a folder <student>/ ("Copy of " and a " (n)" download suffix dropped)'


@dataclass(frozen=True)
class Owner:
    """Whose file it is, and what its name says of the upload."""

    student: str
    lms: str = ""  # whose names these are: "Canvas", "Moodle", "Blackboard", "Gradescope"; "" for a class folder
    person: str | None = None  # the name the LMS writes beside the id (Canvas's sortable name, Moodle's full name)
    late: bool | None = None  # the LMS's own late mark; None where its names carry none
    uploaded: str = ""  # ISO 8601 UTC, where the LMS records the upload time
    order: int = 0  # the LMS's order of uploads: Canvas's attachment ids grow with each upload
    copy: int = 0  # Canvas's "-n" for a second file of one name
    original: str = ""  # the file's own name, as the student uploaded it, where the LMS writes it
    file_time_is_upload: bool = True  # False in an LMS's zip, which stamps every entry with the download's time


class UnknownName(ValueError):
    """A name from which none of the shapes tried reads a student; the message lists them and the way out."""


def read_lms_name(stem: str) -> Owner | None:
    """The student an LMS's download names in `stem` (a file's stem or a folder's name), by the first of LMS_SHAPES
    that matches; None if none does."""
    for shape in LMS_SHAPES:
        match = shape.regex.fullmatch(stem)
        if match and (owner := _owner_by(shape, match)) is not None:
            return owner
    return None


def _owner_by(shape: Shape, match: re.Match) -> Owner | None:
    """The owner that `shape`'s `match` names, or None where a part only looks like the LMS's (no date)."""
    groups = match.groupdict()
    uploaded = _attempt_time(groups["time"]) if "time" in groups else ""
    if "time" in groups and not uploaded:
        return None
    return Owner(shape.id_prefix + groups["id"], shape.lms, person=groups.get("person"),
                 late=bool(groups["late"]) if "late" in groups else None, uploaded=uploaded,
                 order=int(groups.get("order") or 0), copy=int(groups.get("copy") or 0),
                 original=groups.get("original") or "", file_time_is_upload=False)


def _attempt_time(text: str) -> str:
    """Blackboard's attempt time in ISO 8601 UTC, "" if it is no date. It carries no zone and is read as this
    machine's local time, as zip entry times are (`archives.py`)."""
    try:
        return datetime.strptime(text, "%Y-%m-%d-%H-%M-%S").astimezone(UTC).isoformat(timespec="seconds")
    except (ValueError, OverflowError, OSError):  # a month 13, or a year the platform's clock cannot place
        return ""


def plain_name(stem: str) -> str:
    """A class folder's id in a file or folder name: without "Copy of " and a "(n)" download suffix, every run of
    characters other than letters, digits, marks and `_.-` made "_"; "" when nothing is left."""
    name = re.sub(r"^Copy of\s+", "", stem)
    name = re.sub(r"\s*\(\d+\)$", "", name)
    # Letters, digits and the marks of a decomposed letter ("E" + U+0301) stay; any other run becomes "_".
    kept = "".join(c if c.isalnum() or c in "_.-" or unicodedata.category(c).startswith("M") else "\0" for c in name)
    return re.sub("\0+", "_", kept).strip("_")


def owner_of(stem: str, lms_download: str = "") -> Owner:
    """The owner named by `stem`: by an LMS's name, else (unless the class is `lms_download`'s download, whose
    every name is the LMS's) by the plain name; UnknownName if neither reads a student."""
    owner = read_lms_name(stem)
    if owner is None and not lms_download and (name := plain_name(stem)):
        owner = Owner(name)
    if owner is None:
        raise UnknownName(_unknown(stem, lms_download))
    return owner


def _unknown(stem: str, lms_download: str) -> str:
    """What went wrong with `stem`, the shapes tried, and what to do."""
    tried = [f"{shape.lms}'s {shape.layout}" for shape in LMS_SHAPES]
    if lms_download:
        why = (f"the name {stem!r} is not an LMS's, though the other names here are {lms_download}'s download (a "
               "plain student name is not read beside them)")
    else:
        why, tried = f"no student id in the name {stem!r}", [*tried, f"a class folder's {PLAIN_LAYOUT}"]
    return (f"{why}; names tried: {'; '.join(tried)}. Move or rename the file, or pass --id-regex with a regular "
            "expression whose first group is the student id in every name (e.g. --id-regex '^([a-z0-9]+)_hw3' for "
            "jsmith_hw3.ipynb)")


def student_name(stem: str, id_regex: str | None = None) -> str:
    """The student id in a file or folder name: the regex's first group (or its match), else `owner_of`'s."""
    if id_regex:
        match = re.search(id_regex, stem)
        if not match:
            raise ValueError(f"--id-regex {id_regex!r} does not match {stem!r}")
        return match.group(1) if match.groups() else match.group(0)
    return owner_of(stem).student


def marked_late(path: str) -> bool:
    """Whether the LMS marked the file at `path` late in its name (Canvas's `_LATE_`)."""
    owner = read_lms_name(PurePosixPath(path).stem)
    return bool(owner and owner.late)


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
