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
