"""The kit's verdict on a submission, reached outside the student's kernel: the auto-graded scores.

    plan = load_plan(Path("autograder"))            # hidden checks and settings, loaded before any submission
    verdict = judge(notebook, plan, log=Path("alice.log"))
    verdict.tests["test_exact"].passed, verdict.tests["test_exact"].message

The grading process holds the checks, the hidden checks (`autograder/hidden.py`, its `TESTS` table: each
auto-graded test's class and checks) and the reference answers; it never runs a submission's code. It
lists the cells a child process will take definitions from (`adapters.cells_to_consider`), and every
check runs its probes in that child (`isolation.py`), forked in the notebook's sandbox (`sandbox.py`), with a
time limit of its own: a hang or a crash costs the checks it hits, not the notebook. The check pairs' models run in
this process for the child (`served.py`), which records every forward. The speed test gates on those forwards and
the child's tokens, then times the student's cached decoder (one fresh child) against HF assisted
generation and target greedy (another fresh child, the kit's code only, outside the sandbox, which is frozen
meanwhile) with this process's clock, one timing at a time on the machine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from specdec_kit import bench, checks
from specdec_kit.adapters import cells_to_consider, not_run
from specdec_kit.checks.outcomes import assemble
from specdec_kit.probes import ProbeError

from .isolation import KIT, QUIET, Child, ChildFailed, ChildRunner, Host
from .redact import HiddenInputs
from .sandbox import Limits, Sandbox
from .served import CHECK_PAIRS, ModelServer

SPEED_TEST = "test_speedup"


@dataclass(frozen=True)
class Plan:
    """What grading runs: per auto-graded test, the class it judges and its checks (visible, then hidden)."""

    tests: dict[str, tuple[str, list]]
    min_ratio: float
    check_seconds: float
    memory_mb: int
    verdict_seconds: float = 900
    scratch_mb: int = Limits.scratch_mb  # each sandbox's scratch folder and /tmp together
    scratch_files: int = Limits.scratch_files

    def limits(self) -> Limits:
        """A verdict's sandbox: the host (torch and transformers imported) besides a child's own limit."""
        return Limits(self.memory_mb, extra_memory_mb=HOST_MB, scratch_mb=self.scratch_mb,
                      scratch_files=self.scratch_files)


HOST_MB = 2048


def load_plan(autograder_dir: Path) -> Plan:
    """Import the instructors' hidden checks by path (never from a kernel's import path)."""
    spec = importlib.util.spec_from_file_location("specdec_hidden_checks", autograder_dir / "hidden.py")
    hidden = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hidden)
    limits = hidden.CONFIG["limits"]
    return Plan(hidden.TESTS, hidden.SPEEDUP_MIN_RATIO, float(limits["check_seconds"]), int(limits["memory_mb"]),
                float(limits.get("verdict_seconds", Plan.verdict_seconds)),
                int(limits.get("scratch_mb", Plan.scratch_mb)), int(limits.get("scratch_files", Plan.scratch_files)))


class Budget:
    """The seconds all checks of one notebook may take together; waits for another job's timing, or for the
    notebook's own run to end, do not count."""

    def __init__(self, seconds: float):
        self.seconds, self.started, self.waited = seconds, time.monotonic(), 0.0

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.started - self.waited)

    def add_wait(self, seconds: float) -> None:
        self.waited += seconds

    @contextlib.contextmanager
    def pause(self):
        started = time.monotonic()
        try:
            yield
        finally:
            self.add_wait(time.monotonic() - started)


@dataclass
class TestResult:
    passed: bool
    message: str = ""
    seconds: float = 0.0
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
    box = Sandbox(log.stem if log else "verdict", isolation, plan.limits(), weights=False)
    host = Host(box, log, threads)
    child = Child(host, cells, threads, plan.memory_mb, ModelServer(CHECK_PAIRS))
    budget, hidden = Budget(plan.verdict_seconds), HiddenInputs()
    verdict.tests = {test: TestResult(False) for test in plan.tests}

    def run(test: str, checks_to_run: list, phase_hidden: bool, timed: bool = False) -> None:
        class_name, result = plan.tests[test][0], verdict.tests[test]
        started = time.perf_counter()
        try:
            for check in checks_to_run:
                if budget.left() <= 0:
                    raise ChildFailed(test, kind="Budget", message=_out_of_time(plan, test))
                # each check has its own limit, within what is left of the notebook's budget
                check(ChildRunner(child, class_name, min(plan.check_seconds, budget.left()), budget.add_wait,
                                  hidden if phase_hidden else None))
            if timed:
                verdict.speed = time_speedup(host, cells, plan, timing_threads or threads, before_timing, budget,
                                             hidden)
                checks.judge_speedup(verdict.speed, plan.min_ratio)
                result.message = checks.describe_speed(verdict.speed)
            result.passed = True
        except (checks.CheckFailed, ProbeError) as e:
            if isinstance(e, ChildFailed) and (e.kind == "Budget" or budget.left() <= 0):
                verdict.out_of_time = test
                e = ChildFailed(test, kind="Budget", message=_out_of_time(plan, test))
            message = failure_message(e)
            result.message = f"failed a hidden case: {hidden.scrub(message)}" if phase_hidden else message
            result.passed, result.aborted = False, _aborted(e)
        finally:
            result.seconds += time.perf_counter() - started

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
                result.message = f"not judged: {_out_of_time(plan, verdict.out_of_time)}"
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


def _out_of_time(plan: Plan, test: str) -> str:
    return (f"the kit's checks of this notebook ran past their budget of {plan.verdict_seconds:g} s in {test} (a loop "
            "that never ends, or code that waits), so the tests from there on were not judged")


