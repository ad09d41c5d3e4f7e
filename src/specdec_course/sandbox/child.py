"""A submission's code in a grading child, forked from a host in its sandbox (`host.py`): probes run there, the
judging stays in the grading process.

    child = Child(host, cells, threads=1, memory_mb=4096, models=ModelServer(CHECK_PAIRS))
    runner = ChildRunner(child, "SpeculativeDecoder", seconds=60)
    checks.check_exact(runner)      # the probe runs in the child; the reference and verdict stay here
    child.close()

The child limits its memory (RLIMIT_DATA), runs the submission's definitions (`adapters.code_to_run(...,
definitions_only=True)`: imports, `def`, `class`, constants) and answers probe requests. Everything it sends is JSON
read whole from its channel (`channel.py`) with a size limit, every wait bounded by the request's `Meter`: nothing it
sends is unpickled or executed here, and nothing it does or leaves undone blocks this process. The check pairs'
models run here (`models.py`): a child's forward is a request this process runs and records. A request that does
not finish within its limit, or a child that dies or stalls, costs that request: the child's process group is
killed and the next request starts a new child.

The sandbox (`box.py`) is the boundary: the child's code can change anything in its own processes (the probes,
the events it sends), so what it sends is the student's claim, which the checks judge.
"""

from __future__ import annotations

import json
import os
import signal
import threading

from specdec_kit.checks.outcomes import MAX_NAME, MAX_TEXT, METHODS, assemble, capped
from specdec_kit.core.run_delay import run_delay
from specdec_kit.protocol.probes import ProbeError

from .channel import Stalled, TooLong
from .host import GraderFailed, Host
from .meter import Meter
from .models import ModelServer, NoProgress, OutOfTime
from .timing_gate import QUIET

MAX_MESSAGE = 16 << 20  # bytes: a larger message from a child is refused, not read
MAX_EVENTS = 100_000  # a child's events kept for one request (a check's cases send hundreds): more is a flood
MAX_CODE = 16 << 20  # bytes of a notebook's code the grader hands a child (grading.batch refuses more, with a row)
LOAD_SECONDS = 120  # CPU seconds of running a submission's definitions (imports included)


class ChildFailed(ProbeError):
    """The child did not answer: it ran past its time limit, or died. Names the student's call it was in."""


