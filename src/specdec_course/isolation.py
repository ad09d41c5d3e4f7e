"""A student's code in a child process: probes run there, the judging stays in the grading process.

    child = Child(cells, threads=1, memory_mb=4096, log=Path("alice.log"))
    runner = ChildRunner(child, "SpeculativeDecoder", seconds=60)
    checks.check_exact(runner)      # the probe runs in the child; the reference and verdict stay here
    child.close()

The child is forked from a server process that has imported torch, transformers and the kit but has
never run a student's code (multiprocessing's forkserver), so it starts in well under a second. It
puts itself in its own process group, limits its memory (RLIMIT_DATA), leaves the instructors'
folders off its import path and works in an empty directory, then runs the submission's definitions
(`adapters.code_to_run(..., definitions_only=True)`: imports, `def`, `class`, constants) and answers
probe requests. Everything it sends is JSON read by `recv_bytes` with a size limit: nothing it sends
is unpickled or executed here. Forward calls are sent as they happen, so a method cannot take back a
forward the kit has seen. A request that does not finish within its time limit, or a child that dies,
costs that request: the child's process group is killed and the next request starts a new child.

What this isolation does not give: the child runs as the same user on the same machine, so a method
can read files, use the network where there is one, start processes, and, in its own process, replace
the probe code or forge the events it sends (the static scan in `scan.py` flags such code for a
person to read). It is a process boundary around the verdict, not a sandbox around the student's
code; a container per submission is that.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from specdec_kit import checks, settings
from specdec_kit.probes import ProbeError, assemble, run_probe, set_threads

from .baseline_probe import run_baseline

# The seam (nbformat and jsonschema, 1.3 s of imports) too: every child runs its run_definitions.
PRELOAD = ["torch", "transformers", "specdec_kit.probes", "specdec_kit.checks", "specdec_kit.adapters"]
MAX_MESSAGE = 16 << 20  # bytes: a larger message from the child is refused, not read
LOAD_SECONDS = 120  # running a submission's definitions (imports included)
INSTRUCTOR_FOLDERS = ("autograder", "solutions")


class ChildFailed(ProbeError):
    """The child did not answer: it ran past its time limit, or died. Names the student's call it was in."""


_context = None


