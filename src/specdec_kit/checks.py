"""Checks of a student's decoder classes, called by the assignment's test cells (and the kit's tests).

    from specdec_kit import checks
    checks.check_draft_tokens(SpeculativeDecoder)      # raises CheckFailed with what to fix

Every check runs probes (`probes.py`): the student's class is built from offline zoo directories (so
its own `initialize_*` methods load the models), run on the CPU in fp32, and judged here by what it
returns and by the forward calls seen on its models, never by numbers it reports about itself. The
reference answers come from the kit's own models: `predict_rounds` on the `scripted` pair, whose every
round is known in advance, and the target's own greedy decoding on the context-dependent pairs.

A check takes the class itself (a notebook: the probes run in this process) or a runner with the same
`run(request)` method; grading passes one that runs the probes in another process (`isolation.py`),
so that the judging below happens where the student's methods cannot reach it. `check_speedup` also
times the cached decoder against HF assisted generation with the kit's benchmark.
"""

from __future__ import annotations

import os
import statistics
from functools import cache, lru_cache

import torch

from . import course, zoo
from .demo import first_difference, target_greedy
from .probes import ROLES, CaseOutcome, assemble, run_probe, set_threads
from .result import DecodeResult

PROMPTS = ("The future of Artificial Intelligence is", "Write the lyrics to the song 'Happy Birthday'.",
           "def fibonacci(n):\n")
K_VALUES = (1, 2, 4, 7)


