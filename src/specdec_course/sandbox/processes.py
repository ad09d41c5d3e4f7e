"""A sandbox's processes, found and killed from outside: its cgroup where the grader may write one, else every
process of its uid.

    version, why = cgroup_support()     # "cgroup2", "cgroup1", or "" and why none; found once per grader
    cgroup = make_cgroup("alice-kernel-123-0", memory_bytes=5 << 30, pids=1024)   # None where there is none
    cgroup.freeze(); cgroup.thaw(); cgroup.cpu_seconds(); cgroup.kill_all(); cgroup.remove()
    kill_uid(64003)            # every process of that uid, killed by a process of that uid (enter.py)

The host's layout comes from /proc/self/mountinfo. cgroup v2, where /sys/fs/cgroup is a cgroup2 mount (`Cgroup2`):
one leaf per sandbox under /sys/fs/cgroup/specdec/, made by the grader as root, else under the grader's own cgroup
where that is delegated to it. cgroup v1, where /sys/fs/cgroup holds v1 controllers, a hybrid host's unified mount
beside them included (`Cgroup`): memory, pids, freezer and cpuacct groups under /sys/fs/cgroup/<controller>/specdec/.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

CGROUPS = Path("/sys/fs/cgroup")
V1, V2 = "cgroup1", "cgroup2"
V1_CONTROLLERS = ("memory", "pids", "freezer")  # without all three no limit holds: none is used
V1_ACCOUNTING = "cpuacct"  # optional: without it `cpu_seconds` is None
V2_CONTROLLERS = ("memory", "pids")
V2_OPTIONAL = ("cpu",)  # refused where a realtime process runs outside the root cgroup: then left out
GRADER_LEAF = "grader"  # v2, under the grader's own cgroup: where its processes move to (`_v2_hierarchy`)
SETTLE_SECONDS = 10  # how long a freeze or a kill may take to land before grading goes on
ENTER = Path(__file__).with_name("enter.py")  # puts a process into a sandbox (its cgroups, limits, uid)


@dataclass(frozen=True)
class Hierarchy:
    """Where a grader makes its sandboxes' cgroups."""

    version: str  # V1, V2, or "" where the grader may make none
    reason: str  # why none ("" where there is one)
    places: dict[str, Path]  # v1: controller -> its specdec folder; v2: {V2: the folder of the sandboxes' leaves}


def cgroup_support() -> tuple[str, str]:
    """("cgroup2" | "cgroup1" | "", why none) for this grader, found once: what a batch says before grading."""
    found = hierarchy()
    return found.version, found.reason


@cache
def hierarchy() -> Hierarchy:
    if os.geteuid() != 0:
        return Hierarchy("", "grading is not running as root", {})
    return find_hierarchy(CGROUPS, Path("/proc/self/mountinfo").read_text(), Path("/proc/self/cgroup").read_text())


def find_hierarchy(root: Path, mountinfo: str, own: str) -> Hierarchy:
    """The hierarchy under `root` that `mountinfo` (/proc/self/mountinfo's text) describes, its sandboxes' parent
    folders made; `own` is /proc/self/cgroup's text (the grader's own cgroup, a v2 fallback)."""
    version, mounts = layout(root, mountinfo)
    if version == V2:
        return _v2_hierarchy(root, own_cgroup(own))
    if version == V1:
        return _v1_hierarchy(mounts)
    return Hierarchy("", f"no cgroup file system is mounted at {root}", {})


def layout(root: Path, mountinfo: str) -> tuple[str, dict[str, Path]]:
    """(V2, {V2: root}) where `root` is a cgroup2 mount; (V1, {controller: its mount}) where v1 controllers are
    mounted under it (hybrid: a unified mount beside them holds no controller the grader needs); else ("", {})."""
    mounts: dict[str, Path] = {}
    for line in mountinfo.splitlines():
        fields, _, fs = line.partition(" - ")
        point, (fstype, _source, options) = Path(fields.split()[4]), fs.split()[:3]
        if fstype == "cgroup2" and point == root:
            return V2, {V2: root}
        if fstype == "cgroup" and point.parent == root:
            for option in options.split(","):
                mounts.setdefault(option, point)
    wanted = {c: mounts[c] for c in (*V1_CONTROLLERS, V1_ACCOUNTING) if c in mounts}
    return (V1, wanted) if wanted else ("", {})


