"""The kit's verdict on a submission, reached outside the student's kernel: the auto-graded scores.

    verdict = judge(notebook, load_plan(Path("autograder")), log=Path("alice.log"))
    verdict.tests["test_exact"].passed, verdict.tests["test_exact"].message

The grading process holds the checks, the hidden checks (`autograder/hidden.py`, its `TESTS` table: each
auto-graded test's class and checks) and the reference answers; it never runs a submission's code. It
lists the cells a child process will take definitions from (`adapters.cells_to_consider`), and every
check runs its probes in that child (`sandbox/child.py`), forked in the notebook's sandbox (`sandbox/box.py`), with
a time limit of its own: a hang or a crash costs the checks it hits, not the notebook. The check pairs' models run
in this process for the child (`sandbox/models.py`), which records every forward. The speed test gates on those
forwards and the child's tokens, then is timed by this process (`speed.py`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from specdec_kit import checks
from specdec_kit.checks.speed import SPEED_TEST, not_timed
from specdec_kit.protocol.adapters import cells_to_consider, not_run
from specdec_kit.protocol.probes import ProbeError

from ..core.plan import Plan
from ..sandbox.box import Limits, Sandbox
from ..sandbox.child import Child, ChildFailed, ChildRunner
from ..sandbox.host import Host
from ..sandbox.models import CHECK_PAIRS, ModelServer
from .budget import Budget, out_of_time
from .redact import HiddenInputs
from .speed import time_speedup

HOST_MB = 2048  # the verdict's host (torch and transformers imported), besides a child's own memory


def sandbox_limits(plan: Plan, extra_memory_mb: int = HOST_MB) -> Limits:
    """The limits of a sandbox that runs a submission's code under `plan`: a process's memory, and
    `extra_memory_mb` more for all of its processes together (the verdict's host, or a kernel's own)."""
    return Limits(plan.memory_mb, extra_memory_mb=extra_memory_mb, scratch_mb=plan.scratch_mb,
                  scratch_files=plan.scratch_files)


@dataclass
class TestResult:
    passed: bool
    message: str = ""
    seconds: float = 0.0
    waited: float = 0.0  # of those seconds, waiting for a core of a loaded machine or for another job's timing
    visible_passed: bool | None = None  # the test cell's visible check alone (None: not reached)
    aborted: bool = False  # a check could not run to its end: a time limit, a crash, memory or recursion


@dataclass
class Verdict:
    tests: dict[str, TestResult] = field(default_factory=dict)
    load_problems: list[str] = field(default_factory=list)  # definitions that raised while loading
    not_run: list[str] = field(default_factory=list)  # top-level statements grading does not run
    speed: dict | None = None  # the speed test's measurement, when it got that far
    out_of_time: str = ""  # the test in which the checks ran past the notebook's budget (plan.verdict_seconds)


def judge(notebook: nbformat.NotebookNode, plan: Plan, threads: int = 1, timing_threads: int | None = None,
          log: Path | None = None, before_timing=None, isolation: str = "none") -> Verdict:
    """Run every test of `plan` on the notebook's definitions, each check in a child, judged here.

    The children are forked from a host in a sandbox of the notebook's own (`isolation`, one of
    `sandbox.ISOLATIONS`), closed, with every process of it, when the verdict is reached. Every test's visible
    check runs first; then, once nothing the student's code writes can reach a page any more, the hidden checks
    and the speed test's timing: what that code learns there (the hidden inputs, the timed prompts) could only
    come back in a message, and their messages hold only the checks' own words, scrubbed of those inputs
    (`redact.py`). `before_timing` is called before the speed test is timed (grading waits there for the
    notebook's own run to finish, so that the timing shares the machine with as little as possible).
    """
    cells = [(label, source) for _, label, source, _ in cells_to_consider(notebook)]
    verdict = Verdict(not_run=not_run(notebook))
    box = Sandbox(log.stem if log else "verdict", isolation, sandbox_limits(plan), weights=False)
    host = Host(box, log, threads)
    child = Child(host, cells, threads, plan.memory_mb, ModelServer(CHECK_PAIRS))
    budget, hidden = Budget(plan.verdict_seconds), HiddenInputs()
    verdict.tests = {test: TestResult(False) for test in plan.tests}

    def run(test: str, checks_to_run: list, phase_hidden: bool, timed: bool = False) -> None:
        class_name, result = plan.tests[test][0], verdict.tests[test]
        started, waited = time.perf_counter(), budget.waited
        try:
            for check in checks_to_run:
                if budget.left() <= 0:
                    raise ChildFailed(test, kind="Budget", message=out_of_time(plan, test))
                # each check has its own limit, within what is left of the notebook's budget
                check(ChildRunner(child, class_name, min(plan.check_seconds, budget.left()), budget.add_wait,
                                  budget.charge, hidden if phase_hidden else None))
            if timed:
                verdict.speed = time_speedup(host, cells, plan, timing_threads or threads, before_timing, budget,
                                             hidden)
                checks.judge_speedup(verdict.speed, plan.min_ratio)
                result.message = checks.describe_speed(verdict.speed)
            result.passed = True
        except (checks.CheckFailed, ProbeError) as e:
            if isinstance(e, ChildFailed) and (e.kind == "Budget" or budget.left() <= 0):
                verdict.out_of_time = test
                e = ChildFailed(test, kind="Budget", message=out_of_time(plan, test))
            message = failure_message(e)
            result.message = f"failed a hidden case: {hidden.scrub(message)}" if phase_hidden else message
            result.passed, result.aborted = False, _aborted(e)
        finally:
            result.seconds += time.perf_counter() - started
            result.waited += budget.waited - waited

    try:
        for test, (_, test_checks) in plan.tests.items():  # the visible checks: the test cells' own
            if not verdict.out_of_time:
                run(test, test_checks[:1], phase_hidden=False)
                verdict.tests[test].visible_passed = verdict.tests[test].passed or (
                    None if verdict.tests[test].aborted else False)
        verdict.load_problems = child.load_problems  # read before any hidden input reached the submission
        for test, (_, test_checks) in plan.tests.items():  # then the hidden checks and the timing
            result = verdict.tests[test]
            if verdict.out_of_time and result.visible_passed is not False and not result.message:
                result.passed, result.aborted = False, True
                result.message = f"not judged: {out_of_time(plan, verdict.out_of_time)}"
            elif result.passed and test == SPEED_TEST and (
                    why := not_timed({name for name, other in verdict.tests.items() if not other.passed})):
                result.passed, result.message = False, why  # judged, not timed: the same in every run
            elif result.passed and (test_checks[1:] or test == SPEED_TEST):
                result.passed = False
                run(test, test_checks[1:], phase_hidden=True, timed=test == SPEED_TEST)
    finally:
        child.close()
        host.close()
        box.close()
    return verdict


def _aborted(error: Exception) -> bool:
    """The check was cut short by the machine's limits rather than judged (the row names these)."""
    return (isinstance(error, ChildFailed) and error.kind != "NoProgress") or (isinstance(error, ProbeError)
                                              and error.kind in ("MemoryError", "RecursionError"))


def failure_message(error: Exception) -> str:
    """A check's verdict in the student's terms (a student's exception, a hang or a crash named as such)."""
    if isinstance(error, ChildFailed) and error.kind == "Budget":
        return error.message
    if isinstance(error, ChildFailed) and error.kind == "Timeout":
        return (f"{error.method} {error.message}: a loop that never ends (for example a round that emits no "
                "token, so the decode makes no progress)")
    if isinstance(error, ChildFailed) and error.kind == "Stalled":
        return f"{error.method} stopped answering: {error.message}"
    if isinstance(error, ChildFailed) and error.kind == "NoProgress":
        return f"{error.method} made no progress: {error.message}"
    if isinstance(error, ChildFailed):
        return f"{error.method} stopped the grading process: {error.message}"
    if isinstance(error, ProbeError):
        hint = " (not written yet)" if error.kind == "NotImplementedError" else ""
        text = f"{error.method} raised {error.kind}{hint}" + (f": {error.message}" if error.message else "")
        return text + (f"\n{error.student_traceback}" if error.student_traceback else "")
    return str(error)
