"""The selftest's loaded machine (`specdec_course.selftest.load`): its batches end with it, however it is stopped."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO, SOLUTION

STOPPED_INSIDE = """
import os, signal, sys, time
from pathlib import Path
from specdec_course.selftest.load import loaded
with loaded(1, Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])):
    time.sleep(3)  # the batch's loop has started
    os.kill(os.getpid(), signal.SIGTERM)  # as `kill` or `timeout` stop a selftest
    time.sleep(120)
"""


def processes_naming(text: str) -> list[str]:
    """`pid command line` of each live process whose command line holds `text`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            command = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if text in command:
                found.append(f"{cmdline.parent.name} {command}")
    return found


def test_a_selftest_stopped_by_sigterm_stops_its_batches(tmp_path):
    work = tmp_path / "load"
    started = time.monotonic()
    stopped = subprocess.run([sys.executable, "-c", STOPPED_INSIDE, str(SOLUTION), str(REPO / "autograder"),
                              str(work)], capture_output=True, text=True, timeout=100)
    try:
        assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-2000:]
        assert time.monotonic() - started < 60, "it ended at the signal, not after its sleep"
        time.sleep(1)
        left = processes_naming(str(work))
        assert not left, f"a batch outlived the selftest that started it: {left}"
    finally:
        for line in processes_naming(str(work)):
            os.kill(int(line.split()[0]), signal.SIGKILL)
