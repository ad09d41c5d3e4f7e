"""A check's limit in the submission's own time: computing counts, waiting on nothing counts, waiting for a core of a
loaded machine does not, and the clock stops it only at its backstop, which that waiting does not bring nearer.

Example run: python -m pytest tests/course/sandbox/test_meter.py -q
"""

import os
import time

from specdec_course.sandbox.meter import Meter, process_cpu
from specdec_kit.checks.core import WALL_FACTOR
from specdec_kit.core.run_delay import pids_delay

from load import one_busy_core


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


def test_the_time_a_loaded_machine_withholds_a_core_does_not_bring_the_backstop_nearer(monkeypatch):
    """At load 30 on two cores each thread gets a fifteenth of one: a correct decode that needs 90 % of its limit takes
    13.5 times its limit on the clock. The clock alone (as before the run delay was read) stops it at WALL_FACTOR
    times its limit; counting out its threads' waits for a core, it returns with its points."""
    def run(counted: bool) -> tuple[bool, Meter]:
        clock, cpu, waited = [100.0], FakeCpu(), [0.0]
        monkeypatch.setattr(time, "monotonic", lambda: clock[0])
        meter = Meter(6, cpu, threads=2, **({"delay": lambda: waited[0]} if counted else {}))
        while meter.computing() < 0.9 * 6:  # its two threads, each running a fifteenth and waiting the rest
            clock[0] += 1
            cpu.seconds += 2 / 15
            waited[0] += 2 * 14 / 15
            if meter.left() <= 0:
                return False, meter
        return True, meter

    returned, meter = run(counted=False)
    assert not returned and meter.why() == f"had not returned after {6 * WALL_FACTOR:g} s on the clock"
    returned, meter = run(counted=True)
    assert returned and meter.idle == 0 and meter.held > 6 * WALL_FACTOR and meter.left() > 0


def test_a_thread_that_waits_for_a_core_is_not_waiting_on_nothing(monkeypatch):
    """A child given no core for seconds on end computes nothing, yet waits on a core, not on nothing."""
    clock, cpu, waited = [100.0], FakeCpu(), [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    meter = Meter(10, cpu, delay=lambda: waited[0])
    for _ in range(30):
        clock[0] += 1
        waited[0] += 1
        meter.left()
    assert meter.idle == 0 and meter.held == 30 and meter.left() == 10


def test_the_run_delay_read_from_the_kernel_is_a_busy_cores_waits():
    """0.2 s of CPU on a core shared with 19 busy loops (about 4 s on the clock) under a limit of 0.3 s: a meter that
    does not read the kernel's run delay stops it, at the clock's 3 s; the run delay says it waited for its core most
    of that time, and a meter reading it lets it finish."""
    pid = os.getpid()
    with one_busy_core(spinners=19):
        clock_only = Meter(0.3, process_cpu(pid))
        meter = Meter(0.3, process_cpu(pid), delay=pids_delay(lambda: [pid]))
        stopped, until = [], time.thread_time() + 0.2
        while time.thread_time() < until:
            if clock_only.left() <= 0 and not stopped:
                stopped.append(clock_only.why())
            assert meter.left() > 0, meter.why()
    # at its backstop, or, on a machine loaded besides, sooner: a second without a core read as waiting on nothing
    assert stopped, "the meter without the run delay should have stopped it"
    assert meter.held > 1


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