def own_cgroup(proc_cgroup: str) -> str:
    """The v2 path in /proc/self/cgroup's text (its `0::` line), "/" without one."""
    return next((line[3:] for line in proc_cgroup.splitlines() if line.startswith("0::")), "/")


def _v1_hierarchy(mounts: dict[str, Path]) -> Hierarchy:
    missing = [c for c in V1_CONTROLLERS if c not in mounts]
    if missing:
        return Hierarchy("", f"cgroup v1 without the {', '.join(missing)} controller", {})
    places = {}
    for controller, mount in mounts.items():
        try:
            (mount / "specdec").mkdir(exist_ok=True)
        except OSError as e:
            if controller == V1_ACCOUNTING:
                continue
            return Hierarchy("", f"cgroup v1: cannot make {mount / 'specdec'} ({e.strerror})", {})
        places[controller] = mount / "specdec"
    return Hierarchy(V1, "", places)


def _v2_hierarchy(root: Path, own: str) -> Hierarchy:
    """Leaves under root/specdec, the controllers enabled in root's and its subtree_control; else under the grader's
    own cgroup, its processes first moved into a leaf of it (a cgroup with processes enables no controller below)."""
    try:
        return Hierarchy(V2, "", {V2: _enable(root, root / "specdec")})
    except OSError as e:
        tried = f"cgroup v2: {root}/specdec could not be made ({e.strerror or e})"
    mine = root / own.lstrip("/")
    if mine.name == GRADER_LEAF:  # a grader process started after another one moved the grader's processes
        mine = mine.parent
    if mine == root:
        return Hierarchy("", f"{tried}, and the grader's own cgroup is that root", {})
    if not all(os.access(mine / name, os.W_OK) for name in ("cgroup.procs", "cgroup.subtree_control")):
        return Hierarchy("", f"{tried}, and the grader's own cgroup {mine} is not delegated to it", {})
    try:
        _vacate(mine, mine / GRADER_LEAF)
        return Hierarchy(V2, "", {V2: _enable(mine, mine / "specdec")})
    except OSError as e:
        return Hierarchy("", f"{tried}, nor under the grader's own cgroup {mine} ({e.strerror or e})", {})


def _enable(parent: Path, folder: Path) -> Path:
    """`folder`, made under `parent` with memory and pids (and cpu, where it may) in both subtree_controls."""
    available = set((parent / "cgroup.controllers").read_text().split())
    missing = [c for c in V2_CONTROLLERS if c not in available]
    if missing:
        raise OSError(f"{parent} offers no {', '.join(missing)} controller")
    required = [f"+{c}" for c in V2_CONTROLLERS]
    full = required + [f"+{c}" for c in V2_OPTIONAL if c in available]
    for target in (parent, folder):
        target.mkdir(exist_ok=True)
        try:
            (target / "cgroup.subtree_control").write_text(" ".join(full))
        except OSError:
            (target / "cgroup.subtree_control").write_text(" ".join(required))
    return folder


def _vacate(cgroup: Path, leaf: Path) -> None:
    """Every process of `cgroup` moved into its child `leaf` (v2's rule: no processes where controllers are enabled)."""
    leaf.mkdir(exist_ok=True)
    for pid in (cgroup / "cgroup.procs").read_text().split():
        with contextlib.suppress(ProcessLookupError):  # gone meanwhile
            (leaf / "cgroup.procs").write_text(pid)


