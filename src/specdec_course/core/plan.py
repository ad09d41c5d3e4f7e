"""The grading plan: what each auto-graded test runs (its class and checks, from the instructors'
`autograder/hidden.py`) and the course's limits (`autograder/config.toml`), loaded before any submission.

    plan = load_plan(Path("autograder"))
    plan.tests["test_exact"]        # ("SpeculativeDecoder", [checks.check_exact, hidden.check_exact])
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from specdec_kit.checks.speed import EXACT_BEFORE_TIMING, SPEED_TEST

from .config import CourseConfig, load_config


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
