"""The speed check: the cached decoder against HF assisted generation at the same k, timed by the kit, and its
rule, which grading follows too: what is timed (`timing_plan`), when nothing is (`not_timed`), the bar
(`SPEEDUP_MIN_RATIO`, config.toml's `min_ratio` while grading).

It first checks, without timing, one target forward per round, the right tokens and caches kept across rounds
(`gate_rounds`); only a decoder that passes is timed. In a notebook the timing runs here (`measure_speedup`); while
grading, the notebook's own run stops after that first check and the grader times the decoder outside the notebook.
"""

from __future__ import annotations

import contextlib
import os
import statistics
from collections.abc import Collection

import torch

from .. import zoo
from ..core import settings
from ..core.timing import Observer
from ..models.baseline import first_mismatch, prompt_for_token, target_greedy, zoo_tokenizer
from ..protocol.probes import set_threads
from .answers import answers_or_recorded
from .caching import judge_cache_use
from .core import as_runner, decoded, require_seen_forwards
from .decoding import how_tokens_differ
from .failure import CheckFailed, require

SPEEDUP_MIN_RATIO = 0.75  # public default: the cached decoder's tokens/s over HF assisted generation's
SPEEDUP_K = 4
SPEEDUP_TOKENS = 32  # new tokens per timed decode
SPEEDUP_REPEATS = 2  # 1 under `specdec-course selftest` (SPECDEC_SELFTEST=1), which times ~20 submissions
SPEEDUP_PROMPTS = 2  # the first prompts of data/prompts.json
TIMING_WAIT = 300  # seconds a timing waits for another process's to end (one of at most a few minutes)
NEAR_TIE = 0.05  # fp16 logit margin under which a correct decoder may pick the other token (~1e-3 relative error)
SPEED_TEST = "test_speedup"  # the test the grader times after its checks
# The speed test times only a decoder that passed this test: its cases are the grader's and the same in every run, so
# a decoder whose tokens go wrong loses the speed test whatever prompts a run's timing draws.
EXACT_BEFORE_TIMING = "test_cached_exact"
NOT_EXACT = (f"speedup is timed only for a decoder that gives the target's greedy tokens on every case of "
             f"{EXACT_BEFORE_TIMING}: fix {EXACT_BEFORE_TIMING} first")


def not_timed(lost: Collection[str]) -> str | None:
    """Why the speed test is not timed, given the tests lost before it; None where it is timed."""
    return NOT_EXACT if EXACT_BEFORE_TIMING in lost else None


def speedup_repeats() -> int:
    return 1 if settings.selftest() else SPEEDUP_REPEATS


@contextlib.contextmanager
def timing_lock(wait: float = TIMING_WAIT):
    """One timed measurement at a time on this machine, across processes (parallel grading jobs). Behind another for
    `wait` seconds, the measurement goes on without it (both sides of a speed ratio share whatever load there is);
    none where the lock cannot be written (a grading sandbox: a submission must never hold the grader's timings up)."""
    from filelock import FileLock, Timeout

    path = zoo.cache_root() / "timing.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=True)
    except OSError:
        yield
        return
    lock = FileLock(str(path), timeout=wait) if os.access(path, os.W_OK) else None
    try:
        held = lock is not None and lock.acquire() is not None
    except Timeout:
        held = False
    try:
        yield
    finally:
        if held:
            lock.release()


