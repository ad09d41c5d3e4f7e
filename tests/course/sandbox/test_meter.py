"""A check's limit in the submission's own time: computing counts, waiting on nothing counts, waiting for a core of a
loaded machine does not, and the clock stops it only at its backstop.

Example run: python -m pytest tests/course/sandbox/test_meter.py -q
"""

import time

from specdec_course.sandbox.meter import Meter
from specdec_kit.checks.core import WALL_FACTOR


class FakeCpu:
    def __init__(self):
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds


def test_cpu_counts_over_the_threads_given_and_the_time_a_loaded_machine_withholds_not_at_all(monkeypatch):
    clock, cpu = [100.0], FakeCpu()
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    meter = Meter(10, cpu, threads=2)
    for _ in range(30):  # 30 s on the clock at a sixth of each of its two threads' cores: 5 s of its time
        clock[0] += 1
        cpu.seconds += 2 / 6
        meter.left()
    assert abs(meter.used() - 5) < 1e-6 and meter.idle == 0 and meter.left() > 4.9
    for _ in range(6):  # an idle machine, both threads busy: a second of its time a second
        clock[0] += 1
        cpu.seconds += 2
        meter.left()
    assert meter.left() < 0 and "did not return within 10 s of its own time (11 s computing" in meter.why()


def test_waiting_on_nothing_counts_and_moving_bytes_is_not_waiting(monkeypatch):
    clock, cpu = [100.0], FakeCpu()
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    meter = Meter(10, cpu)
    for _ in range(4):  # bytes trickle in: not idle
        clock[0] += 1
        meter.active()
        meter.left()
    assert meter.idle == 0
    for _ in range(11):  # asleep
        clock[0] += 1
        meter.left()
    assert meter.left() <= 0 and meter.mostly_idle() and "11 s waiting on nothing" in meter.why()


def test_the_clock_is_a_backstop_at_wall_factor_times_the_limit(monkeypatch):
    clock, cpu = [100.0], FakeCpu()
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    meter = Meter(2, cpu)
    for _ in range(int(2 * WALL_FACTOR)):  # a trickle of bytes, computing nothing: never idle, never computing
        clock[0] += 1
        meter.active()
        meter.left()
    assert meter.left() <= 0 and f"had not returned after {2 * WALL_FACTOR:g} s on the clock" in meter.why()


def test_a_runs_cost_is_its_cpu_with_every_thread_whole_its_serving_and_its_sleep_and_not_the_clock(monkeypatch):
    """The speed test's measure (`Meter.cost`): a loaded machine that stretches a run on the clock leaves its cost
    as it was, so both sides of a ratio keep their costs whatever else runs."""
    clock, cpu, thread = [100.0], FakeCpu(), [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(time, "thread_time", lambda: thread[0])
    meter = Meter(60, cpu, threads=2)
    for _ in range(30):  # 30 s on the clock: 2 s of CPU over its processes' threads, 1 s of the grader serving it
        clock[0] += 1
        cpu.seconds += 2 / 30
        with meter.serving():
            thread[0] += 1 / 30
        meter.left()
    assert abs(meter.cost() - 3) < 1e-6 and meter.idle == 0
    for _ in range(3):  # asleep: what it waited on nothing counts whole
        clock[0] += 1
        meter.left()
    assert abs(meter.cost() - 6) < 1e-6
