"""The seconds all checks of one notebook may take together (`[limits] verdict_seconds`), and what a test past
them reads."""

from __future__ import annotations

import contextlib
import time

from ..core.plan import Plan


class Budget:
    """The seconds all checks of one notebook may take together; waits for another job's timing, or for the
    notebook's own run to end, do not count."""

    def __init__(self, seconds: float):
        self.seconds, self.started, self.waited = seconds, time.monotonic(), 0.0

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.started - self.waited)

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
    return (f"the kit's checks of this notebook ran past their budget of {plan.verdict_seconds:g} s in {test} (a loop "
            "that never ends, or code that waits), so the tests from there on were not judged")