def make_cgroup(name: str, memory_bytes: int, pids: int) -> Cgroup | Cgroup2 | None:
    """A new cgroup for sandbox `name` in this host's hierarchy; None where the grader may make none."""
    kind = {V1: Cgroup, V2: Cgroup2}.get(cgroup_support()[0])
    return kind(name, memory_bytes, pids) if kind else None


def attach_cgroup(dirs: dict[str, str]) -> Cgroup | Cgroup2 | None:
    """The cgroup whose folders are `dirs` (its `dirs`, made by another process of the grader)."""
    if not dirs:
        return None
    return (Cgroup2 if V2 in dirs else Cgroup).attach({k: Path(v) for k, v in dirs.items()})


class _Folders:
    """A sandbox's cgroup by its folders (`dirs`), as made here or by another process of the grader (`attach`)."""

    dirs: dict[str, Path]

    @classmethod
    def attach(cls, dirs: dict[str, Path]):
        cgroup = cls.__new__(cls)
        cgroup.dirs = dirs
        return cgroup

    def __bool__(self) -> bool:
        return bool(self.dirs)


class Cgroup(_Folders):
    """cgroup v1 memory, pids, freezer and cpuacct groups of one sandbox (`Hierarchy.places` / name)."""

    version = V1

    def __init__(self, name: str, memory_bytes: int, pids: int, places: dict[str, Path] | None = None):
        self.dirs = {c: folder / name for c, folder in (places or hierarchy().places).items()}
        try:
            for folder in self.dirs.values():
                folder.mkdir()
            if memory_bytes:
                self._write("memory", "memory.limit_in_bytes", str(memory_bytes))
                with contextlib.suppress(OSError):  # only where the kernel accounts swap
                    self._write("memory", "memory.memsw.limit_in_bytes", str(memory_bytes))
            self._write("pids", "pids.max", str(pids))
        except OSError:
            self.remove()
            raise

    def procs_files(self) -> list[str]:
        """The files a process writes its pid into to join every group of the sandbox (enter.py)."""
        return [str(folder / "cgroup.procs") for folder in self.dirs.values()]

    def pids(self) -> list[int]:
        return live(self.dirs["freezer"] / "cgroup.procs") if self.dirs else []

    def cpu_seconds(self) -> float | None:
        """User and system CPU of every process the sandbox held, exited ones included."""
        with contextlib.suppress(OSError, KeyError, ValueError):
            return int(self._read(V1_ACCOUNTING, "cpuacct.usage")) / 1e9
        return None

    def freeze(self) -> None:
        self._write("freezer", "freezer.state", "FROZEN")
        deadline = time.monotonic() + SETTLE_SECONDS
        while self._read("freezer", "freezer.state") != "FROZEN" and time.monotonic() < deadline:
            time.sleep(0.01)

    def thaw(self) -> None:
        self._write("freezer", "freezer.state", "THAWED")

    def kill_all(self) -> None:
        """Frozen, so that nothing forks while it is killed; killed; thawed, so that the kills land."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while self.dirs and self.pids() and time.monotonic() < deadline:
            freeze_and_kill(self)
            time.sleep(0.02)

    def remove(self) -> None:
        for folder in self.dirs.values():
            with contextlib.suppress(OSError):
                folder.rmdir()

    def _write(self, controller: str, name: str, value: str) -> None:
        (self.dirs[controller] / name).write_text(value)

    def _read(self, controller: str, name: str) -> str:
        return (self.dirs[controller] / name).read_text().strip()


class Cgroup2(_Folders):
    """A cgroup v2 leaf of one sandbox (`Hierarchy.places[V2]` / name), with Cgroup's interface."""

    version = V2

    def __init__(self, name: str, memory_bytes: int, pids: int, places: dict[str, Path] | None = None):
        self.dirs = {V2: (places or hierarchy().places)[V2] / name}
        self.folder.mkdir()
        try:
            if memory_bytes:
                self._write("memory.max", str(memory_bytes))
                if (self.folder / "memory.swap.max").exists():  # only where the kernel accounts swap
                    self._write("memory.swap.max", "0")
            self._write("pids.max", str(pids))
        except OSError:
            self.remove()
            raise

    @property
    def folder(self) -> Path:
        return self.dirs[V2]

    def procs_files(self) -> list[str]:
        return [str(self.folder / "cgroup.procs")]

    def pids(self) -> list[int]:
        return live(self.folder / "cgroup.procs")

    def cpu_seconds(self) -> float | None:
        """User and system CPU of every process the sandbox held, exited ones included (cpu.stat's usage_usec)."""
        with contextlib.suppress(OSError, ValueError):
            for line in (self.folder / "cpu.stat").read_text().splitlines():
                key, value = line.split()
                if key == "usage_usec":
                    return int(value) / 1e6
        return None

    def freeze(self) -> None:
        """Frozen once cgroup.events says so (the write only asks), or after SETTLE_SECONDS."""
        self._write("cgroup.freeze", "1")
        deadline = time.monotonic() + SETTLE_SECONDS
        while "frozen 1" not in self._read("cgroup.events").splitlines() and time.monotonic() < deadline:
            time.sleep(0.01)

    def thaw(self) -> None:
        self._write("cgroup.freeze", "0")

    def kill_all(self) -> None:
        """cgroup.kill (Linux 5.14+: every process, a fork racing it included); else as v1: frozen, killed, thawed."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while self.pids() and time.monotonic() < deadline:
            if (self.folder / "cgroup.kill").exists():
                self._write("cgroup.kill", "1")
            else:
                freeze_and_kill(self)
            time.sleep(0.02)

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.folder.rmdir()

    def _write(self, name: str, value: str) -> None:
        (self.folder / name).write_text(value)

    def _read(self, name: str) -> str:
        return (self.folder / name).read_text()


def freeze_and_kill(cgroup: Cgroup | Cgroup2) -> None:
    """SIGKILL to every process of `cgroup` while none of them can fork; thawed after, so that the kills land."""
    cgroup.freeze()
    for pid in cgroup.pids():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    cgroup.thaw()


def live(procs: Path) -> list[int]:
    """The live processes a cgroup.procs file lists."""
    pids = []
    for pid in map(int, procs.read_text().split()):
        with contextlib.suppress(OSError, IndexError):
            if alive(pid):
                pids.append(pid)
    return pids


def pids_of_uid(uid: int) -> list[int]:
    """The live processes of `uid` (a zombie runs nothing: it waits to be reaped)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if entry.stat().st_uid == uid and alive(int(entry.name)):
                    pids.append(int(entry.name))
    return pids


def stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command's name (which may hold spaces): the state first."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    return stat_fields(pid)[0] != "Z"


def thaw_cgroups_of(pids: list[int]) -> None:
    """Thaw the cgroups `pids` are in: a grader killed while it timed leaves its sandbox frozen, and a frozen process
    cannot die."""
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
                _, controllers, path = line.split(":", 2)
                folder = path.lstrip("/")
                if controllers == "freezer":
                    (CGROUPS / "freezer" / folder / "freezer.state").write_text("THAWED")
                elif controllers == "" and (CGROUPS / folder / "cgroup.freeze").exists():
                    (CGROUPS / folder / "cgroup.freeze").write_text("0")


def kill_uid(uid: int) -> None:
    """Every process of `uid` killed by a process of that uid (kill(-1) reaches exactly those), until none is left."""
    thaw_cgroups_of(pids_of_uid(uid))
    deadline = time.monotonic() + 10
    spec = {"cgroups": [], "rlimits": {}, "stage": None, "binds": [], "scratch": None, "uid": uid, "groups": [],
            "argv": None}
    while pids_of_uid(uid) and time.monotonic() < deadline:
        subprocess.run([sys.executable, "-I", "-S", str(ENTER), json.dumps(spec)], timeout=10)
        time.sleep(0.02)