class Child:
    """One child of `host` running a submission's definitions; restarted after a timeout or a death. With `models`,
    the child's decoders get stand-ins for those pairs' models, which run here: the forward events of its requests
    are the server's record of what it ran; forward events the child sends are never read.

    A request's limit is a `Meter`, in the submission's own time: the CPU the sandbox's processes used (the child's
    own where the sandbox has no cgroup), the CPU this process spent serving its model requests, and the time it
    waited on nothing, with a backstop on the clock; every read and send on the child's channel waits on it. `used`
    holds the last request's time, for the check's and the notebook's budgets, `cost` its CPU (`Meter.cost`), `held`
    the time a loaded machine kept it waiting for a core (`Meter.held`), which no backstop counts."""

    def __init__(self, host: Host, cells: list[tuple[str, str]], threads: int = 1, memory_mb: int = 0,
                 models: ModelServer | None = None):
        self.host, self.cells, self.threads, self.memory_mb, self.models = host, cells, threads, memory_mb, models
        self.load_problems: list[str] = []
        self.classes: list[str] = []
        self.used = self.cost = self.held = 0.0
        self._conn = self._pid = self._cpu = self._delay = None

    def request(self, request: dict, seconds: float, hidden: bool = False) -> list[dict]:
        """Send `request` and return its events (through `done`), or raise ChildFailed once it has used `seconds`
        (`Meter`). A `hidden` request's failure names the method the grader called, not the call the child
        announced (whose words are the student's code's)."""
        self.used = self.cost = self.held = 0.0  # a child that fails to start fails before this request's meter
        if self._conn is None:
            self._start()
        if self.models is not None:
            self.models.reset()
        meter = self._meter(seconds)
        try:
            named = METHODS.get(request["kind"], "the notebook's code") if hidden else None
            self._send(request, meter, named)
            return self._events(meter, named)
        finally:
            self.used, self.cost, self.held = meter.used(), meter.cost(), meter.held

    def _start(self) -> None:
        self._conn, self._pid = self.host.fork({"cells": self.cells, "threads": self.threads,
                                                "memory_mb": self.memory_mb,
                                                "served": self.models.folders() if self.models else {}})
        self._cpu, self._delay = self.host.cpu_of(self._pid), self.host.delay_of(self._pid)
        meter = self._meter(LOAD_SECONDS)
        [loaded] = [e for e in self._events(meter, "loading the notebook's code") if e["event"] == "loaded"] or [None]
        if loaded is None:
            raise ChildFailed("loading the notebook's code", kind="ChildFailed",
                              message="the child sent no word after loading the notebook's code")
        self.load_problems = _strings(loaded.get("problems"), MAX_TEXT)
        self.classes = _strings(loaded.get("classes"), MAX_NAME)

    def _meter(self, seconds: float) -> Meter:
        """A request's meter. This thread reads the child's messages and serves its models, so a loaded machine that
        keeps it waiting for a core holds the child up: its waits count out of the backstop as the child's do."""
        child, tid = self._delay, threading.get_native_id()
        return Meter(seconds, self._cpu, self.threads, lambda: child() + (run_delay(os.getpid(), tid) or 0.0))

    def _send(self, message: dict, meter: Meter, named: str | None, call: dict | None = None) -> None:
        try:
            self._conn.send(json.dumps(message).encode(), meter)
        except Stalled as e:
            self.close()
            raise _stopped(named, call, meter, e, reading=True) from None
        except (EOFError, OSError):
            self.close()
            raise ChildFailed(_named(named, call), kind="ChildDied", message="it had stopped before the request") \
                from None

    def _events(self, meter: Meter, named: str | None = None) -> list[dict]:
        """The child's events through `done` (or `loaded`), the served models' forwards among them; a failure names
        `named`, else the last call the child announced."""
        events, call = [], None
        while True:
            try:
                event = json.loads(self._conn.recv(meter, MAX_MESSAGE))
            except Stalled as e:
                self.close()
                raise _stopped(named, call, meter, e, reading=False) from None
            except ValueError:  # not JSON, or a number past what Python reads: the child broke the protocol
                self.close()
                raise ChildFailed(_named(named, call), kind="Malformed",
                                  message="the grading child sent a message that is not JSON") from None
            except (EOFError, OSError) as e:
                died = isinstance(e, EOFError)
                code = self.host.exit_status(self._pid) if died else None
                self.close()
                raise ChildFailed(_named(named, call), kind="ProcessDied", message=_death(e, code)) from None
            if not isinstance(event, dict) or event.get("event") in (None, "forward", "embedding"):
                continue  # the child's own word on its forwards is not evidence
            if event["event"] == "model":
                events += self._serve(event, named, call, meter)
                continue
            if event["event"] == "call":
                if self.models is not None:  # the child's word, trusted only to fail sooner: a forged call defers a
                    self.models.called()     # loop that emits nothing to its time limit, never past it
                call = event
            events.append(event)
            if event["event"] in ("done", "loaded"):
                return events
            if len(events) > MAX_EVENTS:
                self.close()
                raise ChildFailed(_named(named, call), kind="Flood",
                                  message=f"the grading child sent more than {MAX_EVENTS:,} messages for one request")

    def _serve(self, request: dict, named: str | None, call: dict | None, meter: Meter) -> list[dict]:
        """Run the child's model request here, within the request's `meter` (this thread's CPU counted as the
        submission's), and answer it (a child without models gets a refusal)."""
        if self.models is None:
            self._send({"ok": False, "kind": "RuntimeError", "message": "no models are served to this process"},
                       meter, named, call)
            return []
        try:
            with meter.serving():
                return self.models.serve(request, lambda data: self._conn.send(data, meter),
                                         lambda: meter.left() <= 0)
        except Stalled as e:
            self.close()
            raise _stopped(named, call, meter, e, reading=True) from None
        except (EOFError, OSError):
            self.close()
            raise ChildFailed(_named(named, call), kind="ChildDied", message="it stopped during a model's forward") \
                from None
        except OutOfTime:
            self.close()
            raise ChildFailed(_named(named, call), kind="Timeout", message=meter.why()) from None
        except NoProgress as e:
            self.close()
            raise ChildFailed(_named(named, call), kind="NoProgress", message=str(e)) from None
        except Exception as e:  # the server's own failure (its model's complaints are answered to the child)
            self.close()
            raise GraderFailed(f"the grader's model server failed on a request ({type(e).__name__}: {e})") from e

    def close(self) -> None:
        """Kill the child's process group (its own children too) and forget it."""
        if self._pid is not None:
            self.host.kill(self._pid)
        if self._conn is not None:
            self._conn.close()
        self._conn = self._pid = None


