"""A submission's code in children of a host in its sandbox: probes run there, the judging stays in the grading
process.

    host = Host(Sandbox("alice-verdict", "bwrap", Limits(4096, extra_memory_mb=2048)), log=Path("alice.log"))
    child = Child(host, cells, threads=1, memory_mb=4096)
    runner = ChildRunner(child, "SpeculativeDecoder", seconds=60)
    checks.check_exact(runner)      # the probe runs in the child; the reference and verdict stay here
    child.close()
    host.close()                    # the sandbox closes: every process of it is gone

The host (`sandbox_host.py`) has imported torch, transformers and the student package and never runs a
submission's code; each child is forked from it with a channel of its own, so it starts in well under a second.
The child limits its memory (RLIMIT_DATA), runs the submission's definitions (`adapters.code_to_run(...,
definitions_only=True)`: imports, `def`, `class`, constants) and answers probe requests. Everything it sends is JSON
read by `recv_bytes` with a size limit: nothing it sends is unpickled or executed here. The check pairs' models run
here (`served.py`): a child's forward is a request this process runs and records. A request that does not finish
within its time limit, or a child that dies, costs that request: the child's process group is killed and the next
request starts a new child.

The sandbox (`sandbox.py`) is the boundary: the child's code can change anything in its own processes (the probes,
the events it sends), so what it sends is the student's claim, which the checks judge. The kit's own side of the
speed test (`KIT`) is a host with no sandbox and no submission.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

from specdec_kit import checks, settings
from specdec_kit.checks.outcomes import METHODS, assemble
from specdec_kit.probes import ProbeError

from .sandbox import Sandbox
from .served import ModelServer, NoProgress, OutOfTime

HOST_SCRIPT = Path(__file__).with_name("sandbox_host.py")
MAX_MESSAGE = 16 << 20  # bytes: a larger message from a child is refused, not read
MAX_CODE = 16 << 20  # bytes of a notebook's code the grader hands a child (grading.grade refuses more, with a row)
MAX_LOG = 16 << 20  # bytes of a host's output kept in its log
HOST_SECONDS = 180  # a host's imports (torch, transformers), on a loaded machine
FORK = b"F"  # the one byte a fork request carries beside the child's channel
LOAD_SECONDS = 120  # running a submission's definitions (imports included)


class ChildFailed(ProbeError):
    """The child did not answer: it ran past its time limit, or died. Names the student's call it was in."""


class GraderFailed(RuntimeError):
    """The grading machinery failed, not the submission: a host that does not start in a sandbox freshly
    emptied, a model server's own error. The row says so and how to grade the submission again."""


