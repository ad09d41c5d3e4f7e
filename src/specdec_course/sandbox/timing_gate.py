"""One timing at a time on the machine, for a speed test timed on the clock (a GPU's): it measures a decoder while
nothing else of the grading runs (`QUIET`), across the jobs of a batch and the processes of the machine
(`checks.timing_lock`). A timing measured by cost (a CPU's, `grading/speed.py`) needs no gate.
"""

from __future__ import annotations

import contextlib
import threading
import time

from specdec_kit import checks


class Quiet:
    """One timing at a time: a timing holds the machine-wide timing lock (`checks.timing_lock`, which a notebook's
    speed check takes too) and runs while no check of this process is in flight: parallel grading jobs share the
    machine, and a speed test measured beside another job's checks measures the contention. A check waits while
    a timing runs (its time limit does not count the wait); a timing waits up to `patience` seconds for the
    checks in flight to finish. Every wait here is bounded: a timing waits for another at most `checks.TIMING_WAIT`
    seconds, and a check for the timings at most that too, then goes on."""

    def __init__(self, patience: float = 30):
        self._changed = threading.Condition()
        self._timings, self._checks, self._patience = 0, 0, patience

    @contextlib.contextmanager
    def check(self):
        """Yields the seconds spent waiting for a timing to end."""
        started = time.monotonic()
        with self._changed:
            self._changed.wait_for(lambda: not self._timings, timeout=checks.TIMING_WAIT)
            self._checks += 1
        try:
            yield time.monotonic() - started
        finally:
            with self._changed:
                self._checks -= 1
                self._changed.notify_all()

    @contextlib.contextmanager
    def timing(self):
        with checks.timing_lock(), self._timed():
            yield

    @contextlib.contextmanager
    def _timed(self):
        with self._changed:
            self._changed.wait_for(lambda: not self._timings, timeout=checks.TIMING_WAIT)
            self._timings += 1
            self._changed.wait_for(lambda: self._checks == 0, timeout=self._patience)
        try:
            yield
        finally:
            with self._changed:
                self._timings -= 1
                self._changed.notify_all()


QUIET = Quiet()
