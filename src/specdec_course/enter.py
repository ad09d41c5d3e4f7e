"""Started by the grader, as root, to put one process into a submission's sandbox (`sandbox.py`): join the
sandbox's cgroups, set its limits, bind what the sandbox may read where its uid can reach it, ignore SIGINT
(bubblewrap's own processes would die of a kernel's interrupt), drop to the sandbox's uid, exec.

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
import sys

MS_BIND, MS_REC = 4096, 16384


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    args = [None if value is None else value.encode() for value in (source, target, fstype, data)]
    if libc.mount(args[0], args[1], args[2], flags, args[3]) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mount {source} on {target}: {os.strerror(error)}")


def main(spec: dict) -> None:
    for procs in spec["cgroups"]:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    for name, value in spec["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    if spec["stage"]:  # a tmpfs of this private mount namespace, holding a bind of each path the sandbox reads
        _mount("specdec-stage", spec["stage"], "tmpfs", 0, "mode=755")
        for index, source in enumerate(spec["binds"]):
            target = os.path.join(spec["stage"], str(index))
            if os.path.isdir(source):
                os.mkdir(target)
            else:
                open(target, "w").close()
            _mount(source, target, None, MS_BIND | MS_REC)
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
