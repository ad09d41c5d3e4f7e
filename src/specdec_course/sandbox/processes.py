"""A sandbox's processes, found and killed from outside: its cgroups where the grader may write them (cgroup v1
memory, pids and freezer), else every process of its uid.

    cgroup = Cgroup("alice-kernel-123-0", memory_bytes=5 << 30, pids=1024)
    cgroup.freeze(); cgroup.thaw(); cgroup.kill_all(); cgroup.remove()
    kill_uid(64003)            # every process of that uid, killed by a process of that uid (enter.py)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

CGROUPS = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids", "freezer")
ENTER = Path(__file__).with_name("enter.py")  # puts a process into a sandbox (its cgroups, limits, uid)


class Cgroup:
    """cgroup v1 memory, pids and freezer groups of one sandbox (under /sys/fs/cgroup/<controller>/specdec/)."""

    def __init__(self, name: str, memory_bytes: int, pids: int):
        self.dirs = {c: CGROUPS / c / "specdec" / name for c in CONTROLLERS}
        try:
            for folder in self.dirs.values():
                folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            self.dirs = {}
            return
        if memory_bytes:
            self._write("memory", "memory.limit_in_bytes", str(memory_bytes))
            with contextlib.suppress(OSError):  # only where the kernel accounts swap
                self._write("memory", "memory.memsw.limit_in_bytes", str(memory_bytes))
        self._write("pids", "pids.max", str(pids))

    @classmethod
    def attach(cls, dirs: dict[str, Path]) -> Cgroup:
        cgroup = cls.__new__(cls)
        cgroup.dirs = dirs
        return cgroup

    def __bool__(self) -> bool:
        return bool(self.dirs)

    def procs_files(self) -> list[str]:
        return [str(folder / "cgroup.procs") for folder in self.dirs.values()]

    def pids(self) -> list[int]:
        text = (self.dirs["freezer"] / "cgroup.procs").read_text() if self.dirs else ""
        live = []
        for pid in map(int, text.split()):
            with contextlib.suppress(OSError, IndexError):
                if alive(pid):
                    live.append(pid)
        return live

    def freeze(self) -> None:
        self._write("freezer", "freezer.state", "FROZEN")
        deadline = time.monotonic() + 10
        while self._read("freezer", "freezer.state") != "FROZEN" and time.monotonic() < deadline:
            time.sleep(0.01)

    def thaw(self) -> None:
        self._write("freezer", "freezer.state", "THAWED")

    def kill_all(self) -> None:
        """Frozen, so that nothing forks while it is killed; killed; thawed, so that the kills land."""
        deadline = time.monotonic() + 10
        while self.dirs and self.pids() and time.monotonic() < deadline:
            self.freeze()
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.thaw()
            time.sleep(0.02)

    def remove(self) -> None:
        for folder in self.dirs.values():
            with contextlib.suppress(OSError):
                folder.rmdir()

    def _write(self, controller: str, name: str, value: str) -> None:
        (self.dirs[controller] / name).write_text(value)

    def _read(self, controller: str, name: str) -> str:
        return (self.dirs[controller] / name).read_text().strip()


def pids_of_uid(uid: int) -> list[int]:
    """The live processes of `uid` (a zombie runs nothing: it waits to be reaped)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if entry.stat().st_uid == uid and alive(int(entry.name)):
                    pids.append(int(entry.name))
    return pids


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def kill_uid(uid: int) -> None:
    """Every process of `uid` killed by a process of that uid (kill(-1) reaches exactly those), until none is left."""
    deadline = time.monotonic() + 10
    spec = {"cgroups": [], "rlimits": {}, "stage": None, "binds": [], "scratch": None, "uid": uid, "groups": [],
            "argv": None}
    while pids_of_uid(uid) and time.monotonic() < deadline:
        subprocess.run([sys.executable, "-I", "-S", str(ENTER), json.dumps(spec)], timeout=10)
        time.sleep(0.02)
