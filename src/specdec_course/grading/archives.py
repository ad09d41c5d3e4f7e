"""A class's download as a zip or a tar (.tar, .tar.gz, .tgz), unpacked without anything leaving its folder.

    root, refused = unpack(Path("downloads.zip"), Path("graded/unpacked"), ArchiveLimits(megabytes=4096, files=10000))

First its entries are counted and their sizes added up from the archive's own listing: past either limit the whole
archive is refused (`ArchiveRefused`) and nothing is written. Then only regular files and folders are written, each
file a new one (O_EXCL, no link followed) of at most its listed size; every other entry is refused and named: a
symbolic or hard link, a device, a FIFO, a name that leads outside (`..`, an absolute name), a NUL byte, a name
part over 255 bytes. Python's zipfile and tarfile never make a link or a device here: the files are written by
this module, not extracted by them.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from ..core.regular_files import CHUNK, Refused, RefusedEntry, create_below, make_folder_below

NAME_BYTES = 255  # a name part, as Linux file systems allow
PATH_BYTES = 4095
SKIPPED = {"__MACOSX"}  # folders an archiver adds beside the one folder a download holds
# What a damaged or encrypted archive raises while it is read.
UNREADABLE = (OSError, EOFError, RuntimeError, zipfile.BadZipFile, tarfile.TarError, zlib.error)


@dataclass(frozen=True)
class ArchiveLimits:
    """How far an archive may expand ([limits] archive_mb and archive_files in autograder/config.toml)."""

    megabytes: int = 4096
    files: int = 10000  # entries of any kind, folders included


class ArchiveRefused(ValueError):
    """The whole archive is refused, nothing written: the message says why and what to do."""


@dataclass
class _Member:
    name: str
    what: str  # "" for a regular file, "folder", else what it is in words
    size: int
    mtime: float
    open: Callable[[], IO[bytes]]


def is_archive(path: Path) -> bool:
    """Whether `path` is a file this module unpacks (a zip, or a tar however compressed)."""
    return path.is_file() and (zipfile.is_zipfile(path) or tarfile.is_tarfile(path))


def archive_stem(path: Path) -> str:
    """`class` for class.zip, class.tar.gz, class.tgz."""
    name = path.name
    for suffix in (".zip", ".tar.gz", ".tgz", ".tar"):
        if name.lower().endswith(suffix):
            return name[:-len(suffix)]
    return path.stem


def entry_path(name: str) -> tuple[PurePosixPath, str]:
    """Where an entry named `name` goes below the folder, and "" if it may go there; else its last name part alone
    (whose student it is, as for a file at the top) and why it may not go anywhere."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    last = parts[-1].split("\0")[0] if parts else ""
    kept = PurePosixPath(last) if last not in ("", "..") else PurePosixPath()
    if "\0" in name:
        return kept, "a name holding a NUL byte"
    if name.startswith("/"):
        return kept, "an absolute name, which leads outside the folder"
    if ".." in parts:
        return kept, "a name with '..', which leads outside the folder"
    if not parts:
        return kept, "an entry without a name"
    try:
        lengths = [len(p.encode("utf-8", "surrogateescape")) for p in (*parts, name)]  # bytes, as the disk has them
    except UnicodeEncodeError:
        return kept, "a name that no file system takes (not UTF-8 text)"
    if max(lengths[:-1]) > NAME_BYTES or lengths[-1] > PATH_BYTES:
        return kept, f"a name longer than a file system takes ({NAME_BYTES} bytes a part)"
    return PurePosixPath(*parts), ""


