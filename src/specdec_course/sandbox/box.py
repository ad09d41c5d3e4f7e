"""A sandbox per submission, made by the operating system: the processes that run a submission's code (its
notebook's kernel, the verdict's children) run in one, and nothing else does.

    box = Sandbox("alice-kernel", isolation=detect(), limits=Limits(memory_mb=4096))
    box.seed(Path("submitted/alice/speculative_decoding"))     # the scratch folder starts as the submission
    process = box.popen([sys.executable, "-c", "..."])         # as the sandbox's uid, in its namespaces
    with box.frozen(): ...                                     # none of its processes runs meanwhile
    box.close()                                                # every process of it is gone

The isolations (`ISOLATIONS`), strongest first; `detect()` says which this machine gives:
- `bwrap`: bubblewrap, started after the grader drops to an unprivileged uid of the sandbox's own (a user namespace
  made by real root keeps root's access to files): own PID, mount, IPC, UTS and network namespaces, so no network,
  no view of the grader's processes; a file system of read-only binds (the system's /usr and /etc, the Python
  installation and environment, the student package, the prompts, the offline models) and the only writable
  places: its scratch folder, /tmp and /dev/shm, one tmpfs of a byte and a file cap (`Limits.scratch_mb`,
  `scratch_files`) made in its private mount namespace and gone with it, and the kernel's runtime folder, a tmpfs of
  1 MB that the grader mounts where it reaches the kernel's sockets. Paths the uid could not reach (a Python under
  /root) are first bound by root, in that private mount namespace (`enter.py`), where it can.
- `user`: where namespaces cannot be made (Docker without privileges, Gradescope): the unprivileged uid alone. It
  sees the machine's files as that uid: grading checks that the course's files are unreadable to it. It writes
  its scratch folder on the grader's disk and the machine's /tmp: each file is capped, not their total.
- `none` (`--no-sandbox`): the grader's own user, as before sandboxes; only the limits.
Every sandbox has limits set from outside: a cgroup where the grader may write one (`processes.py`: v2's memory.max,
no swap, pids.max, cgroup.freeze; v1's memory, pids, freezer and cpuacct groups), which also counts its CPU time
(`cpu_seconds`), and on each process RLIMIT_DATA, a largest file, no core dumps. `limits_held` says which held
(`bwrap+cgroup2`, `user, no cgroup: per-process limits only`, `none`): the batch's rows say it too.
Its uid is one no other live sandbox on the machine holds, whichever grader made it (`uids.py`), so that a kill(-1)
as that uid reaches this sandbox only. When it closes, every process of it is killed: the cgroup's, else every
process of its uid.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..core.regular_files import copy_tree
from . import uids
from .enter import MS_NODEV, MS_NOSUID, mount
from .processes import ENTER, attach_cgroup, kill_uid, make_cgroup, pids_of_uid

ISOLATIONS = ("bwrap", "user", "none")
STRONGEST_ENV = "SPECDEC_SANDBOX"  # `user`: never bwrap, as on a platform without namespaces (the Gradescope test)
STAGE = Path("/run/specdec-stage")  # the mount point of enter.py's tmpfs, in each sandbox's own mount namespace
SCRATCH = STAGE / "scratch"  # its tmpfs of the sandbox's writable space, seen as the scratch folder, /tmp, /dev/shm
RUNTIME_SPACE = "size=1m,nr_inodes=64"  # the kernel's connection file and sockets, shared with the grader
KEPT_ENV = ("PATH", "LANG", "LC_ALL", "TERM")


class SandboxError(RuntimeError):
    """No sandbox can be made as asked; the message says what to do."""


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 0  # each process's data (RLIMIT_DATA: a MemoryError in the student's code first); 0: no limit
    pids: int = 1024  # processes and threads (torch and a kernel start dozens)
    file_mb: int = 512  # the largest file a process of the sandbox may write
    extra_memory_mb: int = 0  # the sandbox's processes together (its cgroup) may hold this much beyond memory_mb
    scratch_mb: int = 512  # bwrap: its scratch folder and /tmp together (a tmpfs, counted in its cgroup's memory)
    scratch_files: int = 10000  # bwrap: files and folders there together


def detect() -> str:
    """The strongest isolation this machine gives the grader, with the reason for a weaker one in `why_not()`."""
    return _detected()[0]


def why_not() -> str:
    """Why the strongest isolation is not available here ("" if it is)."""
    return _detected()[1]


@cache
def _detected() -> tuple[str, str]:
    if os.geteuid() != 0:
        return "none", ("grading is not running as root, so it cannot run a submission as another user: run it as "
                        "root (in a container or a VM of its own)")
    strongest = os.environ.get(STRONGEST_ENV, "bwrap")
    if strongest not in ISOLATIONS[:2]:
        raise SandboxError(f"{STRONGEST_ENV} must be bwrap or user (the strongest isolation grading may use), "
                           f"not {strongest!r}; for none, pass --no-sandbox")
    reason = "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    if strongest == "user":
        reason = f"{STRONGEST_ENV}=user asks for no namespaces"
    elif shutil.which("bwrap") is not None:
        problem = _trial("bwrap")
        if not problem:
            return "bwrap", ""
        reason = f"bubblewrap cannot make namespaces here (Docker without privileges?): {problem}"
    problem = _trial("user")
    if problem:
        return "none", (f"{reason}; and a separate user cannot run the kit here ({problem}): install Python, its "
                        "environment and the offline models (SPECDEC_KIT_CACHE) where every user can read them")
    return "user", reason


def _trial(isolation: str) -> str:
    """"" if a sandbox of `isolation` runs the student package and reads the offline models, else what it said."""
    check = ("import os, specdec_kit\nfrom specdec_kit import settings\n"
             "assert os.access(settings.cache_dir(), os.R_OK | os.X_OK), f'cannot read {settings.cache_dir()}'")
    try:
        box = Sandbox("trial", isolation, Limits())
    except OSError as e:  # the runtime's tmpfs: a container where root may not mount
        return str(e)
    try:
        done = box.run([sys.executable, "-I", "-c", check], timeout=60)
    finally:
        box.close()
    return "" if done.returncode == 0 else (done.stderr.strip().splitlines() or [f"status {done.returncode}"])[-1]


_serial = itertools.count()


class Sandbox:
    """One sandbox: its folder, uid, cgroups and processes. `isolation` is one of `ISOLATIONS`."""

    def __init__(self, name: str, isolation: str, limits: Limits, weights: bool = True):
        if isolation not in ISOLATIONS:
            raise ValueError(f"isolation must be one of {ISOLATIONS}, got {isolation!r}")
        self.isolation, self.limits = isolation, limits
        self.weights = weights  # reads the check pairs' weights (`restrict_weights`): a kernel does, a verdict not
        self._lease = None if isolation == "none" else uids.take()  # a uid no other live sandbox holds
        self.uid = None if self._lease is None else self._lease.uid
        if self.uid is not None and pids_of_uid(self.uid):  # left by a grader that crashed, which freed its lock
            kill_uid(self.uid)
        self.root = Path(tempfile.mkdtemp(prefix="specdec-sandbox-"))
        self.home = self.root / "home"  # the scratch folder (under bwrap, what its tmpfs copy starts as)
        self.runtime = self.root / "runtime"  # the kernel's connection file and sockets
        for folder in (self.home, self.runtime):
            folder.mkdir()
            self._own(folder)
        self.root.chmod(0o711)  # the uid passes through to its folders and sees nothing else here
        self._runtime_mounted = False
        if isolation == "bwrap":  # in the grader's mount namespace: the grader reaches the kernel's sockets there
            try:
                mount("specdec-runtime", str(self.runtime), "tmpfs", MS_NOSUID | MS_NODEV,
                      f"{RUNTIME_SPACE},mode=700,uid={self.uid},gid={self.uid}")
            except OSError:
                shutil.rmtree(self.root, ignore_errors=True)
                uids.give(self._lease)
                raise
            self._runtime_mounted = True
        memory = (limits.memory_mb + limits.extra_memory_mb) << 20 if limits.memory_mb else 0
        try:  # None where the grader may make no cgroup (`processes.cgroup_support` says why)
            self.cgroup = make_cgroup(f"{_safe(name)}-{os.getpid()}-{next(_serial)}", memory, limits.pids) \
                if self.uid is not None else None
        except OSError:
            self._release()
            raise
        self._processes: list[subprocess.Popen] = []

    def describe(self) -> str:
        """The sandbox as JSON, for another process of the grader to start processes in it (`attach`)."""
        return json.dumps({"isolation": self.isolation, "limits": vars(self.limits), "uid": self.uid,
                           "weights": self.weights,
                           "root": str(self.root), "cgroup": {k: str(v) for k, v in self.cgroup.dirs.items()}
                           if self.cgroup else {}})

    @property
    def limits_held(self) -> str:
        """What holds this sandbox's limits, in words (`limits_label`)."""
        return limits_label(self.isolation, self.cgroup.version if self.cgroup else "")

    def cpu_seconds(self) -> float | None:
        """User and system CPU seconds of every process the sandbox ever held (monotone), from its cgroup; None
        without one."""
        return self.cgroup.cpu_seconds() if self.cgroup is not None else None

    @classmethod
    def attach(cls, description: str) -> Sandbox:
        """The sandbox `description` (made by `describe`) names; closing it stays with the process that made it."""
        fields = json.loads(description)
        box = cls.__new__(cls)
        box.isolation, box.limits, box.uid = fields["isolation"], Limits(**fields["limits"]), fields["uid"]
        box.weights, box._lease, box._runtime_mounted = fields["weights"], None, False
        box.root = Path(fields["root"])
        box.home, box.runtime = box.root / "home", box.root / "runtime"
        box.cgroup = attach_cgroup(fields["cgroup"])
        box._processes = []
        return box

    def seed(self, folder: Path) -> None:
        """The scratch folder starts as a copy of the regular files of `folder` (the submission's); RefusedEntry if it
        holds anything else (a link is never followed)."""
        copy_tree(folder, self.home, self.uid, skip=lambda name: name == ".ipynb_checkpoints")

    def command(self, argv: list[str], env: dict | None = None, cwd: Path | None = None) -> list[str]:
        """The command line that runs `argv` in the sandbox (with `env` as its whole environment, in `cwd`, by
        default the scratch folder). Run it as root, from anywhere."""
        env = self.environment(env)
        cwd = cwd or self.home
        spec = {"cgroups": self.cgroup.procs_files() if self.cgroup else [], "rlimits": self._rlimits(),
                "stage": None, "binds": [], "scratch": None, "uid": self.uid, "argv": argv, "env": env,
                "groups": [uids.WEIGHTS_GID] if self.weights else [], "cwd": str(cwd)}
        if self.isolation == "bwrap":
            readable = _readable_paths()
            spec.update(stage=str(STAGE), binds=[str(p) for p in readable], env=None,
                        argv=self._bwrap(readable, env, cwd) + argv,
                        scratch={"mount": str(SCRATCH), "seed": str(self.home), "bytes": self.limits.scratch_mb << 20,
                                 "files": self.limits.scratch_files})
            STAGE.mkdir(parents=True, exist_ok=True)
            prefix = [shutil.which("unshare") or "unshare", "--mount", "--propagation", "private", "--"]
        else:
            prefix = []
        return [*prefix, sys.executable, "-I", "-S", str(ENTER), json.dumps(spec)]

    def environment(self, env: dict | None = None) -> dict:
        """What a process of the sandbox gets: `env`, or the grader's PATH and locale, with its home, offline."""
        from specdec_kit.core import settings

        base = {k: v for k, v in os.environ.items() if k in KEPT_ENV} if env is None else dict(env)
        base.update({"HOME": str(self.home), "TMPDIR": "/tmp", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                     "SPECDEC_KIT_CACHE": str(settings.cache_dir()), "PYTHONDONTWRITEBYTECODE": "1"})
        for key in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "LD_PRELOAD"):
            base.pop(key, None)
        return base

    def popen(self, argv: list[str], env: dict | None = None, **kwargs) -> subprocess.Popen:
        """Start `argv` in the sandbox (`kwargs` as for Popen: stdio, pass_fds)."""
        process = subprocess.Popen(self.command(argv, env), start_new_session=True, **kwargs)
        self._processes.append(process)
        return process

    def run(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
        """Run `argv` in the sandbox to its end (or `timeout`), its output captured."""
        process = self.popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            out, err = process.communicate()
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)

    @contextlib.contextmanager
    def frozen(self):
        """None of the sandbox's processes runs inside the block (nothing of it competes with a timing)."""
        if self.cgroup is None:
            yield
            return
        self.cgroup.freeze()
        try:
            yield
        finally:
            self.cgroup.thaw()

    def pids(self) -> list[int]:
        """The sandbox's processes, as the grader sees them."""
        if self.cgroup is not None:
            return self.cgroup.pids()
        if self.uid is not None:
            return pids_of_uid(self.uid)
        return [p.pid for p in self._processes if p.poll() is None]

    def outer_pid(self, inner: int) -> int | None:
        """The grader's pid of the sandbox's process `inner` (a pid as the sandbox sees it), if it has one."""
        if self.isolation != "bwrap":
            return inner if inner in self.pids() else None
        for pid in self.pids():
            with contextlib.suppress(OSError):
                status = Path(f"/proc/{pid}/status").read_text()
                nspid = next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:"))
                if int(nspid[-1]) == inner:
                    return pid
        return None

    def kill_all(self) -> None:
        """Kill every process of the sandbox, its own children and anything they started."""
        for process in self._processes:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.kill_all()
        elif self.uid is not None:
            kill_uid(self.uid)
        for process in self._processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(5)
        self._processes = [p for p in self._processes if p.poll() is None]

    def close(self) -> None:
        """Kill everything of the sandbox and remove its folder and cgroups."""
        self.kill_all()
        if self.cgroup is not None:
            self.cgroup.remove()
        self._release()

    def _release(self) -> None:
        """Its runtime tmpfs, folder and uid given back."""
        if self._runtime_mounted:
            with contextlib.suppress(OSError):  # a grading result outweighs a tmpfs of 1 MB left mounted
                _unmount(self.runtime)
            self._runtime_mounted = False
        shutil.rmtree(self.root, ignore_errors=True)
        if self._lease is not None:
            uids.give(self._lease)
            self._lease = self.uid = None

    def _own(self, path: Path) -> None:
        if self.uid is not None:
            os.chown(path, self.uid, self.uid, follow_symlinks=False)

    def _rlimits(self) -> dict:
        limits = {"RLIMIT_CORE": 0, "RLIMIT_FSIZE": self.limits.file_mb << 20}
        if self.limits.memory_mb:
            limits["RLIMIT_DATA"] = self.limits.memory_mb << 20
        return limits

    def _bwrap(self, readable: list[Path], env: dict, cwd: Path) -> list[str]:
        argv = [shutil.which("bwrap") or "bwrap", "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-net",
                "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--hostname", "sandbox",
                "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
        for top in ("bin", "sbin", "lib", "lib32", "lib64"):
            path = Path("/") / top
            if path.is_symlink():
                argv += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                argv += ["--ro-bind", str(path), str(path)]
        # /dev/shm in the capped tmpfs too: bubblewrap's --dev gives one of its own, outside the caps.
        argv += ["--proc", "/proc", "--dev", "/dev", "--bind", str(SCRATCH / "shm"), "/dev/shm",
                 "--bind", str(SCRATCH / "tmp"), "/tmp"]
        for device in sorted(Path("/dev").glob("nvidia*")):  # a GPU, where the machine has one
            argv += ["--dev-bind", str(device), str(device)]
        for index, path in enumerate(readable):
            argv += ["--ro-bind", str(STAGE / str(index)), str(path)]
        argv += ["--bind", str(SCRATCH / "home"), str(self.home), "--bind", str(self.runtime), str(self.runtime)]
        argv += ["--remount-ro", "/", "--chdir", str(cwd), "--clearenv"]  # the tree bwrap made for the binds too
        for key, value in env.items():
            argv += ["--setenv", key, value]
        return [*argv, "--"]


def limits_label(isolation: str, cgroup: str) -> str:
    """What holds a sandbox's limits, in words: `isolation` (`ISOLATIONS`) and its cgroup's version ("" if none)."""
    if isolation == "none":
        return "none"
    return f"{isolation}+{cgroup}" if cgroup else f"{isolation}, no cgroup: per-process limits only"


def restrict_weights(folders: list[Path]) -> None:
    """Make the weights under `folders` readable by root and `uids.WEIGHTS_GID` only: a sandbox made with
    `weights=False` (the verdict's: its models run in the grading process) cannot compute with them."""
    from specdec_kit.protocol.remote import WEIGHT_FILES

    for pattern in WEIGHT_FILES:
        for folder in folders:
            for path in folder.rglob(pattern):
                os.chown(path, 0, uids.WEIGHTS_GID)
                path.chmod(0o640)


def hide(folders: list[Path]) -> None:
    """Make `folders` unreachable to every other user (the `user` isolation's only wall around the course)."""
    for folder in folders:
        folder.chmod(folder.stat().st_mode & ~0o007)


def _readable_paths() -> list[Path]:
    """What a sandbox reads besides the system: the Python installation and environment, the student package,
    the prompts, the offline models, the sandbox's own entry scripts (`host_main.py`)."""
    import specdec_kit
    from specdec_kit.core import prompts, settings

    paths = [Path(sys.base_prefix), Path(sys.prefix), Path(specdec_kit.__file__).parent,
             prompts.default_prompts_path(), settings.cache_dir(), Path(__file__).with_name("host_main.py")]
    settings.cache_dir().mkdir(parents=True, exist_ok=True)
    unique = []
    for path in (p.resolve() for p in paths):
        if path.exists() and path not in unique:
            unique.append(path)
    return unique


def _unmount(path: Path) -> None:
    """Detach the mount at `path` (MNT_DETACH: at once, even while a process still holds a file of it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(str(path).encode(), 2) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"umount {path}: {os.strerror(error)}")


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:64]
