"""A process's waits for a core, read from the kernel: they grow while it shares a busy core, not while it sleeps, and
a thread that ends or a thread number used again neither takes from the sum nor counts twice.

Example run: python -m pytest tests/kit/core/test_run_delay.py -q
"""

import os
import time

from specdec_kit.core import run_delay as module
from specdec_kit.core.run_delay import pids_delay

from load import one_busy_core


def test_a_busy_core_makes_this_process_wait_and_a_sleep_does_not():
    pid = os.getpid()
    delay = pids_delay(lambda: [pid])
    before = delay()
    time.sleep(1)
    slept = delay() - before
    with one_busy_core(spinners=3):
        until = time.thread_time() + 0.3  # 0.3 s of CPU at a quarter of a core: about 0.9 s of waiting
        while time.thread_time() < until:
            pass
    waited = delay() - before - slept
    assert slept < 0.1 and waited > 0.5, (slept, waited)


def test_threads_that_end_keep_their_waits_and_a_number_used_again_starts_anew(monkeypatch):
    threads = {(1, 10): 2.0, (1, 11): 3.0}
    monkeypatch.setattr(module.os, "listdir", lambda path: [str(tid) for pid, tid in threads])
    monkeypatch.setattr(module, "run_delay", lambda pid, tid: threads.get((pid, tid)))
    delay = pids_delay(lambda: [1])
    assert delay() == 5.0
    del threads[1, 11]  # thread 11 ends: its 3 s stay
    threads[1, 10] = 2.5
    assert delay() == 5.5
    threads[1, 10] = 0.25  # thread 10 ended and its number went to a new thread
    assert delay() == 5.75
