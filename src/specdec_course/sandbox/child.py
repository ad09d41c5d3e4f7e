"""A submission's code in a grading child, forked from a host in its sandbox (`host.py`): probes run there, the
judging stays in the grading process.

    child = Child(host, cells, threads=1, memory_mb=4096, models=ModelServer(CHECK_PAIRS))
    runner = ChildRunner(child, "SpeculativeDecoder", seconds=60)
    checks.check_exact(runner)      # the probe runs in the child; the reference and verdict stay here
    child.close()

The child limits its memory (RLIMIT_DATA), runs the submission's definitions (`adapters.code_to_run(...,
definitions_only=True)`: imports, `def`, `class`, constants) and answers probe requests. Everything it sends is JSON
read by `recv_bytes` with a size limit: nothing it sends is unpickled or executed here. The check pairs' models run
here (`models.py`): a child's forward is a request this process runs and records. A request that does not finish
within its time limit, or a child that dies, costs that request: the child's process group is killed and the next
request starts a new child.

The sandbox (`box.py`) is the boundary: the child's code can change anything in its own processes (the probes,
the events it sends), so what it sends is the student's claim, which the checks judge.
"""

from __future__ import annotations

import json
import signal
import time

from specdec_kit.checks.outcomes import METHODS, assemble
from specdec_kit.probes import ProbeError

from .host import GraderFailed, Host
from .models import ModelServer, NoProgress, OutOfTime
from .timing_gate import QUIET

MAX_MESSAGE = 16 << 20  # bytes: a larger message from a child is refused, not read
MAX_CODE = 16 << 20  # bytes of a notebook's code the grader hands a child (grading.batch refuses more, with a row)
LOAD_SECONDS = 120  # running a submission's definitions (imports included)


class ChildFailed(ProbeError):
    """The child did not answer: it ran past its time limit, or died. Names the student's call it was in."""