class CheckFailed(AssertionError):
    """A check's verdict: what was expected, what came back, and where to look."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


class LocalRunner:
    """Runs probes on a decoder class in this process (a notebook's test cells); exceptions propagate."""

    def __init__(self, decoder_class: type):
        self.decoder_class = decoder_class
        set_threads()

    def run(self, request: dict) -> list[CaseOutcome]:
        events = []
        run_probe(request, self.decoder_class, events.append)
        return assemble(events)


def as_runner(decoder):
    """A runner for `decoder`: a class runs here, anything with `run(request)` is used as it is."""
    return LocalRunner(decoder) if isinstance(decoder, type) else decoder


# ---------------------------------------------------------------------------------------------
# Reference answers


@cache
def _reference_model(pair: str):
    from .loading import load_model, resolve_pair

    return load_model(resolve_pair(pair)[0], "cpu", torch.float32)


def reference_tokenizer(pair: str = "scripted"):
    """The zoo's tokenizer (every pair shares it), loaded by the kit."""
    return _reference_model(pair)[1]


@lru_cache(maxsize=4096)
def reference_greedy(pair: str, prompt: str, max_tokens: int) -> tuple[int, ...]:
    """The new tokens of the kit's own copy of `pair`'s target, decoding `prompt` greedily."""
    model, tokenizer = _reference_model(pair)
    return tuple(target_greedy(model, tokenizer(prompt, return_tensors="pt").input_ids, max_tokens))


def prompt_for_token(token: int) -> str:
    """A one-token prompt: `scripted` tokens encode back to themselves."""
    return reference_tokenizer().decode([token])


def predict_rounds(last_token: int, k: int, max_tokens: int) -> DecodeResult:
    """What correct greedy speculative decoding does on `scripted` after `last_token`.

    Each round proposes min(k, budget left - 1) draft tokens, accepts the prefix on which draft and
    target agree, adds the target's own token, and stops after EOS or at the budget.
    """
    script = zoo.scripted_script()
    tokens, proposed, accepted = [], [], []
    current = last_token
    while len(tokens) < max_tokens:
        k_round = min(k, max_tokens - len(tokens) - 1)
        drafts, token = [], current
        for _ in range(k_round):
            token = script.draft_next[token]
            drafts.append(token)
        n, token = 0, current
        while n < k_round and drafts[n] == script.target_next[token]:
            token = drafts[n]
            n += 1
        round_tokens = drafts[:n] + [script.target_next[token]]
        if script.eos_id in round_tokens:
            round_tokens = round_tokens[: round_tokens.index(script.eos_id) + 1]
        tokens += round_tokens
        proposed.append(k_round)
        accepted.append(min(n, len(round_tokens)))
        if round_tokens[-1] == script.eos_id:
            break
        current = round_tokens[-1]
    return DecodeResult("", tokens, proposed, accepted)


def draft_chain(start: int, k: int) -> list[int]:
    script = zoo.scripted_script()
    chain = [script.draft_next[start]]
    while len(chain) < k:
        chain.append(script.draft_next[chain[-1]])
    return chain


# ---------------------------------------------------------------------------------------------
# What every judged forward must satisfy


def require_seen_forwards(outcome: CaseOutcome) -> None:
    """Every forward reached the model through its own call, where the kit counts it."""
    for role in ROLES:
        unseen = outcome.unseen(role)
        require(unseen <= 0,
                f"{unseen} forward pass(es) of the {role} model ran without going through the model's own call "
                f"(model.forward(...) called directly, or the model's hooks removed): call it as "
                f"self.{role}_model(...), so that its forward passes can be counted")


def decoded(outcome: CaseOutcome, what: str) -> DecodeResult:
    """The case's DecodeResult, or a failure saying what came back instead."""
    result = outcome.result
    require(result["type"] == "DecodeResult" and result["token_ids"] is not None,
            f"{what}: speculative_decode must return a specdec_kit.DecodeResult, got {result['type']}")
    return DecodeResult("", result["token_ids"], result["proposed"] or [], result["accepted"] or [])


# ---------------------------------------------------------------------------------------------
# Part 1: loading


def check_loading(decoder, pair: str = "tiny") -> None:
    [case] = as_runner(decoder).run({"kind": "load", "pair": pair})
    for role, info in case.result["roles"].items():
        require(info["present"],
                f"the decoder must keep self.{role}_model and self.{role}_tokenizer from initialize_{role}_model")
        require(not info["training"], f"the {role} model is in training mode: call .eval() after loading it")
        require(info["pad"],
                f"the {role} tokenizer has no pad token (Pythia's has none): set it, e.g. to the EOS token")
        require(info["dtype"] == "float32",
                f"on the CPU the {role} model should be float32 (fp16 is for CUDA), got {info['dtype']}")
    require(case.result["mismatch"] != "accepted",
            "a draft whose tokenizer differs from the target's was accepted: compare the two vocabularies in "
            "__init__ and raise a ValueError that names both models")


# ---------------------------------------------------------------------------------------------
# Part 2: drafting


def check_draft_tokens(decoder, starts: tuple[int, ...] | None = None,
                       k_values: tuple[int, ...] = K_VALUES) -> None:
    runner = as_runner(decoder)
    script = zoo.scripted_script()
    cases = [([script.eos_chain[0], start], k)  # two tokens: only new tokens may come back
             for start in starts or tuple(script.cycle[:8]) for k in k_values]
    outcomes = runner.run({"kind": "draft", "pair": "scripted", "cases": cases})
    for (prefix, k), outcome in zip(cases, outcomes):
        got, start = outcome.result["tokens"], prefix[-1]
        require(outcome.result["shape"] == [1, k],
                f"generate_draft_tokens must return the k={k} new tokens as a tensor of shape [1, {k}], got "
                f"{outcome.result['shape'] or outcome.result['type']} (the prompt must not be included)")
        expected = draft_chain(start, k)
        if got != expected:
            where = first_difference(got, expected)
            flat = (start if where == 0 else expected[where - 1]) in script.flat
            # A sampling draft is caught either way: by a near-flat position or by answers that vary.
            [again] = runner.run({"kind": "draft", "pair": "scripted", "cases": [[prefix, k]], "repeat": 3})
            varies = any(answer != got for answer in [again.result["tokens"], *again.result["repeats"]])
            raise CheckFailed(
                f"draft token {where} is {got[where]}, expected the draft model's greedy choice "
                f"{expected[where]} (k={k}). "
                + ("Here the draft's distribution is nearly flat: take the argmax, do not sample."
                   if flat else "The drafts changed between calls on the same input: take the argmax, do "
                                "not sample." if varies else
                   "Feed each new token back in and take the argmax of the last position.")
            )


# ---------------------------------------------------------------------------------------------
# Part 3: verification


def _verify(runner, cases: list[tuple[list[int], list[int]]]) -> list[tuple[list, int, list]]:
    """(accepted tokens, index of the first rejected draft, next token) per case, from one target forward each."""
    answers = []
    for outcome in runner.run({"kind": "verify", "pair": "scripted", "cases": cases}):
        result = outcome.result
        require(result["triple"],
                "verify_tokens_vectorized must return (accepted_tokens, accepted_position, next_token)")
        require_seen_forwards(outcome)
        calls = len(outcome.forwards["target"])
        require(calls == 1, f"verification made {calls} target forward passes: score the prompt and all drafts "
                            "with exactly one, which also gives the correction and bonus tokens")
        answers.append((result["accepted"], result["position"], result["next"]))
    return answers


def check_verify_alignment(decoder, starts: tuple[int, ...] | None = None,
                           k_values: tuple[int, ...] = (2, 4, 6)) -> None:
    script = zoo.scripted_script()
    plan = [(start, k) for start in starts or tuple(script.cycle[:10]) for k in k_values]
    cases = [([script.eos_chain[0], start], draft_chain(start, k)) for start, k in plan]
    for (start, k), (_, drafts), (_, position, _) in zip(plan, cases, _verify(as_runner(decoder), cases)):
        expected = predict_rounds(start, k, k + 1).accepted[0]
        require(position == expected,
                f"with drafts {drafts} after token {start}, the first rejected draft is at index {expected}, "
                f"your verifier said {position}. The target's prediction for draft token i is the logit at "
                f"position L-1+i (L = length before the draft); comparing position L+i is the off-by-one.")


def check_correction_and_bonus(decoder, rejected: int = 0, accepted_from: int = 0) -> None:
    """A rejected draft is replaced by the target's token; a fully accepted draft earns the bonus token.

    `rejected` picks which token after which the draft disagrees (in cycle order), `accepted_from`
    the start on the EOS chain whose next two tokens the draft proposes correctly.
    """
    script = zoo.scripted_script()
    x = [t for t in script.cycle if t in script.disagree][rejected]
    start = script.eos_chain[accepted_from]
    chain = [script.target_next[start], script.target_next[script.target_next[start]]]
    (accepted, position, next_token), (full, full_position, bonus) = _verify(
        as_runner(decoder), [([x], [script.draft_next[x]]), ([start], chain)])
    require(position == 0 and accepted == [], "a draft the target would not produce must be rejected")
    require(next_token == [script.target_next[x]],
            f"after a rejection next_token must be the target's own token {script.target_next[x]} (the "
            f"correction), read from the same forward pass; got {next_token}")
    require(full_position == 2 and full == chain, "drafts the target agrees with are accepted")
    require(bonus == [script.target_next[chain[-1]]],
            "when every draft is accepted, next_token is the bonus token: the target's argmax after the last "
            "draft, from the same forward pass")


# ---------------------------------------------------------------------------------------------
# Part 4: the decoding loop


def check_exact(decoder, pair: str = "tiny", prompts: tuple[str, ...] = PROMPTS,
                k_values: tuple[int, ...] = K_VALUES, max_tokens: int = 30) -> None:
    cases = [(prompt, max_tokens, k) for prompt in prompts for k in k_values]
    outcomes = as_runner(decoder).run({"kind": "decode", "pair": pair, "cases": cases})
    for (prompt, _, k), outcome in zip(cases, outcomes):
        expected = list(reference_greedy(pair, prompt, max_tokens))
        got = decoded(outcome, f"k={k}, prompt {prompt!r}").token_ids
        where = first_difference(got, expected)
        require(got == expected,
                f"k={k}, prompt {prompt!r}: greedy speculative output must equal the target's own greedy output; "
                f"first difference at new token {where} (got {got[where:where + 3]}, expected "
                f"{expected[where:where + 3]}). Check the acceptance rule and what you append each round.")


def eos_and_budget_cases(chain_start: int = 0, cycle_start: int = 3) -> list[tuple[int, int, int, str]]:
    """(start token, k, max_tokens, label) of the EOS and budget edges, from two places in the script.

    The EOS chain c0 -> c1 -> c2 -> c3 -> EOS, entered at `chain_start`, puts EOS inside a k that reaches
    past it, or exactly at the bonus position of a k that ends on c3.
    """
    script = zoo.scripted_script()
    to_eos = len(script.eos_chain) - chain_start  # drafts from the start up to and including EOS
    return [(script.eos_chain[chain_start], to_eos + 1, 50, "EOS inside an accepted draft"),
            (script.eos_chain[chain_start], to_eos - 1, 50, "EOS as the bonus token"),
            (script.cycle[cycle_start], 4, 6, "a budget that ends mid-draft"),
            (script.cycle[cycle_start + 2], 8, 3, "k larger than the budget left"),
            (script.cycle[cycle_start + 4], 4, 1, "max_tokens = 1")]


def check_eos_and_budget(decoder, cases: list[tuple[int, int, int, str]] | None = None) -> None:
    script = zoo.scripted_script()
    cases = cases or eos_and_budget_cases()
    eos_in_prompt = reference_tokenizer().eos_token + prompt_for_token(script.cycle[0])
    requests = [(prompt_for_token(start), max_tokens, k) for start, k, max_tokens, _ in cases]
    outcomes = as_runner(decoder).run({"kind": "decode", "pair": "scripted",
                                       "cases": [*requests, (eos_in_prompt, 10, 4)]})
    for (start, k, max_tokens, label), outcome in zip(cases, outcomes):
        expected = predict_rounds(start, k, max_tokens)
        got = decoded(outcome, label)
        require(got.token_ids == expected.token_ids,
                f"{label} (k={k}, max_tokens={max_tokens}): expected tokens {expected.token_ids}, got "
                f"{got.token_ids}. Emit EOS and nothing after it, and never more than max_tokens new tokens.")
    got = decoded(outcomes[-1], "a prompt that holds EOS")
    require(len(got.token_ids) == 10, "an EOS inside the prompt must not stop decoding; only a generated EOS does")


def check_counts(decoder, starts: tuple[int, ...] | None = None, k: int = 4) -> None:
    script = zoo.scripted_script()
    starts = starts or tuple(script.cycle[10:16])
    outcomes = as_runner(decoder).run({"kind": "decode", "pair": "scripted",
                                       "cases": [(prompt_for_token(start), 24, k) for start in starts]})
    for start, outcome in zip(starts, outcomes):
        expected = predict_rounds(start, k, 24)
        got = decoded(outcome, f"prompt {prompt_for_token(start)!r}")
        require_seen_forwards(outcome)
        calls = len(outcome.forwards["target"])
        require(calls >= expected.rounds,
                f"the kit saw {calls} target forward passes for a decode that takes {expected.rounds} rounds, "
                "which need one each: every forward must go through the model's own call, with its hooks in place")
        require(calls == expected.rounds,
                f"{calls} target forward passes for a decode that takes {expected.rounds} rounds: one per "
                "round, whose logits give the acceptance, the correction and the bonus token")
        require(got.proposed == expected.proposed and got.accepted == expected.accepted,
                f"per-round counts should be proposed {expected.proposed}, accepted {expected.accepted}; the "
                f"decoder reported proposed {got.proposed}, accepted {got.accepted}. Count accepted drafts only "
                "(not the bonus or correction token) and propose no more drafts than the budget leaves room for.")


# ---------------------------------------------------------------------------------------------
# Part 5: the cached decoder


def stale_cache_position(calls, text: list[int], judged: set[int] | None = None) -> tuple[int, int] | None:
    """(forward, position) of the first judged forward whose KV cache held a position that is not the text's.

    Replays the ids each recorded forward fed to know which token every cached position was computed
    from: a rejected draft left in the cache shows up as a cached position whose token differs from the
    final text, or lies beyond it. `judged` picks the forwards to judge (default all): the draft may
    hold its own unverified proposals within a round.
    """
    fed = {}
    for i, call in enumerate(calls):
        if judged is None or i in judged:
            for position in range(call.cached_tokens):
                if position >= len(text) or fed.get(position) != text[position]:
                    return i, position
        for offset, token in enumerate(call.input_ids):
            fed[call.cached_tokens + offset] = token
    return None


def unfed_position(calls, text: list[int]) -> int | None:
    """The first position of `text` (its last token aside) that no recorded target forward fed, if any.

    Every token of the final text but the last must have been fed to the target once, on a cache that
    held the text before it: a decode whose forwards do not account for its own output made forwards
    the kit did not see.
    """
    fed = set()
    for call in calls:
        fed.update(range(call.cached_tokens, call.cached_tokens + call.new_tokens))
    return next((p for p in range(len(text) - 1) if p not in fed), None)


def first_after(calls, marks) -> set[int]:
    """Indices of `calls` that are the first to start after one of `marks` (calls of another model)."""
    firsts = set()
    for mark in marks:
        later = [i for i, call in enumerate(calls) if call.started > mark.started]
        if later:
            firsts.add(later[0])
    return firsts


def check_cache_use(decoder, starts: tuple[int, ...] | None = None, k: int = 4, max_tokens: int = 30) -> None:
    """After the prefill no forward re-sends the prefix, and no cache keeps a rejected draft.

    Judged from the forwards alone (how many tokens each fed, what its cache held), not from how
    many rounds the decoder took: that is test_counts' business.
    """
    script = zoo.scripted_script()
    starts = starts or tuple(script.cycle[20:24])
    prompts = [prompt_for_token(start) for start in starts]
    outcomes = as_runner(decoder).run({"kind": "decode", "pair": "scripted", "ids": True,
                                       "cases": [(prompt, max_tokens, k) for prompt in prompts]})
    for start, prompt, outcome in zip(starts, prompts, outcomes):
        expected = predict_rounds(start, k, max_tokens)
        result = decoded(outcome, f"prompt {prompt!r}")
        require(result.token_ids == expected.token_ids, "the cached decoder must produce the target's greedy tokens")
        require_seen_forwards(outcome)
        text = reference_tokenizer()(prompt).input_ids + list(result.token_ids)
        target_calls, draft_calls = outcome.forwards["target"], outcome.forwards["draft"]
        missing = unfed_position(target_calls, text)
        require(missing is None, f"no target forward the kit saw fed position {missing} of the text: every "
                                 "forward must go through the model's own call, with its hooks in place")
        # A round starts at a target forward: the draft's next forward must find its cache cropped.
        draft_round_starts = first_after(draft_calls, target_calls)
        for role, calls, most, judged in (("target", target_calls, k + 1, None),
                                          ("draft", draft_calls, 2, draft_round_starts)):
            sent = [c.new_tokens for c in calls]
            require(max(sent[1:], default=0) <= most,
                    f"{role} forwards fed {sent} tokens: after the prefill the {role} should feed at most {most} "
                    + ("(the last token and the k drafts) " if role == "target" else
                       "(one per draft step, two right after a fully accepted round) ")
                    + "on a KV cache kept across rounds, never the prefix again")
            stale = stale_cache_position(calls, text, judged)
            if stale is not None:
                raise CheckFailed(
                    f"the {role}'s KV cache still held a rejected draft token (position {stale[1]}) at its "
                    f"forward {stale[0]}: after a rejection crop the cache to the accepted text "
                    "(specdec_kit.crop_to) before the next round")


# ---------------------------------------------------------------------------------------------
# Part 6: speedup, timed by the kit

SPEEDUP_MIN_RATIO = 0.75  # public default: the cached decoder's tokens/s over HF assisted generation's
SPEEDUP_K = 4
SPEEDUP_TOKENS = 32  # new tokens per timed decode
SPEEDUP_REPEATS = 2  # 1 under `specdec-kit selftest` (SPECDEC_SELFTEST=1), which times ~20 submissions
SPEEDUP_PROMPTS = 2  # the first prompts of data/prompts.json
NEAR_TIE = 0.05  # fp16 logit margin under which a correct decoder may pick the other token (~1e-3 relative error)


def speedup_repeats() -> int:
    return 1 if os.environ.get("SPECDEC_SELFTEST") == "1" else SPEEDUP_REPEATS


def timing_lock():
    """One timed measurement at a time on this machine, across processes (parallel grading jobs)."""
    from filelock import FileLock

    zoo.cache_root().mkdir(parents=True, exist_ok=True)
    return FileLock(str(zoo.cache_root() / "timing.lock"))


def gate_rounds(decoder, k: int = SPEEDUP_K) -> None:
    """Deterministic, before any timing: one target forward per round and the right tokens, on `scripted`."""
    script = zoo.scripted_script()
    starts = script.cycle[30:33]
    outcomes = as_runner(decoder).run({"kind": "decode", "pair": "scripted",
                                       "cases": [(prompt_for_token(start), 24, k) for start in starts]})
    for start, outcome in zip(starts, outcomes):
        expected = predict_rounds(start, k, 24)
        got = decoded(outcome, "the speed test's first check")
        require(got.token_ids == expected.token_ids,
                "speedup is timed only for a decoder that produces the target's greedy tokens; fix test_cached_exact")
        require_seen_forwards(outcome)
        calls = len(outcome.forwards["target"])
        require(calls == expected.rounds,
                f"speedup is timed only for a decoder that makes one target forward per round: {calls} "
                f"forwards for {expected.rounds} rounds (see test_counts)")


def near_tie_accepted(prompt_id: str, mismatch, dtype: torch.dtype) -> None:
    """A difference from target greedy is accepted only after an fp16/bf16 near-tie (margin printed)."""
    tie = dtype != torch.float32 and mismatch.margin < NEAR_TIE
    require(tie, f"prompt {prompt_id!r}: output leaves target greedy at new token {mismatch.position} where the "
                 f"target's top-2 margin is {mismatch.margin:.3f} (not a near-tie): fix test_cached_exact")
    print(f"prompt {prompt_id!r}: differs from target greedy after a near-tie at new token {mismatch.position} "
          f"(margin {mismatch.margin:.3f} < {NEAR_TIE}), accepted")


def _gate_exact(setup, prompts, k: int, max_new: int) -> None:
    """On the timing pair: the decoder's tokens equal target greedy, up to an fp16 near-tie (margin shown)."""
    from .bench import encode
    from .demo import first_mismatch

    decoder = setup.decoders["notebook"]
    for prompt in prompts:
        ids = encode(setup, prompt.text)
        expected = target_greedy(setup.target, ids, max_new)
        got = list(decoder.speculative_decode(prompt.text, max_new, k).token_ids)
        mismatch = first_mismatch(setup.target, ids, expected, got)
        if mismatch is not None:
            near_tie_accepted(prompt.id, mismatch, setup.target.dtype)


def timing_plan(device: str | torch.device | None = None) -> dict:
    """What the speed test times: device, pair, prompts, k, tokens, repeats (the same in a notebook and grading)."""
    from .loading import default_pair, resolve_device
    from .prompts import load_prompts

    device = resolve_device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    return {"device": device, "pair": default_pair(device, timing=True), "prompts": load_prompts()[:SPEEDUP_PROMPTS],
            "k": SPEEDUP_K, "max_new": SPEEDUP_TOKENS, "repeats": speedup_repeats()}


def measure_speedup(decoder_class: type, device: str | None = None) -> dict:
    """Time the cached decoder against HF assisted generation and target greedy, interleaved, by the kit.

    Returns the median over (prompt, repeat) of the paired tokens/s ratios and each method's tokens/s.
    """
    from . import bench
    from .loading import default_dtype, resolve_pair

    set_threads()
    plan = timing_plan(device)
    target, draft = resolve_pair(plan["pair"])
    setup = bench.make_setup(target, draft, {"CachedSpeculativeDecoder": decoder_class}, plan["device"],
                             default_dtype(plan["device"]), ["hf_assisted", "notebook"])
    _gate_exact(setup, plan["prompts"], plan["k"], plan["max_new"])
    with timing_lock():
        rows, _ = bench.run_bench(setup, plan["prompts"], [plan["k"]], plan["repeats"], ["hf_assisted", "notebook"],
                                  plan["max_new"], progress=False, micro=False)
    speed = {(r["method"], r["prompt_id"], r["repeat"]): r["tokens_per_s"] for r in rows}
    return speed_summary(speed, plan, str(setup.target.dtype).removeprefix("torch."))


def speed_summary(speed: dict, plan: dict, dtype: str) -> dict:
    """Median paired ratios and tokens/s from {(method, prompt_id, repeat): tokens/s} (methods: notebook,
    hf_assisted, target_greedy)."""
    runs = {(prompt_id, repeat) for _, prompt_id, repeat in speed}

    def median_ratio(baseline: str) -> float:
        return statistics.median(speed[("notebook", *run)] / speed[(baseline, *run)] for run in runs)

    def tokens_per_s(method: str) -> float:
        return statistics.median(v for (m, *_), v in speed.items() if m == method)

    return {"pair": plan["pair"], "device": str(plan["device"]), "dtype": dtype, "k": plan["k"], "runs": len(runs),
            "vs_hf_assisted": median_ratio("hf_assisted"), "vs_target_greedy": median_ratio("target_greedy"),
            "tokens_per_s": {m: tokens_per_s(m) for m in ("notebook", "hf_assisted", "target_greedy")}}


def describe_speed(measured: dict) -> str:
    speed = measured["tokens_per_s"]
    return (f"speedup on {measured['pair']} ({measured['device']}, {measured['dtype']}, k={measured['k']}, "
            f"median of {measured['runs']} paired runs): {measured['vs_hf_assisted']:.2f}x HF assisted generation, "
            f"{measured['vs_target_greedy']:.2f}x target greedy; tokens/s: notebook {speed['notebook']:.1f}, "
            f"hf_assisted {speed['hf_assisted']:.1f}, target_greedy {speed['target_greedy']:.1f}")


def judge_speedup(measured: dict, min_ratio: float) -> dict:
    require(measured["vs_hf_assisted"] >= min_ratio,
            f"your cached decoder ran at {measured['vs_hf_assisted']:.2f}x the speed of HF assisted generation at "
            f"the same k; at least {min_ratio:.2f}x is required. Look for host syncs (.item(), .tolist()) inside "
            "the draft loop, forwards that re-send the prefix, and caches rebuilt instead of cropped.")
    return measured


def check_speedup(decoder_class: type, min_ratio: float = SPEEDUP_MIN_RATIO, device: str | None = None) -> dict | None:
    """The cached decoder is at least `min_ratio` times as fast as HF assisted generation at the same k.

    Fails first, deterministically, on forward counts and exactness; only code that passes them is timed.
    A ratio measured side by side in one process holds on any device, unlike a tokens/s threshold. While
    grading, the notebook's own run stops after the first check: the grader times the decoder itself,
    outside the notebook.
    """
    gate_rounds(decoder_class)
    if course.grading():
        print("the speed test is timed by the grader, outside this notebook; its first check passed")
        return None
    measured = measure_speedup(decoder_class, device)
    print(describe_speed(measured))
    return judge_speedup(measured, min_ratio)
