"""The host children fork from (`specdec_course.sandbox.host`, running host_main.py): its start is bounded by what it
uses, not by the clock, which a loaded machine (or an emulated one) stretches."""

import os
import signal
import threading
import time

import pytest

from specdec_course.sandbox import host as host_module
from specdec_course.sandbox.host import Host


@pytest.mark.slow
def test_a_host_held_up_on_the_clock_still_starts(monkeypatch):
    """Stopped for longer than its limit while it imports, as a machine busy with other work would hold it up, the
    host still starts: the limit counts its own CPU (its imports use a few seconds of it), and only 10 times the
    limit on the clock would stop it."""
    monkeypatch.setattr(host_module, "HOST_SECONDS", 15)
    host = Host(None)

    def hold_up():
        while host._process is None:
            time.sleep(0.05)
        os.kill(host._process.pid, signal.SIGSTOP)
        time.sleep(20)
        os.kill(host._process.pid, signal.SIGCONT)

    holder = threading.Thread(target=hold_up)
    holder.start()
    started = time.monotonic()
    try:
        channel, _ = host.fork({"cells": [], "threads": 1, "memory_mb": 0, "served": {}})
        channel.close()
    finally:
        holder.join()
        host.close()
    assert time.monotonic() - started > 15, "the host was held up past its limit on the clock"


@pytest.mark.slow
def test_a_closed_host_leaves_no_child_of_its_own_behind():
    """Without a sandbox to empty, a host's children (each in a process group of its own) are killed with it: a
    child busy in the notebook's code, which no grader closed (a test that failed half-way), no longer outlives
    the host."""
    host = Host(None)
    channel, pid = host.fork({"cells": [("spin", "class Spin:\n    while True:\n        pass\n")], "threads": 1,
                              "memory_mb": 0, "served": {}})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and os.getpgid(pid) != pid:  # until it leads its own group
            time.sleep(0.1)
        assert os.getpgid(pid) == pid, "the child leads a process group of its own"
    finally:
        host.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.1)
    still = alive(pid)
    if still:
        os.kill(pid, signal.SIGKILL)
    channel.close()
    assert not still, f"the host's child {pid} outlived it"


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, killed and not yet reaped by the host that is gone, does not)."""
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