def gate_rounds(decoder, k: int = SPEEDUP_K, answers=None) -> None:
    """Deterministic, before any timing: one target forward per round, the right tokens and caches kept across
    rounds, on `scripted`. A decoder that re-encodes what its cache should hold is slow by an amount that hangs on
    how many drafts the timed prompts reject, near the bar for some bugs: it loses here, whatever a run's timing
    draws."""
    script, answers = zoo.scripted_script(), answers_or_recorded(answers)
    starts, max_tokens = script.cycle[30:33], 24
    outcomes = as_runner(decoder).run({"kind": "decode", "pair": "scripted", "ids": True,
                                       "cases": [(prompt_for_token(start), max_tokens, k) for start in starts]})
    for start, outcome in zip(starts, outcomes):
        prompt, expected = prompt_for_token(start), answers.rounds(start, k, max_tokens)
        where = f"on the prompt {prompt!r} (k={k}, max_tokens={max_tokens})"
        got = decoded(outcome, "the speed test's first check")
        require(got.token_ids == expected.token_ids,
                f"speedup is timed only for a decoder that produces the target's greedy tokens; {where} "
                f"{how_tokens_differ(got.token_ids, expected.token_ids)}: fix test_cached_exact")
        require_seen_forwards(outcome)
        calls = len(outcome.forwards["target"])
        require(calls == expected.rounds,
                f"speedup is timed only for a decoder that makes one target forward per round: {calls} "
                f"forwards for {expected.rounds} rounds (see test_counts)")
        try:
            judge_cache_use(outcome, zoo_tokenizer()(prompt).input_ids + list(got.token_ids), k)
        except CheckFailed as e:
            raise CheckFailed(f"speedup is timed only for a decoder that keeps its caches across rounds; {where} {e} "
                              "(see test_cache_use)") from None

def near_tie_accepted(prompt_id: str, mismatch, dtype: torch.dtype) -> None:
    """A difference from target greedy is accepted only after an fp16/bf16 near-tie (margin printed)."""
    tie = dtype != torch.float32 and mismatch.margin < NEAR_TIE
    require(tie, f"prompt {prompt_id!r}: output leaves target greedy at new token {mismatch.position} where the "
                 f"target's top-2 margin is {mismatch.margin:.3f} (not a near-tie): fix test_cached_exact")
    print(f"prompt {prompt_id!r}: differs from target greedy after a near-tie at new token {mismatch.position} "
          f"(margin {mismatch.margin:.3f} < {NEAR_TIE}), accepted")


def _gate_exact(setup, prompts, k: int, max_new_tokens: int) -> None:
    """On the timing pair: the decoder's tokens equal target greedy, up to an fp16 near-tie (margin shown)."""
    from ..bench.runners import encode

    decoder = setup.decoders["cached"]
    for prompt in prompts:
        ids = encode(setup, prompt.text)
        expected = target_greedy(setup.target, ids, max_new_tokens)
        with Observer(decoder, lambda event: None) as observer:  # only to stop a decode that never ends
            observer.expect_tokens(max_new_tokens)
            got = list(decoder.speculative_decode(prompt.text, max_new_tokens, k).token_ids)
        mismatch = first_mismatch(setup.target, ids, expected, got)
        if mismatch is not None:
            near_tie_accepted(prompt.id, mismatch, setup.target.dtype)


def timing_plan(device: str | torch.device | None = None) -> dict:
    """What the speed test times: device, pair, prompts, k, tokens, repeats (the same in a notebook and grading)."""
    from ..core.prompts import load_prompts
    from ..models.loading import default_pair, resolve_device

    device = resolve_device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    return {"device": device, "pair": default_pair(device, timing=True), "prompts": load_prompts()[:SPEEDUP_PROMPTS],
            "k": SPEEDUP_K, "max_new_tokens": SPEEDUP_TOKENS, "repeats": speedup_repeats()}


def measure_speedup(decoder_class: type, plan: dict) -> dict:
    """Time the cached decoder against HF assisted generation and target greedy, interleaved, by the kit,
    as `plan` (`timing_plan`) says.

    Returns the median over (prompt, repeat) of the paired tokens/s ratios and each method's tokens/s.
    """
    from ..bench import benchmark as bench
    from ..models.loading import default_dtype, resolve_pair

    set_threads()
    target, draft = resolve_pair(plan["pair"])
    setup = bench.make_setup(target, draft, {"CachedSpeculativeDecoder": decoder_class}, plan["device"],
                             default_dtype(plan["device"]), ["hf_assisted", "cached"])
    _gate_exact(setup, plan["prompts"], plan["k"], plan["max_new_tokens"])
    with timing_lock():
        rows, _ = bench.run_bench(setup, plan["prompts"], [plan["k"]], plan["repeats"], ["hf_assisted", "cached"],
                                  plan["max_new_tokens"], progress=False, micro=False)
    speed = {(r["method"], r["prompt_id"], r["repeat"]): r["tokens_per_s"] for r in rows}
    return speed_summary(speed, plan, str(setup.target.dtype).removeprefix("torch."))