def context():
    """The forkserver context, started once per grading process with the heavy imports preloaded."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


class Child:
    """One child process running a submission's definitions; restarted after a timeout or a death."""

    def __init__(self, cells: list[tuple[str, str]], threads: int = 1, memory_mb: int = 0, log: Path | None = None):
        self.cells, self.threads, self.memory_mb, self.log = cells, threads, memory_mb, log
        self.load_problems: list[str] = []
        self.classes: list[str] = []
        self._process = self._conn = self._workdir = None

    def request(self, request: dict, seconds: float, limit: str = "") -> list[dict]:
        """Send `request` and return its events (through `done`), or raise ChildFailed after `seconds`
        (`limit` says how the time limit reads in the message)."""
        if self._process is None:
            self._start()
        self._send(request)
        return self._events(time.monotonic() + seconds, limit or f"{seconds:.0f} s")

    def _start(self) -> None:
        ctx = context()
        self._conn, child_end = ctx.Pipe(duplex=True)
        log = str(self.log) if self.log else os.devnull
        self._workdir = tempfile.mkdtemp(prefix="specdec-child-")  # made and removed here: the child is killed
        self._process = ctx.Process(target=_child_main, args=(child_end, self.cells, self.threads, self.memory_mb,
                                                                log, self._workdir), daemon=True)
        self._process.start()
        child_end.close()
        [loaded] = [e for e in self._events(time.monotonic() + LOAD_SECONDS, f"{LOAD_SECONDS} s") if
                    e["event"] == "loaded"] or [None]
        if loaded is None:
            raise ChildFailed("loading the notebook's code", kind="ChildFailed",
                              message="the child sent no word after loading the notebook's code")
        self.load_problems, self.classes = loaded["problems"], loaded["classes"]

    def _send(self, message: dict) -> None:
        try:
            self._conn.send_bytes(json.dumps(message).encode())
        except OSError:
            self.close()
            raise ChildFailed("the grading child", kind="ChildDied",
                              message="it had stopped before the request") from None

    def _events(self, deadline: float, limit: str) -> list[dict]:
        events, call = [], None
        while True:
            wait = deadline - time.monotonic()
            try:
                ready = wait > 0 and self._conn.poll(wait)
                if not ready:
                    self.close()
                    raise ChildFailed(_named(call), kind="Timeout", message=f"did not return within {limit}")
                event = json.loads(self._conn.recv_bytes(MAX_MESSAGE))
            except (EOFError, OSError, ValueError) as e:
                self._process.join(2)  # reaped, so that its exit status is known
                code = self._process.exitcode
                self.close()
                raise ChildFailed(_named(call), kind="ProcessDied", message=_death(e, code)) from None
            if not isinstance(event, dict) or "event" not in event:
                continue
            if event["event"] == "call":
                call = event
            events.append(event)
            if event["event"] in ("done", "loaded"):
                return events

    def close(self) -> None:
        """Kill the child's whole process group (its own children too) and forget it."""
        if self._process is not None and self._process.pid is not None:
            try:
                os.killpg(self._process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self._process.join(5)
        if self._conn is not None:
            self._conn.close()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
        self._process = self._conn = self._workdir = None


def _named(call: dict | None) -> str:
    if call is None:
        return "the notebook's code"
    return f"{call['method']}({call['args']})" if call.get("args") else call["method"]


def _death(error: BaseException, code: int | None) -> str:
    if isinstance(error, OSError) and "too long" in str(error).lower():
        return f"it sent more than {MAX_MESSAGE >> 20} MB at once"
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        return {"SIGSEGV": "the process crashed (segmentation fault)",
                "SIGKILL": "the process was killed (often: out of memory)"}.get(name, f"the process died ({name})")
    return f"the process exited (status {code})" if code is not None else "the process stopped answering"


class Quiet:
    """One timing at a time: a timing holds the machine-wide timing lock (`checks.timing_lock`, which a notebook's
    speed check takes too) and runs while no check of this process is in flight: parallel grading jobs share the
    machine, and a speed test measured beside another job's checks measures the contention. A check waits while
    a timing runs (its time limit does not count the wait); a timing waits up to `patience` seconds for the
    checks in flight to finish."""

    def __init__(self, patience: float = 30):
        self._changed = threading.Condition()
        self._timing, self._checks, self._patience = False, 0, patience

    @contextlib.contextmanager
    def check(self):
        """Yields the seconds spent waiting for a timing to end."""
        started = time.monotonic()
        with self._changed:
            self._changed.wait_for(lambda: not self._timing)
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
            self._changed.wait_for(lambda: not self._timing)
            self._timing = True
            self._changed.wait_for(lambda: self._checks == 0, timeout=self._patience)
        try:
            yield
        finally:
            with self._changed:
                self._timing = False
                self._changed.notify_all()


QUIET = Quiet()


class ChildRunner:
    """A `checks` runner whose probes run in `child` on its class `class_name`: one check's runner, all of
    whose requests together get `seconds` from its creation, not counting waits for another job's timing."""

    def __init__(self, child: Child, class_name: str, seconds: float = 60):
        self.child, self.class_name, self.seconds = child, class_name, seconds
        self.deadline = time.monotonic() + seconds

    def run(self, request: dict):
        with QUIET.check() as waited:
            self.deadline += waited
            left = max(self.deadline - time.monotonic(), 0.0)
            return assemble(self.child.request({**request, "class": self.class_name}, left, f"{self.seconds:g} s"))


# ---------------------------------------------------------------------------------------------
# The child's side


def _child_main(conn, cells: list[tuple[str, str]], threads: int, memory_mb: int, log: str, workdir: str) -> None:
    send, dumps = conn.send_bytes, json.dumps  # bound before any student code runs

    def emit(event: dict) -> None:
        send(dumps(event, default=str).encode())

    _isolate(memory_mb, log, workdir)
    set_threads(threads)
    from specdec_kit.adapters import run_definitions

    module, problems = run_definitions(cells)
    classes = [name for name, value in vars(module).items() if isinstance(value, type)]
    emit({"event": "loaded", "problems": problems, "classes": classes})
    while True:
        try:
            request = json.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if request["kind"] == "baseline":
            run_baseline(request, emit)
            continue
        decoder_class = vars(module).get(request.get("class", ""))
        if not isinstance(decoder_class, type):
            emit({"event": "error", "method": request.get("class", ""), "kind": "NameError",
                  "message": f"the notebook defines no class {request.get('class')}"})
            emit({"event": "done"})
            continue
        run_probe(request, decoder_class, emit, capture=True)


def _isolate(memory_mb: int, log: str, workdir: str) -> None:
    """Own process group, a memory limit, output to the log, no instructor folders in reach of imports."""
    import resource

    os.setpgid(0, 0)
    if memory_mb:
        limit = memory_mb << 20
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.chdir(workdir)
    sys.path[:] = [p for p in sys.path if p and not any((Path(p) / f).exists() for f in INSTRUCTOR_FOLDERS)]
    os.environ.update({settings.GRADING: "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # tqdm's bars would take a multiprocessing lock that a killed child leaks