def _stopped(named: str | None, call: dict | None, meter: Meter, stall: Stalled, reading: bool) -> ChildFailed:
    """A request whose meter ran out: spent mostly waiting on nothing, Stalled, saying what the child left undone
    (`reading`: the grader's message, which it stopped reading); else a Timeout."""
    if not meter.mostly_idle():
        return ChildFailed(_named(named, call), kind="Timeout", message=meter.why())
    if reading:
        done = "read part of the grader's message" if stall.partial else "did not read the grader's message"
    else:
        done = "sent part of a message" if stall.partial else "sent nothing"
    return ChildFailed(_named(named, call), kind="Stalled", message=f"the grading child {done}, then waited: "
                       f"{meter.why()}")


MAX_LISTED = 64  # items of a child's lists (its classes, its load problems) the grader reads


def _strings(value, length: int) -> list[str]:
    """The child's list, as many items and each as long as a page can hold (`outcomes.capped`)."""
    return [capped(str(item), length) for item in value[:MAX_LISTED]] if isinstance(value, list) else []


def _named(named: str | None, call: dict | None) -> str:
    """`named`, else the call the child announced last: its words (a visible check's inputs), cut as an exception's
    are (`outcomes.capped`), for a page to show."""
    if named is not None:
        return named
    if call is None:
        return "the notebook's code"
    method, args = capped(str(call.get("method", "a method")), MAX_NAME), call.get("args")
    return f"{method}({capped(str(args), MAX_TEXT)})" if args else method


def _death(error: BaseException, code: int | None) -> str:
    if isinstance(error, TooLong):
        return f"it sent more than {MAX_MESSAGE >> 20} MB at once"
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return {"SIGSEGV": "the process crashed (segmentation fault)",
                "SIGKILL": "the process was killed (often: out of memory)"}.get(name, f"the process died ({name})")
    return f"the process exited (status {code})" if code is not None else "the process stopped answering"


class ChildRunner:
    """A `checks` runner whose probes run in `child` on its class `class_name`: one check's runner, all of whose
    requests together may use `seconds` of CPU (the child's `Meter`); waits for another job's timing do not count.
    `on_wait` is told each such wait and each request's wait for a core (`Child.held`), and `on_used` each request's
    CPU (the notebook's budget).

    Each case the check sends gets exactly one well-formed answer, or the check fails (`outcomes.assemble`). With
    `hidden` (a `redact.HiddenInputs`), the requests are the grader's hidden cases: their inputs are kept there, for
    the failure's message to be scrubbed of them, and nothing the student's code wrote is read as text."""

    def __init__(self, child: Child, class_name: str, seconds: float = 60, on_wait=None, on_used=None, hidden=None):
        self.child, self.class_name, self.seconds, self.hidden = child, class_name, seconds, hidden
        self.on_wait, self.on_used = on_wait, on_used
        self.spent = 0.0

    def run(self, request: dict):
        with QUIET.check() as waited:
            if self.on_wait:
                self.on_wait(waited)
            if self.hidden is not None:
                self.hidden.add(request)
            try:
                events = self.child.request({**request, "class": self.class_name}, max(self.seconds - self.spent, 0),
                                            hidden=self.hidden is not None)
            finally:
                self.spent += self.child.used
                if self.on_used:
                    self.on_used(self.child.used)
                if self.on_wait:
                    self.on_wait(self.child.held)
            return assemble(events, request, redact=self.hidden is not None)