class Host:
    """The process children are forked from: in `box` (a submission's sandbox), or with none (the kit's side)."""

    def __init__(self, box: Sandbox | None, log: Path | None = None, threads: int = 1):
        self.box, self.log, self.threads = box, log, threads
        self._process = self._control = None
        self._buffer = b""  # what the host said past the last full line
        self._exits: dict[int, int] = {}
        self._lock = threading.Lock()

    def fork(self, start: dict) -> tuple[Connection, int]:
        """A new child (`start`: its cells, threads and memory limit): its channel and its pid in the host.

        The control socket carries one byte and the child's end of its channel; `start`, of any size up to the
        channel's framing, goes over that channel, whole (a stream socket read once cut large notebooks short)."""
        with self._lock:
            for attempt in range(2):  # a host the last child killed is started again, once
                if self._process is None or self._process.poll() is not None:
                    self._start()
                ours, theirs = socket.socketpair()
                try:
                    socket.send_fds(self._control, [FORK], [theirs.fileno()])
                    pid = int(self._reply(HOST_SECONDS)["pid"])
                except (OSError, ValueError, KeyError, TypeError):
                    ours.close()
                    self._stop()
                    if attempt:
                        raise GraderFailed("the grading child's host did not fork a child twice in a row") from None
                    continue
                finally:
                    theirs.close()
                channel = Connection(ours.detach())
                channel.send_bytes(json.dumps(start).encode())
                return channel, pid

    def exit_status(self, pid: int, wait: float = 2.0) -> int | None:
        """What the host says child `pid` exited with (its word: for the message only), if it says so in `wait` s."""
        deadline = time.monotonic() + wait
        with self._lock:
            while pid not in self._exits and self._control is not None and time.monotonic() < deadline:
                with contextlib.suppress(OSError, ValueError):
                    self._reply(deadline - time.monotonic())
            return self._exits.pop(pid, None)

    def kill(self, pid: int) -> None:
        """Kill child `pid` (as the host numbers it) and its process group."""
        outer = self.box.outer_pid(pid) if self.box is not None else pid
        if outer is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(outer, signal.SIGKILL)

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _start(self) -> None:
        control, theirs = socket.socketpair()
        env = {**os.environ, settings.GRADING: "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               settings.THREADS: str(self.threads)}
        argv = [sys.executable, "-I", str(HOST_SCRIPT), str(theirs.fileno())]
        options = dict(stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       pass_fds=(theirs.fileno(),))
        if self.box is not None:
            kept = {k: v for k, v in env.items() if k in ("PATH", "LANG", settings.GRADING, settings.THREADS)}
            self._process = self.box.popen(argv, env=kept, **options)  # popen adds the sandbox's own variables
        else:
            self._process = subprocess.Popen(argv, env=env, start_new_session=True, **options)
        theirs.close()
        self._control, self._buffer = control, b""
        threading.Thread(target=_keep_log, args=(self._process.stdout, self.log), daemon=True).start()
        try:
            self._reply(HOST_SECONDS, expect=b"ready")
        except (OSError, ValueError) as e:  # no student code has run in this host: the failure is the grader's
            self._stop()
            raise GraderFailed(f"the grading child's host did not start ({e}); see the verdict's log") from None

    def _reply(self, seconds: float, expect: bytes | None = None) -> dict:
        """The host's next line that is not an exit notice (those are kept for `exit_status`)."""
        deadline = time.monotonic() + seconds
        while True:
            line = self._line(deadline)
            if expect is not None:
                if line.strip() != expect:
                    raise ValueError(f"the host said {line[:80]!r}")
                return {}
            reply = json.loads(line)
            if isinstance(reply, dict) and "exited" in reply:
                self._exits[int(reply["exited"])] = int(reply["status"])
                continue
            return reply

    def _line(self, deadline: float) -> bytes:
        """The host's next line, or OSError (TimeoutError at `deadline`; a line of 64 KB or more is refused)."""
        while b"\n" not in self._buffer:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([self._control], [], [], wait)[0]:
                raise TimeoutError("the host did not answer in time")
            chunk = self._control.recv(1 << 16)
            if not chunk:
                raise OSError("the host closed its control socket")
            self._buffer += chunk
            if len(self._buffer) > 1 << 16 and b"\n" not in self._buffer:
                raise OSError("the host sent a line longer than 64 KB")
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _stop(self) -> None:
        if self._control is not None:
            self._control.close()
        if self.box is not None:
            self.box.kill_all()
        elif self._process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)
        if self._process is not None:
            self._process.wait()
        self._process = self._control = None


def _keep_log(stream, log: Path | None) -> None:
    """Copy a host's output (its children's too) to `log`, up to MAX_LOG bytes; the rest is read and dropped."""
    kept = 0
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(log, "ab")) if log else None
        while chunk := stream.read1(1 << 16):
            if out is not None and kept < MAX_LOG:
                out.write(chunk[:MAX_LOG - kept])
                out.flush()
                kept += len(chunk)


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
            self.models.reset(request)
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
            if event["event"] == "call" and named is None:
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


KIT = Host(None)  # the kit's side of the speed test: no submission, no sandbox; shared by a batch's jobs


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
