"""The grading plan: what each auto-graded test runs (its class and checks, from the instructors'
`autograder/hidden.py`) and the course's limits (`autograder/config.toml`), loaded before any submission.

    plan = load_plan(Path("autograder"))
    plan.tests["test_exact"]        # ("SpeculativeDecoder", [checks.check_exact, hidden.check_exact])
"""

from __future__ import annotations

import importlib.util
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from .config import CourseConfig, load_config

SPEED_TEST = "test_speedup"  # the test the grader times after its checks
# The speed test times only a decoder that passed this test: its cases are the grader's and the same in every run, so
# a decoder whose tokens go wrong loses the speed test whatever prompts a run's timing draws.
EXACT_BEFORE_TIMING = "test_cached_exact"
NOT_EXACT = (f"speedup is timed only for a decoder that gives the target's greedy tokens on every case of "
             f"{EXACT_BEFORE_TIMING}: fix {EXACT_BEFORE_TIMING} first")


def not_timed(lost: Collection[str]) -> str | None:
    """Why the speed test is not timed, given the tests lost before it; None where it is timed."""
    return NOT_EXACT if EXACT_BEFORE_TIMING in lost else None


@dataclass(frozen=True)
class Plan:
    """What grading runs: per auto-graded test, the class it judges and its checks (visible, then hidden)."""

    tests: dict[str, tuple[str, list]]
    min_ratio: float
    check_seconds: float
    memory_mb: int
    verdict_seconds: float
    scratch_mb: int  # each sandbox's scratch folder and /tmp together
    scratch_files: int


def load_plan(autograder_dir: Path, config: CourseConfig | None = None) -> Plan:
    """Import the instructors' hidden checks by path (never from a kernel's import path); the limits and the speed
    bar are `config`'s (default: autograder_dir's config.toml)."""
    spec = importlib.util.spec_from_file_location("specdec_hidden_checks", autograder_dir / "hidden.py")
    hidden = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hidden)
    order = list(hidden.TESTS)
    if {EXACT_BEFORE_TIMING, SPEED_TEST} <= set(order) and order.index(SPEED_TEST) < order.index(EXACT_BEFORE_TIMING):
        raise ValueError(f"{autograder_dir / 'hidden.py'}: TESTS lists {SPEED_TEST} before {EXACT_BEFORE_TIMING}, but "
                         f"the speed test is timed only after {EXACT_BEFORE_TIMING}'s verdict (the grader runs the "
                         f"tests in TESTS' order): list {EXACT_BEFORE_TIMING} first")
    config = config or load_config(autograder_dir)
    limits = config.limits
    return Plan(hidden.TESTS, config.min_ratio, limits.check_seconds, limits.memory_mb, limits.verdict_seconds,
                limits.scratch_mb, limits.scratch_files)
