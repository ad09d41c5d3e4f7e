"""A check's time limit in the submission's own time, not the machine's clock: a loaded machine stretches every
second on the clock, but not the CPU a decode needs, nor a sleep.

    meter = Meter(60, cpu=process_cpu(pid), threads=2, delay=pids_delay(lambda: [pid]))
    with meter.serving(): ...       # the grading process runs a model's forward for the child: its CPU counts too
    meter.left()                    # seconds the wait may still last; <= 0: over, and `meter.why()` says how
    meter.used()                    # the submission's own time so far
    meter.cost()                    # the CPU its work took, every process and thread counted whole (speed test)

The submission's own time is
- computing: the CPU of its processes (`cpu`: the sandbox's cgroup, or the child's own accounting) over the `threads`
  its torch was given (so that on an idle machine a decode that keeps them busy counts what the clock would), and the
  CPU of the grading process's thread while it serves that submission's model requests;
- waiting on nothing: each stretch of at least WINDOW seconds in which it used under IDLE_SHARE of a core and moved
  no byte (a sleep, a child stopped mid-message, one that does not read) counts whole.
Time it spent waiting for a core of a loaded machine is neither. The clock stops a request only at WALL_FACTOR
times its limit, and counts there not the time its processes' threads were runnable but waiting for a core (`delay`:
the scheduler's run delay, /proc/<pid>/task/<tid>/schedstat; a child's adds that of the grading thread that reads and
serves it, `child.py`): a loaded machine stretches the clock without bringing a correct notebook nearer to the
backstop. (Where the kernel keeps no run delay, the backstop is the clock's alone.) A thread waits for a core only
while a core runs something else: the submission's own threads, whose CPU is counted, or another job's.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable

from specdec_kit.checks.core import WALL_FACTOR

from .processes import stat_fields

IDLE_SHARE = 0.01  # of one core: a sleeping child's threads use about 0.01 % (seen: 70 us of CPU a second)
WINDOW = 1.0  # seconds: idleness is judged over stretches at least this long
TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> Callable[[], float]:
    """The CPU seconds of process `pid`, its threads and the children it has waited for (0 once it is gone)."""
    last = [0.0]

    def cpu() -> float:
        try:
            fields = stat_fields(pid)
        except (OSError, IndexError):
            return last[0]
        last[0] = max(last[0], sum(int(f) for f in fields[11:15]) / TICKS)  # utime stime cutime cstime
        return last[0]

    return cpu


def pids_cpu(pids: Callable[[], list[int]]) -> Callable[[], float]:
    """The CPU seconds of the live processes `pids()` names, never less than last seen (a process that ends takes
    its seconds with it: a lower bound, where no cgroup counts them)."""
    last = [0.0]

    def cpu() -> float:
        last[0] = max(last[0], sum(process_cpu(pid)() for pid in pids()))
        return last[0]

    return cpu


def _no_delay() -> float:
    return 0.0


class Meter:
    def __init__(self, seconds: float, cpu: Callable[[], float], threads: int = 1,
                 delay: Callable[[], float] = _no_delay):
        self.seconds, self._cpu, self.threads, self._delay = seconds, cpu, max(threads, 1), delay
        self._started, self._cpu_started = time.monotonic(), cpu()
        self._served = 0.0  # the serving thread's CPU, serving it
        self._serving_since = None  # while serving: that thread's CPU when it began
        self.idle = 0.0  # the stretches spent waiting on nothing
        self.held = 0.0  # the stretches the threads `delay` reads spent waiting for a core
        self._look, self._look_computing, self._moved = self._started, 0.0, False
        self._look_delay = self._delay()

    def _spent(self) -> tuple[float, float]:
        """(the CPU of its processes, the grading process's CPU in serving it), since the meter started."""
        serving = time.thread_time() - self._serving_since if self._serving_since is not None else 0.0
        return self._cpu() - self._cpu_started, self._served + serving

    def computing(self) -> float:
        own, served = self._spent()
        return own / self.threads + served

    def used(self) -> float:
        return self.computing() + self.idle

    def cost(self) -> float:
        """What a decode cost, for a speed ratio between two runs measured alike: the CPU of its processes, every
        thread counted whole, the grading process's CPU in serving it, and its stretches waiting on nothing. A loaded
        machine delays a decode without raising its cost."""
        own, served = self._spent()
        return own + served + self.idle

    @contextlib.contextmanager
    def serving(self):
        """The grading process's thread runs this submission's request: its CPU is the submission's."""
        self._serving_since = time.thread_time()
        try:
            yield
        finally:
            self._served += time.thread_time() - self._serving_since
            self._serving_since = None

    def active(self) -> None:
        """Bytes moved: the stretch under way is not idle."""
        self._moved = True

    def left(self) -> float:
        now, computing = time.monotonic(), self.computing()
        span = now - self._look
        if span >= WINDOW:  # a shorter look would count a wait for a core of a loaded machine as idle
            delayed = self._delay()
            held = min(span, max(delayed - self._look_delay, 0.0))  # threads waiting side by side: the span at most
            if not self._moved and computing - self._look_computing + held < IDLE_SHARE * span:
                self.idle += span
            self.held += held
            self._look, self._look_computing, self._look_delay, self._moved = now, computing, delayed, False
        return min(self.seconds - computing - self.idle,
                   self.seconds * WALL_FACTOR - (now - self._started - self.held))

    def mostly_idle(self) -> bool:
        return self.idle > self.computing()

    def why(self) -> str:
        """How the limit was reached, in words."""
        computing = self.computing()
        if computing + self.idle >= self.seconds:
            return (f"did not return within {self.seconds:g} s of its own time ({computing:.0f} s computing, "
                    f"{self.idle:.0f} s waiting on nothing)")
        backstop = f"had not returned after {self.seconds * WALL_FACTOR:g} s on the clock"
        return backstop + (f" besides {self.held:.0f} s its processes waited for a core of a loaded machine"
                           if self.held >= 1 else "")


class Clock:
    """A wait bounded by the clock alone, for the grader's own processes (a host's start)."""

    def __init__(self, seconds: float):
        self._until = time.monotonic() + seconds

    def left(self) -> float:
        return self._until - time.monotonic()

    def active(self) -> None:
        pass