class Child:
    """One child of `host` running a submission's definitions; restarted after a timeout or a death. With `models`,
    the child's decoders get stand-ins for those pairs' models, which run here: the forward events of its requests
    are the server's record of what it ran; forward events the child sends are never read."""

    def __init__(self, host: Host, cells: list[tuple[str, str]], threads: int = 1, memory_mb: int = 0,
                 models: ModelServer | None = None):
        self.host, self.cells, self.threads, self.memory_mb, self.models = host, cells, threads, memory_mb, models
        self.load_problems: list[str] = []
        self.classes: list[str] = []
        self._conn = self._pid = None

    def request(self, request: dict, seconds: float, limit: str = "", hidden: bool = False) -> list[dict]:
        """Send `request` and return its events (through `done`), or raise ChildFailed after `seconds`
        (`limit` says how the time limit reads in the message). A `hidden` request's failure names the method the
        grader called, not the call the child announced (whose words are the student's code's)."""
        if self._conn is None:
            self._start()
        if self.models is not None:
            self.models.reset()
        self._send(request)
        named = METHODS.get(request["kind"], "the notebook's code") if hidden else None
        return self._events(time.monotonic() + seconds, limit or f"{seconds:.0f} s", named)

    def _start(self) -> None:
        self._conn, self._pid = self.host.fork({"cells": self.cells, "threads": self.threads,
                                                "memory_mb": self.memory_mb,
                                                "served": self.models.folders() if self.models else {}})
        [loaded] = [e for e in self._events(time.monotonic() + LOAD_SECONDS, f"{LOAD_SECONDS} s") if
                    e["event"] == "loaded"] or [None]
        if loaded is None:
            raise ChildFailed("loading the notebook's code", kind="ChildFailed",
                              message="the child sent no word after loading the notebook's code")
        self.load_problems, self.classes = _strings(loaded.get("problems")), _strings(loaded.get("classes"))

    def _send(self, message: dict) -> None:
        try:
            self._conn.send_bytes(json.dumps(message).encode())
        except OSError:
            self.close()
            raise ChildFailed("the grading child", kind="ChildDied",
                              message="it had stopped before the request") from None

    def _events(self, deadline: float, limit: str, named: str | None = None) -> list[dict]:
        """The child's events through `done` (or `loaded`), the served models' forwards among them; a failure names
        `named`, else the last call the child announced."""
        events, call = [], {"method": named} if named is not None else None
        while True:
            wait = deadline - time.monotonic()
            try:
                ready = wait > 0 and self._conn.poll(wait)
                if not ready:
                    self.close()
                    raise ChildFailed(_named(call), kind="Timeout", message=f"did not return within {limit}")
                event = json.loads(self._conn.recv_bytes(MAX_MESSAGE))
            except (EOFError, OSError, ValueError) as e:
                died = isinstance(e, (EOFError, ConnectionResetError))
                code = self.host.exit_status(self._pid) if died else None
                self.close()
                raise ChildFailed(_named(call), kind="ProcessDied", message=_death(e, code)) from None
            if not isinstance(event, dict) or event.get("event") in (None, "forward", "embedding"):
                continue  # the child's own word on its forwards is not evidence
            if event["event"] == "model":
                events += self._serve(event, call, deadline, limit)
                continue
            if event["event"] == "call":
                if self.models is not None:  # the child's word, trusted only to fail sooner: a forged call defers a
                    self.models.called()     # loop that emits nothing to its time limit, never past it
                if named is None:
                    call = event
            events.append(event)
            if event["event"] in ("done", "loaded"):
                return events

    def _serve(self, request: dict, call: dict | None, deadline: float, limit: str) -> list[dict]:
        """Run the child's model request here, within the request's `deadline`, and answer it (a child without
        models gets a refusal)."""
        if self.models is None:
            self._send({"ok": False, "kind": "RuntimeError", "message": "no models are served to this process"})
            return []
        try:
            return self.models.serve(request, self._conn.send_bytes, deadline)
        except OSError:
            self.close()
            raise ChildFailed(_named(call), kind="ChildDied", message="it stopped during a model's forward") from None
        except OutOfTime:
            self.close()
            raise ChildFailed(_named(call), kind="Timeout", message=f"did not return within {limit}") from None
        except NoProgress as e:
            self.close()
            raise ChildFailed(_named(call), kind="NoProgress", message=str(e)) from None
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


def _strings(value) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


def _named(call: dict | None) -> str:
    if call is None:
        return "the notebook's code"
    method, args = str(call.get("method", "a method")), call.get("args")
    return f"{method}({args})" if args else method


def _death(error: BaseException, code: int | None) -> str:
    if isinstance(error, OSError) and "too long" in str(error).lower():
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
    """A `checks` runner whose probes run in `child` on its class `class_name`: one check's runner, all of
    whose requests together get `seconds` from its creation, not counting waits for another job's timing.

    Each case the check sends gets exactly one well-formed answer, or the check fails (`outcomes.assemble`). With
    `hidden` (a `redact.HiddenInputs`), the requests are the grader's hidden cases: their inputs are kept there, for
    the failure's message to be scrubbed of them, and nothing the student's code wrote is read as text."""

    def __init__(self, child: Child, class_name: str, seconds: float = 60, on_wait=None, hidden=None):
        self.child, self.class_name, self.seconds, self.on_wait = child, class_name, seconds, on_wait
        self.deadline = time.monotonic() + seconds
        self.hidden = hidden

    def run(self, request: dict):
        with QUIET.check() as waited:
            self.deadline += waited
            if self.on_wait:
                self.on_wait(waited)
            left = max(self.deadline - time.monotonic(), 0.0)
            if self.hidden is not None:
                self.hidden.add(request)
            events = self.child.request({**request, "class": self.class_name}, left, f"{self.seconds:g} s",
                                        hidden=self.hidden is not None)
            return assemble(events, request, redact=self.hidden is not None)