def speed_summary(speed: dict, plan: dict, dtype: str, per: str = "s") -> dict:
    """Median paired ratios and tokens/s from {(method, prompt_id, repeat): tokens/s} (methods: notebook,
    hf_assisted, target_greedy); `per` names the second they were counted in ("CPU s" where a run's cost was
    measured, not the clock)."""
    runs = {(prompt_id, repeat) for _, prompt_id, repeat in speed}

    def median_ratio(baseline: str) -> float:
        return statistics.median(speed[("cached", *run)] / speed[(baseline, *run)] for run in runs)

    def tokens_per_s(method: str) -> float:
        return statistics.median(v for (m, *_), v in speed.items() if m == method)

    return {"pair": plan["pair"], "device": str(plan["device"]), "dtype": dtype, "k": plan["k"], "runs": len(runs),
            "per": per,
            "vs_hf_assisted": median_ratio("hf_assisted"), "vs_target_greedy": median_ratio("target_greedy"),
            "tokens_per_s": {m: tokens_per_s(m) for m in ("cached", "hf_assisted", "target_greedy")}}


GRADING_PAIRS = "synthetic-small on a CPU, synthetic-pythia on a GPU"  # what default_pair picks while grading


def describe_plan(plan: dict, min_ratio: float) -> str:
    """What the speed test is about to time, and what grading times instead (before any timing starts)."""
    prompts = ", ".join(p.id for p in plan["prompts"])
    return (f"speed test: your CachedSpeculativeDecoder against HF assisted generation at k={plan['k']}, on "
            f"{plan['pair']} ({plan['device']}); prompts {prompts}, {plan['max_new_tokens']} new tokens each, "
            f"{plan['repeats']} repeat(s), interleaved, median of the paired tokens/s ratios; passes at "
            f"{min_ratio:.2f}x or more. Grading measures the same test offline on the grader's machine "
            f"({GRADING_PAIRS}; on a CPU by the CPU each run costs, not the clock), so the graded ratio can differ "
            "from the one measured here.")


def describe_speed(measured: dict) -> str:
    speed = measured["tokens_per_s"]
    return (f"speedup on {measured['pair']} ({measured['device']}, {measured['dtype']}, k={measured['k']}, "
            f"median of {measured['runs']} paired runs): {measured['vs_hf_assisted']:.2f}x HF assisted generation, "
            f"{measured['vs_target_greedy']:.2f}x target greedy; tokens/{measured['per']}: cached "
            f"{speed['cached']:.1f}, hf_assisted {speed['hf_assisted']:.1f}, "
            f"target_greedy {speed['target_greedy']:.1f}")


def judge_speedup(measured: dict, min_ratio: float) -> dict:
    require(measured["vs_hf_assisted"] >= min_ratio,
            f"your cached decoder ran at {measured['vs_hf_assisted']:.2f}x the speed of HF assisted generation at "
            f"the same k; at least {min_ratio:.2f}x is required. Look for host syncs (.item(), .tolist()) inside "
            "the draft loop, forwards that re-send the prefix, and caches rebuilt instead of cropped.")
    return measured


def check_speedup(decoder_class: type, min_ratio: float = SPEEDUP_MIN_RATIO, device: str | None = None) -> dict | None:
    """The cached decoder is at least `min_ratio` times as fast as HF assisted generation at the same k.

    Fails first, deterministically, on forward counts, exactness and the caches' use; only code that passes is timed.
    A ratio measured side by side in one process holds on any device, unlike a tokens/s threshold. While
    grading, the notebook's own run stops after the first check: the grader times the decoder itself,
    outside the notebook.
    """
    gate_rounds(decoder_class)
    if settings.grading():
        print("the speed test is timed by the grader, outside this notebook; its first check passed")
        return None
    plan = timing_plan(device)
    print(describe_plan(plan, min_ratio))
    measured = measure_speedup(decoder_class, plan)
    print(describe_speed(measured))
    judge_speedup(measured, min_ratio)
    print(f"passed: {measured['vs_hf_assisted']:.2f}x HF assisted generation, at least {min_ratio:.2f}x required")
    return measured
