"""A machine loaded on purpose while the selftest grades: `batches` other `specdec-course autograde` runs of the
solved release, each starting again as soon as it ends, as a shared server or `--jobs` above the core count loads
it. The selftest's rows must not change (docs/benchmarks.md records a run).

    with loaded(6, solution, autograder, workdir / "load"):
        run_selftest(...)
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import nbformat

from ..sandbox import uids
from ..sandbox.processes import kill_uid, pids_of_uid
from .catalogue import Entry, make_submission


@contextlib.contextmanager
def loaded(batches: int, solution: Path, autograder: Path, workdir: Path):
    """Run in the main thread: a SIGTERM (`kill`, `timeout`) ends the block as an exit, so its batches end too
    (started in sessions of their own, they would otherwise outlive it, each starting again for ever)."""
    command = Path(sys.executable).with_name("specdec-course")
    processes = []
    stopped = signal.signal(signal.SIGTERM, _exit)
    try:
        for index in range(batches):
            folder = workdir / f"batch-{index}"
            (folder / "submissions").mkdir(parents=True, exist_ok=True)
            nbformat.write(make_submission(solution, Entry("solution", "")), folder / "submissions" / "load.ipynb")
            once = shlex.join([str(command), "autograde", str(folder / "submissions"), "--out", str(folder / "out"),
                               "--solution", str(solution), "--autograder", str(autograder)])
            processes.append(subprocess.Popen(["bash", "-c", f"while true; do rm -rf {shlex.quote(str(folder / 'out'))}"
                                                             f"; {once}; done"],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                              start_new_session=True))
        yield
    finally:
        signal.signal(signal.SIGTERM, stopped)
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for uid in uids.unheld():  # a batch killed outright leaves its sandboxes' processes: gone too
            if pids_of_uid(uid):
                kill_uid(uid)


def _exit(signum: int, frame) -> None:
    raise SystemExit(128 + signum)
