"""Torch's threads wait asleep in grading (`specdec_course.core.waits`): set before torch is imported by every grading
command, unless the environment says otherwise, and handed to the sandboxes' processes."""

import subprocess
import sys

import pytest

from specdec_course.core import waits

SPY = """
import os, sys
from specdec_course.core import waits
class Spied(BaseException):
    pass
seen = []
def spy():
    seen.append("torch" in sys.modules)
    waits.os.environ.setdefault(waits.OMP_WAIT, "PASSIVE")
    raise Spied  # what the command does next imports torch: seconds this test need not spend
waits.quiet_waits = spy
from specdec_course.cli import main
try:
    main({argv!r})
except Spied:
    pass
print(seen, os.environ.get(waits.OMP_WAIT))
"""


def test_quiet_waits_sets_passive_unless_set(monkeypatch):
    monkeypatch.delenv(waits.OMP_WAIT, raising=False)
    waits.quiet_waits()
    assert waits.os.environ[waits.OMP_WAIT] == "PASSIVE"
    monkeypatch.setenv(waits.OMP_WAIT, "ACTIVE")
    waits.quiet_waits()
    assert waits.os.environ[waits.OMP_WAIT] == "ACTIVE", "an instructor's own setting stands"


@pytest.mark.parametrize("argv", [["autograde", "no-such-folder", "--jobs", "0"],
                                  ["autograde-one", "no-such.ipynb", "--out", "no-such-out"],
                                  ["selftest", "--jobs", "0"]], ids=lambda argv: argv[0])
def test_each_grading_command_quiets_the_waits_before_torch_is_imported(argv):
    """Each sets the waits before torch is imported (the spy stops the command there)."""
    done = subprocess.run([sys.executable, "-c", SPY.format(argv=argv)], capture_output=True, text=True,
                          timeout=300, env={"PATH": "/usr/bin:/bin"})
    assert done.stdout.strip().endswith("[False] PASSIVE"), (done.stdout, done.stderr[-2000:])


def test_the_sandboxes_processes_keep_it(monkeypatch):
    from specdec_course.sandbox import host, kernel

    monkeypatch.setenv(waits.OMP_WAIT, "PASSIVE")
    monkeypatch.setenv("SECRET_OF_THE_GRADER", "x")
    sandboxed = host.Host(box=object()).environment()
    assert sandboxed[waits.OMP_WAIT] == "PASSIVE" and "SECRET_OF_THE_GRADER" not in sandboxed, sandboxed
    assert waits.OMP_WAIT in kernel.KERNEL_ENV, "the notebook's kernel keeps it"
