"""Submitted files read and written as regular files inside their root, never through a link.

    files, refused = walk(Path("downloads"))                       # plain files below, and what is not plain
    data = read_below(Path("downloads"), PurePosixPath("bob/nb.ipynb"))

The root is the caller's (the instructor's folder: its own path may pass through links). Below it, every folder
is opened with O_NOFOLLOW | O_DIRECTORY relative to its parent's descriptor, and a file is read only when it is
a regular file with one name: a symbolic link, a hard link (a second name of a file elsewhere: `tar` run as root
makes one to any file of the disk), a device, a FIFO or a socket is refused, and named, never opened. A device
is never opened at all: its type is read (lstat) before the open.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath

FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC  # NONBLOCK: a FIFO never hangs
CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
CHUNK = 1 << 20


@dataclass(frozen=True, order=True)
class Refused:
    """An entry that is not read: where it is (relative to its root) and what it is."""

    path: PurePosixPath
    what: str  # "a symbolic link (to '../x')", "a FIFO (named pipe)", ...
    shown: str = ""  # the name as given, where it differs from `path` (an archive entry leading outside)

    def __str__(self) -> str:
        return f"{self.shown or self.path} is {self.what}"


class RefusedEntry(ValueError):
    """A path below the root that is not a regular file with one name (or a folder on the way that is a link)."""

    def __init__(self, refused: Refused):
        super().__init__(str(refused))
        self.refused = refused


def what_is(info: os.stat_result, name: str, folder: int) -> str:
    """"" for a folder or a regular file with one name; else what it is, in words."""
    mode = info.st_mode
    if stat.S_ISDIR(mode) or (stat.S_ISREG(mode) and info.st_nlink == 1):
        return ""
    if stat.S_ISREG(mode):
        return f"a hard link ({info.st_nlink} names for one file)"
    if stat.S_ISLNK(mode):
        return f"a symbolic link (to {os.readlink(name, dir_fd=folder)!r})"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def walk(root: Path, skip: Callable[[str], bool] = lambda name: False) -> tuple[list[PurePosixPath],
                                                                                 list[Refused]]:
    """Every regular file below `root` (relative paths, sorted) and every entry refused; names for which `skip`
    is true are passed over, with all below them."""
    files: list[PurePosixPath] = []
    refused: list[Refused] = []
    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _walk(top, PurePosixPath(), skip, files, refused)
    finally:
        os.close(top)
    return sorted(files), sorted(refused)


def _walk(folder: int, relative: PurePosixPath, skip, files: list, refused: list) -> None:
    for name in sorted(os.listdir(folder)):
        if skip(name):
            continue
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        what = what_is(info, name, folder)
        if what:
            refused.append(Refused(relative / name, what))
        elif stat.S_ISDIR(info.st_mode):
            inner = os.open(name, FOLDER, dir_fd=folder)
            try:
                _walk(inner, relative / name, skip, files, refused)
            finally:
                os.close(inner)
        else:
            files.append(relative / name)


def _open_folder(root: Path, parts: tuple[str, ...], create: bool = False) -> int:
    """A descriptor of the folder `root/parts...`, no link followed below `root` (made where missing if `create`)."""
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for index, part in enumerate(parts):
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=folder)
                except FileExistsError:
                    pass
            info = os.stat(part, dir_fd=folder, follow_symlinks=False)
            if not stat.S_ISDIR(info.st_mode):
                raise RefusedEntry(Refused(PurePosixPath(*parts[:index + 1]),
                                           what_is(info, part, folder) or "a file where a folder was expected"))
            inner = os.open(part, FOLDER, dir_fd=folder)
            os.close(folder)
            folder = inner
    except BaseException:
        os.close(folder)
        raise
    return folder


def open_below(root: Path, relative: PurePath) -> int:
    """A descriptor open for reading on the regular file `root/relative`; RefusedEntry for anything else on the way."""
    parts = PurePosixPath(relative).parts
    folder = _open_folder(root, parts[:-1])
    try:
        name = parts[-1]
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        what = what_is(info, name, folder) or ("a folder" if stat.S_ISDIR(info.st_mode) else "")
        if what:
            raise RefusedEntry(Refused(PurePosixPath(relative), what))
        fd = os.open(name, READ, dir_fd=folder)
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):  # replaced between the two looks
            os.close(fd)
            raise RefusedEntry(Refused(PurePosixPath(relative), "a file that changed while it was opened"))
        return fd
    finally:
        os.close(folder)


def read_below(root: Path, relative: PurePath) -> bytes:
    """The bytes of the regular file `root/relative`, read without following a link (`open_below`)."""
    with os.fdopen(open_below(root, relative), "rb") as f:
        return f.read()


def create_below(root: Path, relative: PurePath, mode: int = 0o644) -> int:
    """A descriptor open for writing on a new file `root/relative` (its folders made as needed, none a link)."""
    parts = PurePosixPath(relative).parts
    folder = _open_folder(root, parts[:-1], create=True)
    try:
        return os.open(parts[-1], CREATE, mode, dir_fd=folder)
    finally:
        os.close(folder)


def make_folder_below(root: Path, relative: PurePath) -> None:
    """The folder `root/relative` and those above it, made where missing; RefusedEntry if one is not a folder."""
    os.close(_open_folder(root, PurePosixPath(relative).parts, create=True))


def write_below(root: Path, relative: PurePath, data: bytes) -> None:
    """`root/relative` replaced by a regular file holding `data`; whatever was there (a link too) is removed,
    never written through."""
    parts = PurePosixPath(relative).parts
    folder = _open_folder(root, parts[:-1], create=True)
    try:
        try:
            os.unlink(parts[-1], dir_fd=folder)
        except FileNotFoundError:
            pass
        fd = os.open(parts[-1], CREATE, 0o644, dir_fd=folder)
    finally:
        os.close(folder)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def copy_tree(source: Path, target: Path, owner: int | None = None,
              skip: Callable[[str], bool] = lambda name: False) -> None:
    """Copy the regular files below `source` into the folder `target` (owned by `owner` where given); RefusedEntry,
    before anything is copied, if `source` holds anything else."""
    files, refused = walk(source, skip)
    if refused:
        raise RefusedEntry(refused[0])
    for relative in files:
        with os.fdopen(open_below(source, relative), "rb") as src, os.fdopen(create_below(target, relative),
                                                                             "wb") as dst:
            while chunk := src.read(CHUNK):
                dst.write(chunk)
    if owner is not None:
        for path in [target, *(target / p for f in files for p in [*reversed(f.parents[:-1]), f])]:
            os.chown(path, owner, owner, follow_symlinks=False)
