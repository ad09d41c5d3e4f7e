"""The hidden halves of the assignment's test cells, and the grading plan that pairs them with the visible ones.

Other prompts, other starting tokens, other k and a second zoo pair (`tiny-b`) than the visible cells
use, so that code fitted to the visible cases does not pass. `specdec-course autograde` loads this file by
path in the grading process (`specdec_course.core.plan.load_plan`, which takes the limits and the speed bar from
config.toml); no student's kernel has it on its import path.
Every check takes the runner the grader gives it (the probes run in a child process, the judging here), and the
hidden cases' answers come from the course's oracle, computed here (the visible ones read the kit's recorded data).
"""

import random
from pathlib import Path

from specdec_course.core.config import load_config
from specdec_course.core.oracle import ORACLE
from specdec_kit import checks, zoo
from specdec_kit.checks.adaptive import check_adaptive_rounds
from specdec_kit.core.timing import ForwardCosts

SPEEDUP_MIN_RATIO = load_config(Path(__file__).parent).min_ratio  # the solution's hidden speed cell reads it

PROMPTS = ("Customer: Do you have this jacket in a larger size?\nClerk:",
           "one, two, three, four, five, six, seven, eight,",
           "Summarize in one sentence: a draft model proposes and a target model checks.")


def _starts(first: int, count: int) -> tuple[int, ...]:
    cycle = zoo.scripted_script().cycle
    return tuple(cycle[first:first + count])


def check_loading(decoder):
    checks.check_loading(decoder, pair="tiny-b")


def check_draft_tokens(decoder):
    checks.check_draft_tokens(decoder, starts=_starts(40, 6), k_values=(3, 5, 9), answers=ORACLE)


def check_verify_alignment(decoder):
    checks.check_verify_alignment(decoder, starts=_starts(50, 8), k_values=(1, 3, 5, 8), answers=ORACLE)


def check_correction_and_bonus(decoder):
    checks.check_correction_and_bonus(decoder, rejected=3, accepted_from=1)


def check_eos_and_budget(decoder):
    checks.check_eos_and_budget(decoder, checks.eos_and_budget_cases(chain_start=1, cycle_start=80), answers=ORACLE)


def check_exact(decoder):
    checks.check_exact(decoder, pair="tiny-b", prompts=PROMPTS, k_values=(3, 5, 6), max_tokens=36)


def check_counts(decoder):
    checks.check_counts(decoder, starts=_starts(60, 5), k=3, answers=ORACLE)


def check_cache_use(decoder):
    checks.check_cache_use(decoder, starts=_starts(70, 4), k=3, answers=ORACLE)
    checks.check_same_call_twice(decoder, starts=_starts(74, 3), k=3, answers=ORACLE)


def _lookup_sequences(count: int, seed: int) -> tuple[tuple[list[int], int], ...]:
    """Seeded sequences over a few tokens, so that their n-grams repeat, each with a k."""
    rng = random.Random(seed)
    return tuple(([rng.randrange(3, 9) for _ in range(rng.randrange(6, 15))], (1, 3, 5)[i % 3]) for i in range(count))


# Every n from 3 down to 1 is tried: the last 2 tokens occur earlier, the last 3 do not, and the latest earlier last
# token is followed by other tokens; and a 2-token text whose last token occurs before it.
LOOKUP_EDGES = (([1, 2, 5, 2, 3, 1, 2], 3), ([4, 4], 2))


def check_lookup(decoder):
    checks.check_lookup(decoder, draft_cases=_lookup_sequences(8, seed=5) + LOOKUP_EDGES, tiny_pair="tiny-b",
                        tiny_prompts=PROMPTS[:2], scripted_cases=((80, 10, 5, 22), (110, 5, 2, 14)), answers=ORACLE)


def check_adaptive(decoder):
    # Prices as on a GPU, where a target forward costs the same for any length up to 17 tokens.
    costs = ForwardCosts(draft=0.05, verify=(1.0,) * 17)
    checks.check_adaptive(decoder, cases=((90, 2, 36), (120, 5, 30)), costs=costs, tiny_pair="tiny-b",
                          tiny_prompts=PROMPTS[1:], answers=ORACLE)
    # A cap of 3 that cheap drafts reach: next_k must weigh k = max_k itself.
    check_adaptive_rounds(checks.as_runner(decoder), ((90, 2, 24),), costs, ORACLE, max_k=3)


def check_sampling(decoder):
    checks.check_sampling(decoder, cases=(checks.SamplingCase(PROMPTS[2], 3, 1.2, 0.95, seed=7),),
                          cache_case=checks.SamplingCase(PROMPTS[0], 2, 0.9, 1.0, seed=11),
                          greedy_cases=tuple((start, 2, 20) for start in _starts(60, 2)), answers=ORACLE)


# grade_id -> (the class it judges, its checks: the test cell's visible check, then the hidden one). A test
# passes when all its checks pass; test_speedup is then timed by the grader (verdict.time_speedup).
TESTS = {
    "test_loading": ("SpeculativeDecoder", [checks.check_loading, check_loading]),
    "test_draft_tokens": ("SpeculativeDecoder", [checks.check_draft_tokens, check_draft_tokens]),
    "test_verify_alignment": ("SpeculativeDecoder", [checks.check_verify_alignment, check_verify_alignment]),
    "test_correction_and_bonus": ("SpeculativeDecoder", [checks.check_correction_and_bonus,
                                                         check_correction_and_bonus]),
    "test_exact": ("SpeculativeDecoder", [checks.check_exact, check_exact]),
    "test_eos_and_budget": ("SpeculativeDecoder", [checks.check_eos_and_budget, check_eos_and_budget]),
    "test_counts": ("SpeculativeDecoder", [checks.check_counts, check_counts]),
    "test_cached_exact": ("CachedSpeculativeDecoder", [checks.check_exact, check_exact]),
    "test_cache_use": ("CachedSpeculativeDecoder", [checks.check_cache_use, check_cache_use]),
    "test_speedup": ("CachedSpeculativeDecoder", [checks.gate_rounds]),
    "test_sampling": ("SpeculativeSampler", [checks.check_sampling, check_sampling]),
    "test_lookup": ("PromptLookupDecoder", [checks.check_lookup, check_lookup]),
    "test_adaptive": ("AdaptiveSpeculativeDecoder", [checks.check_adaptive, check_adaptive]),
}
