"""The host children fork from (`specdec_course.sandbox.host`, running host_main.py): its start is bounded by what it
uses, not by the clock, which a loaded machine (or an emulated one) stretches."""

import contextlib
import os
import signal
import threading
import time

import pytest

from specdec_course.sandbox import host as host_module
from specdec_course.sandbox import processes
from specdec_course.sandbox.box import Limits, Sandbox
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


NO_SANDBOX = {"no sandbox": lambda: None, "a sandbox without isolation": lambda: Sandbox("test", "none", Limits())}
ASLEEP = [("asleep", "import time\ntime.sleep(3600)\n")]  # definitions that never end, as a stalled notebook's
SPIN = [("spin", "class Spin:\n    while True:\n        pass\n")]  # a child busy in the notebook's code
GONE_SECONDS = 10  # a killed child is gone within this


@pytest.mark.slow
@pytest.mark.parametrize("make_box", NO_SANDBOX.values(), ids=NO_SANDBOX)
def test_a_child_killed_by_the_grader_is_gone_while_its_host_lives(make_box):
    """A child the grader kills (a request that ran out of time) is gone at once, the host still running: with no
    sandbox, or one without isolation (no uid, no cgroup, `--no-sandbox`), whose processes are only the host."""
    with forked(make_box, ASLEEP) as (host, pid):
        host.kill(pid)
        until(lambda: not alive(pid), f"the child {pid} the grader killed still runs", GONE_SECONDS)


@pytest.mark.slow
@pytest.mark.parametrize("make_box", NO_SANDBOX.values(), ids=NO_SANDBOX)
def test_a_closed_host_leaves_no_child_of_its_own_behind(make_box):
    """Without a sandbox to empty, a host's children (each in a process group of its own) are killed with it: a
    child busy in the notebook's code, which no grader closed (a test that failed half-way), no longer outlives
    the host."""
    with forked(make_box, SPIN) as (host, pid):
        host.close()
        until(lambda: not alive(pid), f"the host's child {pid} outlived it", GONE_SECONDS)


@contextlib.contextmanager
def forked(make_box, cells: list[tuple[str, str]]):
    """A host in the sandbox `make_box()` makes (None: no sandbox) and its child running `cells`, once the child
    leads a process group of its own; afterwards nothing of them is left, whatever the test found."""
    box = make_box()
    host = Host(box)
    channel, pid = host.fork({"cells": cells, "threads": 1, "memory_mb": 0, "served": {}})
    try:
        until(lambda: leads_a_group(pid), "the child leads a process group of its own")
        yield host, pid
    finally:
        host.close()
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
        channel.close()
        if box is not None:
            box.close()


def until(condition, failure: str, seconds: float = 60) -> None:
    """Wait up to `seconds` for `condition()`; fail with `failure` if it never holds."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not condition():
        time.sleep(0.1)
    assert condition(), failure


def leads_a_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, killed and not yet reaped by the host that is gone, does not)."""
    try:
        return processes.alive(pid)
    except (FileNotFoundError, ProcessLookupError):
        return False
