"""What every check shares: the runner a check's probes go through, and the helpers that read what came back (the
verdict type is `failure.CheckFailed`).

A check takes the decoder class itself (a notebook: its probes run in this process, `LocalRunner`) or any
runner with the same `run(request)` method (grading: `course.isolation.ChildRunner`, in another process).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from contextlib import contextmanager

from ..core.result import DecodeResult
from ..core.run_delay import pids_delay
from ..core.tracebacks import fold, render
from ..protocol.probes import ROLES, pair_dirs, run_probe, set_threads
from .failure import require
from .outcomes import CaseOutcome, assemble

LOCAL_SECONDS = 120  # CPU seconds of one probe of a visible check in a notebook; on the tiny pair they take seconds
# A time limit counts the CPU the code used, so a loaded machine does not stretch it; the clock stops it only at this
# many times the limit (code that waits on nothing uses no CPU), not counting the time its threads waited for a core.
WALL_FACTOR = 10


class CheckTimeout(BaseException):
    """A visible check's call into the student's code ran past its time limit (a BaseException, so that an
    `except Exception` in that code cannot swallow it)."""

    def _render_traceback_(self) -> list[str]:
        return render(self, why=": your frames show where the code was when the time ran out")


class LocalRunner:
    """Runs probes on a decoder class in this process (a notebook's test cells); exceptions propagate, set to show
    in IPython with the student's frames only (`tracebacks.fold`).

    Each probe may use `seconds` of this process's CPU (Unix, main thread: a SIGPROF timer, with the clock's
    SIGALRM at WALL_FACTOR times that as a backstop, put off by the time this process's threads waited for a core of
    a loaded machine; elsewhere without a limit), the offline models' first build not counted; past it, CheckTimeout
    names the call that had not returned.
    `ran` counts the cases run, by the probe's kind and pair; `events` holds the last request's events, so that a
    check can read what a failed decode did (its `stuck` event).
    """

    def __init__(self, decoder_class: type, seconds: float = LOCAL_SECONDS):
        self.decoder_class, self.seconds = decoder_class, seconds
        self.ran: Counter[tuple[str, str]] = Counter()
        self.events: list[dict] = []
        set_threads()

    def run(self, request: dict) -> list[CaseOutcome]:
        events = self.events = []
        pair_dirs(request["pair"])  # builds the offline pair once per machine, outside the time limit
        try:
            with _time_limit(self.seconds, events):
                run_probe(request, self.decoder_class, events.append)
        except Exception as e:  # the student's own exception (the kit's carry their own display)
            if not hasattr(type(e), "_render_traceback_"):
                fold(e)
            raise
        cases = request.get("cases", [None])
        runs = sum(case[5] for case in cases) if request["kind"] == "sample" else len(cases) * request.get("repeat", 1)
        self.ran[(request["kind"], request["pair"])] += runs
        return assemble(events, request)


@contextmanager
def _time_limit(seconds: float, events: list[dict]):
    if not hasattr(signal, "SIGPROF") or threading.current_thread() is not threading.main_thread():
        yield
        return

    delay, started = pids_delay(lambda: [os.getpid()]), time.monotonic()
    delay_started, credited = delay(), [0.0]

    def expire(signum, frame):
        if signum == signal.SIGALRM:  # the backstop: the clock, less the time a loaded machine withheld a core
            held = min(delay() - delay_started, time.monotonic() - started)
            if held - credited[0] >= 1:
                signal.setitimer(signal.ITIMER_REAL, held - credited[0])
                credited[0] = held
                return
        calls = [e for e in events if e["event"] == "call"]
        call = f"{calls[-1]['method']} ({calls[-1]['args']})" if calls else "the check"
        spent = f"used {seconds:g} s of CPU" if signum == signal.SIGPROF else \
            f"had not returned after {seconds * WALL_FACTOR:g} s"
        raise CheckTimeout(f"{call} {spent}, where correct code takes seconds: look for a loop that never ends (a "
                           "round that adds no token, a condition never met)")

    timers = {signal.SIGPROF: (signal.ITIMER_PROF, seconds), signal.SIGALRM: (signal.ITIMER_REAL,
                                                                               seconds * WALL_FACTOR)}
    previous = {signum: signal.signal(signum, expire) for signum in timers}
    for which, limit in timers.values():
        signal.setitimer(which, limit)
    try:
        yield
    finally:
        for signum, (which, _) in timers.items():
            signal.setitimer(which, 0)
            signal.signal(signum, previous[signum])


def as_runner(decoder):
    """A runner for `decoder`: a class runs here, anything with `run(request)` is used as it is."""
    return LocalRunner(decoder) if isinstance(decoder, type) else decoder


# ---------------------------------------------------------------------------------------------
# What every judged forward must satisfy


def require_seen_forwards(outcome: CaseOutcome) -> None:
    """Every forward reached the model through its own call, where the kit counts it."""
    for role in ROLES:
        unseen = outcome.unseen(role)
        require(unseen <= 0,
                f"{unseen} forward pass(es) of the {role} model ran without going through the model's own call "
                f"(model.forward(...) called directly, or the model's hooks removed): call it as "
                f"self.{role}_model(...), so that its forward passes can be counted")


def decoded(outcome: CaseOutcome, what: str) -> DecodeResult:
    """The case's DecodeResult, or a failure saying what came back instead."""
    result = outcome.result
    require(result["type"] == "DecodeResult" and result["token_ids"] is not None,
            f"{what}: speculative_decode must return a specdec_kit.DecodeResult, got {result['type']}")
    return DecodeResult("", result["token_ids"], result["proposed"] or [], result["accepted"] or [])
