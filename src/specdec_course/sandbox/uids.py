"""The sandboxes' uids: each held by one live sandbox of the machine, whichever grader made it.

    lease = take()        # the first uid of the range no other sandbox holds
    lease.uid             # 64000, 64001, ...
    give(lease)           # free again (so is every uid of a process that dies)

A uid is held by an exclusive flock on its own lock file (LOCKS/<uid>.lock, a folder only root may enter), taken
without waiting: any number of graders on one machine (two courses, two terminals) draw from one range, and none
hands out a uid another holds, so a kill(-1) run as that uid, by the cleanup or by a student, reaches one sandbox
only. The lock lives with the open file: a grader that crashes frees its uids with it. The check pairs' weights
belong to one fixed group, outside the range (`WEIGHTS_GID`).
"""

from __future__ import annotations

import fcntl
import os
import stat
from dataclasses import dataclass
from pathlib import Path

FIRST_ENV = "SPECDEC_SANDBOX_UID"  # the range's first uid, where 64000 and on are taken on a machine
FIRST = 64000  # Debian's policy keeps 60000-64999 for uids allocated on demand, not for users or packages
COUNT = 512  # uids in the range: sandboxes open at once on the machine, all graders together (2 per --jobs each)
WEIGHTS_GID = 64999  # the group that may read the check pairs' weights: the last of Debian's free range
LOCKS = Path("/run/specdec/uids")


class UidError(RuntimeError):
    """No uid can be taken; the message says what to do."""


@dataclass(frozen=True)
class Lease:
    uid: int
    fd: int  # the lock file, flocked while the lease lives


def uid_range() -> range:
    """The uids sandboxes take: COUNT from FIRST (or SPECDEC_SANDBOX_UID), never the weights' group."""
    first = int(os.environ.get(FIRST_ENV, FIRST))
    uids = range(first, first + COUNT)
    if first < 1000 or WEIGHTS_GID in uids or 65534 in uids:
        raise UidError(f"{FIRST_ENV}={first} gives uids {first}-{uids[-1]}, which hold a system uid, nobody (65534) "
                       f"or the weights' group ({WEIGHTS_GID}): pick a first uid from 1000 with {COUNT} free above it")
    return uids


def take() -> Lease:
    """The first uid of `uid_range()` that no live sandbox holds, held until `give` (or this process's end)."""
    _lock_folder()
    for uid in uid_range():
        lease = hold(uid)
        if lease is not None:
            return lease
    raise UidError(f"all {COUNT} sandbox uids from {uid_range()[0]} are held by live sandboxes on this machine: "
                   "grade with fewer --jobs, or wait for another grader to finish")


def hold(uid: int) -> Lease | None:
    """`uid`, held until `give`, if no live sandbox holds it (call `_lock_folder` first)."""
    fd = os.open(LOCKS / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return Lease(uid, fd)


def unheld() -> list[int]:
    """The uids of the range that no live sandbox holds now."""
    _lock_folder()
    free = []
    for uid in uid_range():
        lease = hold(uid)
        if lease is not None:
            free.append(uid)
            give(lease)
    return free


def give(lease: Lease) -> None:
    """Free the uid (once no process of it is left)."""
    os.close(lease.fd)


def _lock_folder() -> None:
    """LOCKS, made if missing: root's alone, and no link on the way to it."""
    LOCKS.mkdir(mode=0o700, parents=True, exist_ok=True)
    for folder in (LOCKS.parent, LOCKS):
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0:
            raise UidError(f"{folder} must be a folder of root's (it holds the sandboxes' uid locks): remove it")
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.chmod(folder, 0o700)