def failure_message(error: Exception) -> str:
    """A check's verdict in the student's terms (a student's exception, a hang or a crash named as such)."""
    if isinstance(error, ChildFailed) and error.kind == "Budget":
        return error.message
    if isinstance(error, ChildFailed) and error.kind == "Timeout":
        return (f"{error.method} {error.message}: a loop that never ends (for example a round that emits no "
                "token, so the decode makes no progress)")
    if isinstance(error, ChildFailed) and error.kind == "NoProgress":
        return f"{error.method} made no progress: {error.message}"
    if isinstance(error, ChildFailed):
        return f"{error.method} stopped the grading process: {error.message}"
    if isinstance(error, ProbeError):
        hint = " (not written yet)" if error.kind == "NotImplementedError" else ""
        text = f"{error.method} raised {error.kind}{hint}" + (f": {error.message}" if error.message else "")
        return text + (f"\n{error.student_traceback}" if error.student_traceback else "")
    return str(error)


# ---------------------------------------------------------------------------------------------
# The speed test, timed here


def time_speedup(host: Host, cells: list[tuple[str, str]], plan: Plan, threads: int, before_timing=None,
                 budget: Budget | None = None, hidden: HiddenInputs | None = None) -> dict:
    """Time the student's CachedSpeculativeDecoder against the kit's HF assisted generation and target greedy.

    Each side runs in its own fresh child: the student's forked from `host`, in the notebook's sandbox, the kit's
    from `KIT`, outside it, while every process of the sandbox is frozen; the clock is this process's. The
    warm-up runs the student's decoder on the course's timing prompts, untimed; the timed runs, interleaved with
    the order rotated, each decode a prompt nobody has seen (`_unseen`: drawn from the operating system's
    randomness for this run), so no answer kept from an earlier run or computed ahead helps, and each must give the
    tokens of target greedy's run on that prompt (an fp16 near-tie aside). The student's runs are read as hidden
    cases (their prompts kept in `hidden`, for the messages to be scrubbed of). `before_timing` is called after the
    warm-up.
    """
    timing = checks.timing_plan()
    device = str(timing["device"])
    student, kit = Child(host, cells, threads, plan.memory_mb), Child(KIT, [], threads, 0)
    base = {"pair": timing["pair"], "device": device}
    requests = {"cached": (student, {"kind": "decode", "class": "CachedSpeculativeDecoder", "keep": True}),
                "hf_assisted": (kit, {"kind": "baseline", "method": "hf_assisted"}),
                "target_greedy": (kit, {"kind": "baseline", "method": "target_greedy"})}

    budget, hidden = budget or Budget(float("inf")), hidden or HiddenInputs()

    def timed(method: str, prompt, max_new_tokens: int):
        child, request = requests[method]
        if child is student and budget.left() <= 0:
            raise ChildFailed(SPEED_TEST, kind="Budget", message=_out_of_time(plan, SPEED_TEST))
        seconds = plan.check_seconds if child is kit else min(plan.check_seconds, budget.left())
        request = {**base, **request, "cases": [[prompt.text, max_new_tokens, timing["k"]]]}
        with host.box.frozen() if child is kit else contextlib.nullcontext(), \
                budget.pause() if child is kit else contextlib.nullcontext():
            started = time.perf_counter()
            events = child.request(request, seconds, hidden=child is student)
            seconds = time.perf_counter() - started
        [case] = assemble(events, request, redact=child is student)
        return case, seconds

    try:
        for method in ("hf_assisted", "target_greedy"):  # warm-up: loading, allocation, kernel selection
            timed(method, timing["prompts"][0], 8)
        for prompt in timing["prompts"]:
            timed("cached", prompt, timing["max_new_tokens"])
        if before_timing:
            with budget.pause():
                before_timing()
        with contextlib.ExitStack() as turn:
            with budget.pause():  # the wait for the machine's one timing at a time
                turn.enter_context(QUIET.timing())
            speed = {}
            for repeat, prompt, order in bench.interleaved(list(requests), timing["prompts"], timing["repeats"]):
                unseen = _unseen(prompt)
                hidden.add_text(unseen.text)
                runs = {m: timed(m, unseen, timing["max_new_tokens"]) for m in order}
                _same_as_greedy(runs["cached"][0], runs["target_greedy"][0].result["token_ids"], unseen, base, kit,
                                plan)
                for method, (outcome, seconds) in runs.items():
                    speed[(method, prompt.id, repeat)] = len(outcome.result["token_ids"]) / seconds
    finally:
        student.close()
        kit.close()
    return checks.speed_summary(speed, timing, "float16" if device.startswith("cuda") else "float32")


def _unseen(prompt):
    """`prompt` with a number after its text drawn from the operating system's randomness: a prompt nobody has
    decoded before (each timed run draws its own), so that neither the repository, the release, nor a page of an
    earlier grading run tells it."""
    return dataclasses.replace(prompt, text=f"{prompt.text} {secrets.randbelow(10 ** 6):06d}")


def _same_as_greedy(case, greedy: list[int], prompt, base: dict, kit: Child, plan: Plan) -> None:
    """A timed run decoded `prompt`: its tokens equal target greedy's up to an fp16 near-tie (margin asked of the
    kit's child)."""
    import torch

    from specdec_kit.baseline import Mismatch

    got = checks.decoded(case, f"prompt {prompt.id!r}").token_ids
    if got != greedy:
        request = {**base, "kind": "baseline", "method": "margin", "cases": [[prompt.text, greedy, got]]}
        [where] = assemble(kit.request(request, plan.check_seconds), request)
        dtype = torch.float16 if base["device"].startswith("cuda") else torch.float32
        checks.near_tie_accepted(prompt.id, Mismatch(where.result["position"], where.result["margin"]), dtype)
