"""Started by the grader, as root, to put one process into a submission's sandbox (`box.py`): join the
sandbox's cgroups, set its limits, bind what the sandbox may read where its uid can reach it, mount the space it
may write (its scratch folder, /tmp and /dev/shm: one tmpfs of a byte and a file cap, the scratch folder seeded with a
copy of the grader's), ignore SIGINT (bubblewrap's own processes would die of a kernel's interrupt), drop to the
sandbox's uid, exec.

    python -I -S enter.py SPEC          # SPEC: JSON; under `unshare --mount` when it binds (bubblewrap)

With no argv in SPEC it runs nothing: as the uid, it kills every process of that uid (the cleanup where no cgroup
can be written). It needs no program the uid may run: this Python is started by root.

Standard library only, and no `site`: it runs before anything of the submission's and imports nothing of ours.
"""

import ctypes
import json
import os
import resource
import signal
import stat
import sys

MS_NOSUID, MS_NODEV, MS_BIND, MS_REC = 2, 4, 4096, 16384
FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2); OSError with the call's words when it fails."""
    libc = ctypes.CDLL(None, use_errno=True)
    args = [None if value is None else value.encode() for value in (source, target, fstype, data)]
    if libc.mount(args[0], args[1], args[2], flags, args[3]) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mount {source} on {target}: {os.strerror(error)}")


def scratch(space: dict, uid: int) -> None:
    """The sandbox's writable space, in this private mount namespace: a tmpfs of `space["bytes"]` and `space["files"]`
    (inodes) at `space["mount"]`, holding `home` (a copy of the folders and regular files of `space["seed"]`), `tmp`
    and `shm` (bound as /dev/shm), all the uid's. It goes with the namespace, when the sandbox's last process ends."""
    os.mkdir(space["mount"])
    mount("specdec-scratch", space["mount"], "tmpfs", MS_NOSUID | MS_NODEV,
          f"size={space['bytes']},nr_inodes={space['files']},mode=755")
    home, tmp, shm = (os.path.join(space["mount"], name) for name in ("home", "tmp", "shm"))
    for folder, mode in ((home, 0o700), (tmp, 0o1777), (shm, 0o1777)):
        os.mkdir(folder)
        os.chmod(folder, mode)
        os.chown(folder, uid, uid)
    source, target = os.open(space["seed"], FOLDER), os.open(home, FOLDER)
    try:
        _copy(source, target, uid)
    finally:
        os.close(source)
        os.close(target)


def _copy(source: int, target: int, uid: int) -> None:
    """The folders and regular files of folder `source` into folder `target`, the uid's; a link is not followed."""
    for name in os.listdir(source):
        mode = os.stat(name, dir_fd=source, follow_symlinks=False).st_mode
        if stat.S_ISDIR(mode):
            os.mkdir(name, 0o700, dir_fd=target)
            os.chown(name, uid, uid, dir_fd=target)
            inner = os.open(name, FOLDER, dir_fd=source), os.open(name, FOLDER, dir_fd=target)
            try:
                _copy(*inner, uid)
            finally:
                for fd in inner:
                    os.close(fd)
        elif stat.S_ISREG(mode):
            src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=source)
            dst = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=target)
            try:
                os.fchown(dst, uid, uid)
                while chunk := os.read(src, 1 << 20):
                    while chunk:
                        chunk = chunk[os.write(dst, chunk):]
            finally:
                os.close(src)
                os.close(dst)


def main(spec: dict) -> None:
    for procs in spec["cgroups"]:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    for name, value in spec["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    if spec["stage"]:  # a tmpfs of this private mount namespace, holding a bind of each path the sandbox reads
        mount("specdec-stage", spec["stage"], "tmpfs", 0, "mode=755")
        for index, source in enumerate(spec["binds"]):
            target = os.path.join(spec["stage"], str(index))
            if os.path.isdir(source):
                os.mkdir(target)
            else:
                open(target, "w").close()
            mount(source, target, None, MS_BIND | MS_REC)
    if spec["scratch"]:
        scratch(spec["scratch"], spec["uid"])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the kernel sets its own handler while it runs a cell
    if spec["uid"] is not None:
        os.setgroups(spec["groups"])
        os.setgid(spec["uid"])
        os.setuid(spec["uid"])
    if spec["argv"] is None:  # the cleanup: every process of the uid, reached as that uid, this one excepted
        os.kill(-1, signal.SIGKILL)
        return
    os.chdir(spec["cwd"])
    # An absolute path: the uid may not read what a PATH search would import.
    os.execve(spec["argv"][0], spec["argv"], spec["env"] if spec["env"] is not None else os.environ)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
