"""Checks of a student's decoder classes, called by the assignment's test cells (and the kit's tests).

    from specdec_kit import checks
    checks.check_draft_tokens(SpeculativeDecoder)      # raises CheckFailed with what to fix

Every check runs probes (`protocol/probes.py`): the student's class is built from offline zoo directories (so its own
`initialize_*` methods load the models), run on the CPU in fp32, and judged by what it returns and by the
forward calls seen on its models, never by numbers it reports about itself: the single steps (`steps.py`), the
decoding loop (`decoding.py`), the cached decoder (`caching.py`). What correct decoding does on the checks' own
cases is read as data (`answers.py`); the grader passes its oracle. A check
takes the class itself (the probes run in this process) or a runner with the same `run(request)` method; grading
passes one that runs the probes in another process, so that the judging happens where the student's methods
cannot reach it. `check_sampling` (`sampling.py`) judges a sampler's output distribution by chi-square tests,
`check_lookup` (`lookup.py`) prompt lookup's drafts and rounds, `check_adaptive` (`adaptive.py`) adaptive k's
drafts per round; `check_speedup` (`speed.py`) also times the cached decoder against HF assisted generation with
the kit's benchmark. A notebook's test cell runs its visible check through `run_test` (`cells.py`): a line when it
passes; when it fails, the decode's rounds drawn over correct decoding's where the check found them different.
"""

from .adaptive import check_adaptive
from .caching import check_cache_use, check_same_call_twice, judge_cache_use, stale_cache_position, unfed_position
from .cells import run_test
from .core import LocalRunner, as_runner, decoded, require_seen_forwards
from .decoding import PROMPTS, check_counts, check_eos_and_budget, check_exact, eos_and_budget_cases, first_after
from .failure import CheckFailed, require
from .lookup import check_lookup
from .sampling import SamplingCase, check_sampling
from .speed import (
    NEAR_TIE,
    SPEEDUP_K,
    SPEEDUP_MIN_RATIO,
    SPEEDUP_PROMPTS,
    SPEEDUP_REPEATS,
    SPEEDUP_TOKENS,
    TIMING_WAIT,
    check_speedup,
    describe_speed,
    gate_rounds,
    judge_speedup,
    measure_speedup,
    near_tie_accepted,
    speed_summary,
    speedup_repeats,
    timing_lock,
    timing_plan,
)
from .steps import K_VALUES, check_correction_and_bonus, check_draft_tokens, check_loading, check_verify_alignment

__all__ = [
    "K_VALUES", "NEAR_TIE", "PROMPTS", "SPEEDUP_K", "SPEEDUP_MIN_RATIO", "SPEEDUP_PROMPTS", "SPEEDUP_REPEATS",
    "SPEEDUP_TOKENS", "TIMING_WAIT", "CheckFailed", "LocalRunner", "SamplingCase", "as_runner", "check_adaptive",
    "check_cache_use",
    "check_correction_and_bonus", "check_counts", "check_draft_tokens", "check_eos_and_budget", "check_exact",
    "check_loading", "check_lookup", "check_same_call_twice", "check_speedup", "check_sampling",
    "check_verify_alignment", "decoded",
    "describe_speed", "eos_and_budget_cases", "first_after", "gate_rounds",
    "judge_cache_use", "judge_speedup", "measure_speedup", "near_tie_accepted", "require", "require_seen_forwards",
    "run_test", "speed_summary",
    "speedup_repeats", "stale_cache_position", "timing_lock", "timing_plan", "unfed_position",
]
