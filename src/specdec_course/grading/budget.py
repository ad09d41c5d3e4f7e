"""The CPU seconds all checks of one notebook may use together (`[limits] verdict_seconds`), and what a test past
them reads."""

from __future__ import annotations

import contextlib
import time

from specdec_kit.checks.core import WALL_FACTOR

from ..core.plan import Plan


class Budget:
    """The CPU seconds all checks of one notebook may use together, charged by each request (`charge`: the
    submission's CPU and the grader's serving it, as its `Meter` counted them); the clock stops them at WALL_FACTOR
    times that, waits for another job's timing, for the notebook's own run to end, or for a core of a loaded machine
    (`Meter.held`) not counted."""

    def __init__(self, seconds: float):
        self.seconds, self.spent, self.started, self.waited = seconds, 0.0, time.monotonic(), 0.0

    def charge(self, cpu_seconds: float) -> None:
        self.spent += cpu_seconds

    def left(self) -> float:
        return min(self.seconds - self.spent,
                   self.seconds * WALL_FACTOR - (time.monotonic() - self.started - self.waited))

    def add_wait(self, seconds: float) -> None:
        self.waited += seconds

    @contextlib.contextmanager
    def pause(self):
        started = time.monotonic()
        try:
            yield
        finally:
            self.add_wait(time.monotonic() - started)


def out_of_time(plan: Plan, test: str) -> str:
    return (f"the kit's checks of this notebook used their budget of {plan.verdict_seconds:g} s of CPU in {test} (a "
            "loop that never ends, or code that waits), so the tests from there on were not judged")
