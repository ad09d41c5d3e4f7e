"""The host a submission's grading children are forked from: a process in the submission's sandbox that has
imported torch, transformers and the student package once (`host_main.py`) and never runs a submission's code.

    host = Host(Sandbox("alice-verdict", "bwrap", Limits(4096, extra_memory_mb=2048)), log=Path("alice.log"))
    channel, pid = host.fork({"cells": cells, "threads": 1, "memory_mb": 4096, "served": {}})   # child.py does this
    host.close()                    # the sandbox closes: every process of it is gone

The host's control socket carries one byte and the new child's end of its channel per fork; the child's start
message goes whole over that channel (multiprocessing's framing: length-prefixed, any size; `channel.py`). The host says
only "ready", each child's pid and each child's exit status, a line each. The kit's own side of the speed test
(`KIT`) is a host with no sandbox and no submission. A host that does not start, or does not fork, in a sandbox
freshly emptied is the grader's failure (`GraderFailed`), never the submission's.
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
from pathlib import Path

from specdec_kit.checks.core import WALL_FACTOR
from specdec_kit.core import settings
from specdec_kit.core.run_delay import pids_delay

from ..core.waits import OMP_WAIT
from .box import Sandbox
from .channel import Channel
from .meter import Clock, pids_cpu, process_cpu

HOST_SCRIPT = Path(__file__).with_name("host_main.py")
MAX_LOG = 16 << 20  # bytes of a host's output kept in its log
HOST_SECONDS = 180  # a host's start (its imports: torch, transformers) in its own CPU; the clock stops it at 10 times
FORK = b"F"  # the one byte a fork request carries beside the child's channel


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
        self._forked: set[int] = set()  # children not yet said to have exited: each its own process group
        self._lock = threading.Lock()

    def fork(self, start: dict) -> tuple[Channel, int]:
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
                channel = Channel(ours)
                try:
                    channel.send(json.dumps(start).encode(), Clock(HOST_SECONDS))
                except (OSError, EOFError):
                    channel.close()
                    self._stop()
                    if attempt:
                        raise GraderFailed("the grading child's host forked a child that did not take its start "
                                           "message") from None
                    continue
                self._forked.add(pid)
                return channel, pid

    def exit_status(self, pid: int, wait: float = 2.0) -> int | None:
        """What the host says child `pid` exited with (its word: for the message only), if it says so in `wait` s."""
        deadline = time.monotonic() + wait
        with self._lock:
            while pid not in self._exits and self._control is not None and time.monotonic() < deadline:
                with contextlib.suppress(OSError, ValueError):
                    self._reply(deadline - time.monotonic())
            return self._exits.pop(pid, None)

    def cpu_of(self, pid: int):
        """What child `pid` (as the host numbers it) uses: its sandbox's CPU where a cgroup counts it, else the
        child's own (its threads and the children it waited for), as a function of no arguments."""
        if self.box is not None and self.box.cpu_seconds() is not None:
            return self.box.cpu_seconds
        outer = self._outer(pid)
        return process_cpu(outer) if outer is not None else lambda: 0.0

    def delay_of(self, pid: int):
        """The seconds child `pid`'s threads have waited for a core (`meter.pids_delay`), those of its sandbox's
        processes where a cgroup counts their CPU, as a function of no arguments."""
        if self.box is not None and self.box.cpu_seconds() is not None:
            return pids_delay(self.box.pids)
        outer = self._outer(pid)
        return pids_delay(lambda: [outer] if outer is not None else [])

    def _outer(self, pid: int) -> int | None:
        """The grader's number for child `pid`, as the host numbers it."""
        if self.box is None or self.box.isolation != "bwrap":  # the grader's own pid namespace
            return pid
        return self.box.outer_pid(pid)

    def _isolated(self) -> bool:
        """Whether the sandbox holds the host's children apart (its own uid or cgroup): else it knows only the host,
        and each child, in a process group of its own, is the host's to name and kill."""
        return self.box is not None and self.box.isolation != "none"

    def kill(self, pid: int) -> None:
        """Kill child `pid` (as the host numbers it) and its process group."""
        if self._isolated():
            outer = self.box.outer_pid(pid)
        else:  # the grader's pid namespace: a child the host has not said exited is its child still, alive or unreaped
            outer = pid if pid in self._forked else None
        if outer is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(outer, signal.SIGKILL)

    def close(self) -> None:
        with self._lock:
            self._stop()

    def environment(self) -> dict:
        """The host's environment: offline, its threads, how they wait; in a sandbox nothing else of the grader's
        (the sandbox adds its own variables)."""
        env = {**os.environ, settings.GRADING: "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               settings.THREADS: str(self.threads)}
        if self.box is None:
            return env
        return {k: v for k, v in env.items() if k in ("PATH", "LANG", settings.GRADING, settings.THREADS, OMP_WAIT)}

    def _start(self) -> None:
        control, theirs = socket.socketpair()
        argv = [sys.executable, "-I", str(HOST_SCRIPT), str(theirs.fileno())]
        options = dict(stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       pass_fds=(theirs.fileno(),))
        if self.box is not None:
            self._process = self.box.popen(argv, env=self.environment(), **options)
        else:
            self._process = subprocess.Popen(argv, env=self.environment(), start_new_session=True, **options)
        theirs.close()
        self._control, self._buffer = control, b""
        threading.Thread(target=_keep_log, args=(self._process.stdout, self.log), daemon=True).start()
        try:
            self._reply(HOST_SECONDS, expect=b"ready", cpu=self._own_cpu())
        except (OSError, ValueError) as e:  # no student code has run in this host: the failure is the grader's
            self._stop()
            raise GraderFailed(f"the grading child's host did not start ({e}); see the verdict's log") from None
        except BaseException:  # an interrupt: no host left behind
            self._stop()
            raise

    def _own_cpu(self):
        """The host's CPU while it starts, as a function of no arguments: its sandbox's (a cgroup's count, else its
        processes'), or its own."""
        if self.box is None:
            return process_cpu(self._process.pid)
        return self.box.cpu_seconds if self.box.cpu_seconds() is not None else pids_cpu(self.box.pids)

    def _reply(self, seconds: float, expect: bytes | None = None, cpu=None) -> dict:
        """The host's next line that is not an exit notice (those are kept for `exit_status`), within `seconds` on the
        clock, or, given the host's `cpu`, of that: a loaded machine, which stretches the clock, then reaches only
        WALL_FACTOR times `seconds` on it."""
        deadline = time.monotonic() + seconds * (WALL_FACTOR if cpu else 1)
        if cpu is not None:
            spent = cpu()

            def over() -> bool:
                return cpu() - spent > seconds
        else:
            def over() -> bool:
                return False
        while True:
            line = self._line(deadline, over)
            if expect is not None:
                if line.strip() != expect:
                    raise ValueError(f"the host said {line[:80]!r}")
                return {}
            reply = json.loads(line)
            if isinstance(reply, dict) and "exited" in reply:
                self._exits[int(reply["exited"])] = int(reply["status"])
                self._forked.discard(int(reply["exited"]))
                continue
            return reply

    def _line(self, deadline: float, over=lambda: False) -> bytes:
        """The host's next line, or OSError (TimeoutError at `deadline` or once `over()`; a line of 64 KB or more is
        refused)."""
        while b"\n" not in self._buffer:
            wait = deadline - time.monotonic()
            if wait <= 0 or over():
                raise TimeoutError("the host did not answer in time")
            if not select.select([self._control], [], [], min(wait, 1.0))[0]:
                continue
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
        if not self._isolated():  # its children left its process group: each is killed with its own
            for group in self._forked:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)
        if self.box is not None:
            self.box.kill_all()
        elif self._process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)
        self._forked.clear()
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


KIT = Host(None)  # the kit's side of the speed test: no submission, no sandbox; shared by a batch's jobs