def unpack(archive: Path, into: Path, limits: ArchiveLimits) -> tuple[Path, list[Refused]]:
    """Unpack `archive` into `into` (emptied first) and return the submissions' root (the one folder the archive
    holds, else `into`) and the entries refused, relative to that root. ArchiveRefused past `limits`."""
    _survey(archive, limits)
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    refused, tops = [], set()
    for member in _members(archive):
        path, problem = entry_path(member.name)
        if problem:
            refused.append(Refused(path, problem, shown=repr(member.name)))
            continue
        tops.add(path.parts[0])
        if member.what == "folder":
            try:
                make_folder_below(into, path)
            except RefusedEntry:
                refused.append(Refused(path, "an archive folder inside a file's name"))
        elif member.what:
            refused.append(Refused(path, member.what))
        else:
            problem = _write(member, into, path)
            if problem:
                refused.append(Refused(path, problem))
    tops -= SKIPPED
    top = next(iter(tops)) if len(tops) == 1 else ""
    if not top or not _is_folder(into / top) or any(r.path == PurePosixPath(top) for r in refused):
        return into, refused
    return into / top, [Refused(r.path.relative_to(top), r.what) if not r.shown else r for r in refused]


def _is_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _survey(archive: Path, limits: ArchiveLimits) -> None:
    """ArchiveRefused if the archive's listing holds more entries or more bytes than `limits` allow, or cannot be
    read."""
    count = size = 0
    try:
        for member in _members(archive):
            count += 1
            size += member.size if not member.what else 0
            if count > limits.files or size > limits.megabytes << 20:
                break
    except UNREADABLE as e:
        raise ArchiveRefused(f"{archive.name} cannot be read ({type(e).__name__}: {e}): nothing was unpacked; "
                             "download it again") from None
    if count > limits.files or size > limits.megabytes << 20:
        held = f"more than {limits.files} entries" if count > limits.files else \
            f"more than {limits.megabytes} MB of files"
        raise ArchiveRefused(f"{archive.name} holds {held} ([limits] archive_files and archive_mb in "
                             "autograder/config.toml): nothing was unpacked; check that it is the class's "
                             "download, then unpack it yourself or raise the limits")


def _members(archive: Path) -> Iterator[_Member]:
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zipped:
            for info in zipped.infolist():
                yield _Member(info.filename, _zip_kind(info), info.file_size,
                              time.mktime((*info.date_time, 0, 0, -1)), lambda info=info: zipped.open(info))
        return
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:
            yield _Member(member.name, _tar_kind(member), member.size, member.mtime,
                          lambda member=member: tar.extractfile(member))


def _zip_kind(info: zipfile.ZipInfo) -> str:
    mode = info.external_attr >> 16 if info.create_system == 3 else 0  # Unix's mode, where a Unix zip wrote one
    if info.is_dir() or stat.S_ISDIR(mode):
        return "folder"
    if not stat.S_IFMT(mode) or stat.S_ISREG(mode):
        return ""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "a FIFO" if stat.S_ISFIFO(mode) else "a device or other special file"


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.isreg():
        return ""
    if member.isdir():
        return "folder"
    if member.issym():
        return f"a symbolic link (to {member.linkname!r})"
    if member.islnk():
        return f"a hard link (to {member.linkname!r})"
    return "a FIFO" if member.isfifo() else "a device or other special file"


def _write(member: _Member, into: Path, path: PurePosixPath) -> str:
    """Write one regular file, no more than its listed size (what the stream holds past it is not read); "" when
    written, else why it is not."""
    try:
        fd = create_below(into, path)
    except FileExistsError:
        return "a second archive entry of the same name"
    except (RefusedEntry, NotADirectoryError):
        return "an archive entry inside a file's name"
    left = member.size
    try:
        with os.fdopen(fd, "wb") as out, member.open() as source:
            while left and (chunk := source.read(min(CHUNK, left))):
                out.write(chunk)
                left -= len(chunk)
            out.flush()  # before the time is set: a later write would set it again
            os.utime(out.fileno(), (member.mtime, member.mtime))
    except UNREADABLE as e:
        os.unlink(into / path)
        return f"an archive entry that cannot be read ({type(e).__name__}: {e})"
    return ""
