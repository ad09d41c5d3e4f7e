"""The checks of the decoders' behaviour: loading, drafting, verification, the loop and the caches.

Each builds the student's class on the offline zoo (its own `initialize_*` methods load the models), runs it
on the CPU in fp32 through probes, and judges what it returned and the forward calls seen on its models
against `answers` (correct rounds on the `scripted` pair, read as data in a notebook, computed by the grader's
oracle while grading) and against the target's own greedy decoding elsewhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import contextmanager

from .. import zoo
from ..baseline import first_difference, prompt_for_token, zoo_greedy, zoo_tokenizer
from ..result import DecodeResult
from ..rounds import Rounds, build_rounds, correct_rounds, scripted_rounds, verified_rounds
from ..rounds import first_difference as first_round_difference
from ..timing import NoProgress
from .answers import answers_or_recorded, recorded
from .core import CheckFailed, as_runner, decoded, require, require_seen_forwards
from .outcomes import CaseOutcome

PROMPTS = ("The future of Artificial Intelligence is", "Write the lyrics to the song 'Happy Birthday'.",
           "def fibonacci(n):\n")
K_VALUES = (1, 2, 4, 7)
EXACT_TOKENS = 30
# check_exact's own cases, whose correct rounds the release records (answers.exact_rounds) for a test cell to draw
EXACT_QUESTIONS = tuple(("tiny", prompt, k, EXACT_TOKENS) for prompt in PROMPTS for k in K_VALUES)


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
                       k_values: tuple[int, ...] = K_VALUES, answers=None) -> None:
    runner, answers = as_runner(decoder), answers_or_recorded(answers)
    script = zoo.scripted_script()
    cases = [([script.eos_chain[0], start], k)  # two tokens: only new tokens may come back
             for start in starts or tuple(script.cycle[:8]) for k in k_values]
    outcomes = runner.run({"kind": "draft", "pair": "scripted", "cases": cases})
    for (prefix, k), outcome in zip(cases, outcomes):
        got, start = outcome.result["tokens"], prefix[-1]
        require(outcome.result["shape"] == [1, k],
                f"generate_draft_tokens must return the k={k} new tokens as a tensor of shape [1, {k}], got "
                f"{outcome.result['shape'] or outcome.result['type']} (the prompt must not be included)")
        expected = answers.draft_chain(start, k)
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


def _verify(runner, cases: list[tuple[list[int], list[int]]]) -> list[tuple[list, int, list, list | str]]:
    """(accepted tokens, index of the first rejected draft, next token, its shape) per case, from one target forward
    each."""
    answers = []
    for outcome in runner.run({"kind": "verify", "pair": "scripted", "cases": cases}):
        result = outcome.result
        got = (f"a {result['type']} of length {result['length']}" if result.get("length") is not None
               else f"a {result.get('type', 'value of another type')}")
        require(result["triple"],
                f"verify_tokens_vectorized must return (accepted_tokens, n_accepted, next_token), got {got}")
        require_seen_forwards(outcome)
        calls = len(outcome.forwards["target"])
        require(calls == 1, f"verification made {calls} target forward passes: score the prompt and all drafts "
                            "with exactly one, which also gives the correction and bonus tokens")
        answers.append((result["accepted"], result["position"], result["next"], result["next_shape"]))
    return answers


def check_verify_alignment(decoder, starts: tuple[int, ...] | None = None,
                           k_values: tuple[int, ...] = (2, 4, 6), answers=None) -> None:
    script, answers = zoo.scripted_script(), answers_or_recorded(answers)
    plan = [(start, k) for start in starts or tuple(script.cycle[:10]) for k in k_values]
    cases = [([script.eos_chain[0], start], answers.draft_chain(start, k)) for start, k in plan]
    for (start, k), (_, drafts), (_, position, _, _) in zip(plan, cases, _verify(as_runner(decoder), cases)):
        expected = answers.rounds(start, k, k + 1).accepted[0]
        require(position == expected,
                f"with drafts {drafts} after token {start}, the first rejected draft is at index {expected}, "
                f"your verifier said {position}. The target's prediction for draft token i is the logit at "
                f"position L-1+i (L = length before the draft); comparing position L+i (one late) or L-2+i (one "
                "early) is the off-by-one.")


def check_correction_and_bonus(decoder, rejected: int = 0, accepted_from: int = 0) -> None:
    """A rejected draft is replaced by the target's token (the correction); a fully accepted draft earns the bonus
    token, both from the verifying forward.

    `rejected` picks which token after which the draft disagrees (in cycle order), `accepted_from`
    the start on the EOS chain whose next two tokens the draft proposes correctly.
    """
    script = zoo.scripted_script()
    x = [t for t in script.cycle if t in script.disagree][rejected]
    start = script.eos_chain[accepted_from]
    chain = [script.target_next[start], script.target_next[script.target_next[start]]]
    (accepted, position, next_token, next_shape), (full, full_position, bonus, bonus_shape) = _verify(
        as_runner(decoder), [([x], [script.draft_next[x]]), ([start], chain)])
    require(position == 0 and accepted == [],
            f"with the draft [{script.draft_next[x]}] after token {x}, which the target would not produce, the draft "
            f"must be rejected (n_accepted 0, accepted_tokens []); got n_accepted {position}, accepted_tokens "
            f"{accepted}")
    require(next_token == [script.target_next[x]],
            f"after a rejection next_token must be the target's own token {script.target_next[x]} (the "
            f"correction), read from the same forward pass; got {next_token} (shape {next_shape})")
    require(full_position == 2 and full == chain,
            f"with the drafts {chain} after token {start}, which the target agrees with, both must be accepted "
            f"(n_accepted 2, accepted_tokens {chain}); got n_accepted {full_position}, accepted_tokens {full}")
    require(bonus == [script.target_next[chain[-1]]],
            f"when every draft is accepted, next_token is the bonus token: the target's argmax after the last "
            f"draft, from the same forward pass. After the drafts {chain} (all accepted) next_token should be "
            f"[{script.target_next[chain[-1]]}] (shape [1, 1]); got {bonus} (shape {bonus_shape})")


# ---------------------------------------------------------------------------------------------
# Part 4: the decoding loop


def how_tokens_differ(got: list[int], expected: list[int]) -> str:
    """Too many tokens, too few, or where they part: the words a student can act on."""
    if len(got) > len(expected) and got[:len(expected)] == expected:
        return (f"too many tokens: {len(got)} new tokens where target greedy stops after {len(expected)} (the "
                f"budget, or an EOS); the extra ones begin {got[len(expected):len(expected) + 3]}")
    if len(got) < len(expected) and expected[:len(got)] == got:
        return (f"too few tokens: the decode stopped after {len(got)} new tokens where target greedy gives "
                f"{len(expected)}, the next being {expected[len(got):len(got) + 3]}")
    where = first_difference(got, expected)
    return (f"first difference at new token {where} (got {got[where:where + 3]}, expected "
            f"{expected[where:where + 3]})")


@contextmanager
def rounds_shown(outcome: CaseOutcome, prompt: str, max_tokens: int, expected: DecodeResult, title: str,
                 cached: bool = False):
    """Judge one decode on the `scripted` pair: a CheckFailed raised in the block carries, as `rounds`, the decode's
    rounds (read off its forwards) and correct decoding's (from the pair's script, with its caches when `cached`),
    where the two differ. The checks only attach them; a notebook's test cell draws them (`cells.run_test`)."""
    try:
        yield
    except CheckFailed as e:
        if e.rounds is None:
            e.rounds = decode_rounds(outcome, prompt, max_tokens, expected, title, cached)
        raise


def decode_rounds(outcome: CaseOutcome, prompt: str, max_tokens: int, expected: DecodeResult,
                  title: str, cached: bool = False) -> tuple[Rounds, Rounds, str] | None:
    """(the decode's rounds, correct decoding's, a title), or None if the decode returned no DecodeResult or its
    rounds are correct decoding's."""
    result = outcome.result
    if result.get("type") != "DecodeResult" or result.get("token_ids") is None:
        return None
    tokenizer, got = zoo_tokenizer(), decoded(outcome, title)
    prompt_ids = tokenizer(prompt).input_ids
    yours = build_rounds(prompt_ids, got, outcome.forwards["target"], outcome.forwards["draft"], max_tokens,
                         {zoo.scripted_script().eos_id}, tokenizer.decode)
    correct = scripted_rounds(prompt_ids, expected, max_tokens, tokenizer.decode, cached)
    return None if first_round_difference(yours, correct) is None else (yours, correct, title)


# A decode a check runs, for drawing it if it fails: its prompt, a title, and correct decoding's rounds (from the
# prompt's ids and the tokenizer's decode), or None where the kit does not know them.
Case = tuple[str, str, Callable[[list[int], Callable], Rounds | None]]


def scripted_case(prompt: str, max_tokens: int, expected: DecodeResult, title: str, cached: bool = False) -> Case:
    return prompt, title, lambda ids, decode: scripted_rounds(ids, expected, max_tokens, decode, cached)


def exact_case(pair: str, prompt: str, k: int, max_tokens: int) -> Case:
    """A case of check_exact: correct decoding's rounds where the release recorded them (its own cases)."""
    def correct(ids: list[int], decode) -> Rounds | None:
        try:
            answer = recorded().exact_rounds(pair, prompt, k, max_tokens)
        except LookupError:
            return None
        return correct_rounds(ids, answer.result, [list(d) for d in answer.drafts], max_tokens, decode,
                              {zoo_tokenizer(pair).eos_token_id}, cached=False)
    return prompt, f"k={k}, prompt {prompt!r}", correct


@contextmanager
def failed_decodes_shown(runner, cases: list[Case]):
    """A decode that fails in the block (NoProgress, or the student's own exception) carries, as `rounds`, the rounds
    it completed, as its verifier returned them (its probe's `stuck` event), over correct decoding's for its case
    (`cases`, one per case of the request). Only a runner that keeps its events (the notebook's) gives them: the
    grader draws nothing."""
    try:
        yield
    except (Exception, NoProgress) as e:
        drawn = stuck_rounds(getattr(runner, "events", []), cases)
        if drawn is not None and getattr(e, "rounds", None) is None:
            with contextlib.suppress(AttributeError, TypeError):  # an exception that takes no attributes
                e.rounds = drawn
        raise


def stuck_rounds(events: list[dict], cases: list[Case]) -> tuple[Rounds, Rounds, str] | None:
    """(the failed decode's rounds, correct decoding's, a title) from the last `stuck` event, or None."""
    stuck = next((e for e in reversed(events) if e.get("event") == "stuck"), None)
    if stuck is None or not 0 <= stuck["index"] < len(cases):
        return None
    prompt, title, correct = cases[stuck["index"]]
    tokenizer = zoo_tokenizer()
    prompt_ids = tokenizer(prompt).input_ids
    expected = correct(prompt_ids, tokenizer.decode)
    return None if expected is None else (verified_rounds(prompt_ids, stuck["rounds"], tokenizer.decode), expected,
                                          f"{title}, the rounds it completed before it failed")


def cache_length_advice(outcome: CaseOutcome, prompt_length: int, result: DecodeResult) -> str:
    """Where a forward of a decode ran on a KV cache that held more or fewer positions than the text before its
    round, the words that say so; "" where each fits the text, or where the kit cannot tell (no cache, not one
    target forward a round, counts that do not add up to the tokens).

    A round's target forward feeds what its cache lacks of the text, then the round's drafts: its cache and feed,
    less those drafts, reach the text's length, as the round's first draft forward does."""
    target, draft = outcome.forwards["target"], outcome.forwards["draft"]
    emitted = [n + 1 for n in result.accepted]  # each round's accepted drafts and the target's token
    if (not any(c.cached_tokens for c in target + draft) or len(target) != len(result.proposed)
            or not sum(emitted[:-1]) < len(result.token_ids) <= sum(emitted)):
        return ""
    text = prompt_length
    for r, (call, proposed) in enumerate(zip(target, result.proposed)):
        after = target[r - 1].started if r else float("-inf")
        first_draft = next((c for c in draft if after < c.started < call.started), None)
        for role, seen, drafts in (("draft", first_draft, 0), ("target", call, proposed)):
            if seen is not None and seen.cached_tokens + seen.new_tokens - drafts != text:
                return _cache_length_words(r, role, seen, drafts, text)
        text += emitted[r]
    return ""


def _cache_length_words(r: int, role: str, call, drafts: int, text: int) -> str:
    reached = call.cached_tokens + call.new_tokens - drafts
    more = reached > text
    fed = f"{call.new_tokens} tokens" + (f" ({drafts} of them drafts)" if drafts else "")
    return (f"In round {r} the {role}'s forward ran on a KV cache of {call.cached_tokens} positions and fed {fed}, "
            f"so the text it ran on reached position {reached} where the text had {text} tokens: the {role}'s cache "
            f"held {'more' if more else 'fewer'} positions than the text. "
            + ("After a rejection crop both caches to the accepted text (crop_to in rollback)." if more else
               "Feed every position of the text that the cache lacks."))


EXACT_ADVICE = "Check the acceptance rule, what you append each round and when the loop stops."


def check_exact(decoder, pair: str = "tiny", prompts: tuple[str, ...] = PROMPTS,
                k_values: tuple[int, ...] = K_VALUES, max_tokens: int = EXACT_TOKENS, *,
                what: str = "greedy speculative", advice: str = EXACT_ADVICE, draft_free: bool = False,
                init: dict | None = None) -> None:
    """Each (prompt, k) decode must equal the target's greedy output; `draft_free`: with no draft forwards either.
    `init`: further constructor arguments (probes.init_kwargs)."""
    cases = [(prompt, max_tokens, k) for prompt in prompts for k in k_values]
    runner = as_runner(decoder)
    with failed_decodes_shown(runner, [exact_case(pair, prompt, k, max_tokens) for prompt, _, k in cases]):
        outcomes = runner.run({"kind": "decode", "pair": pair, "cases": cases, "init": init or {}})
    for (prompt, _, k), outcome in zip(cases, outcomes):
        expected = list(zoo_greedy(pair, prompt, max_tokens))
        result = decoded(outcome, f"k={k}, prompt {prompt!r}")
        got = result.token_ids
        if got != expected:
            caches = cache_length_advice(outcome, len(zoo_tokenizer(pair)(prompt).input_ids), result)
            raise CheckFailed(f"k={k}, prompt {prompt!r}: {what} output must equal the target's own greedy output; "
                              f"{how_tokens_differ(got, expected)}. {caches or advice}")
        if draft_free:
            require_seen_forwards(outcome)
            require(not outcome.forwards["draft"], f"{what} drafts without a model: the kit saw "
                                                   f"{len(outcome.forwards['draft'])} draft forward passes")


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


def check_eos_and_budget(decoder, cases: list[tuple[int, int, int, str]] | None = None, answers=None) -> None:
    script, answers = zoo.scripted_script(), answers_or_recorded(answers)
    cases = cases or eos_and_budget_cases()
    eos_in_prompt = zoo_tokenizer().eos_token + prompt_for_token(script.cycle[0])
    requests = [(prompt_for_token(start), max_tokens, k) for start, k, max_tokens, _ in cases]
    expectations = [answers.rounds(start, k, max_tokens) for start, k, max_tokens, _ in cases]
    runner = as_runner(decoder)
    with failed_decodes_shown(runner, [
            *[scripted_case(prompt, max_tokens, expected, f"{label} (k={k}, max_tokens={max_tokens})")
              for (_, k, max_tokens, label), (prompt, _, _), expected in zip(cases, requests, expectations)],
            (eos_in_prompt, "a prompt that holds EOS", lambda ids, decode: None)]):
        outcomes = runner.run({"kind": "decode", "pair": "scripted", "ids": True,
                               "cases": [*requests, (eos_in_prompt, 10, 4)]})
    for (_, k, max_tokens, label), (prompt, _, _), outcome, expected in zip(cases, requests, outcomes, expectations):
        with rounds_shown(outcome, prompt, max_tokens, expected, f"{label} (k={k}, max_tokens={max_tokens})"):
            got = decoded(outcome, label)
            require(got.token_ids == expected.token_ids,
                    f"{label} (k={k}, max_tokens={max_tokens}): expected tokens {expected.token_ids}, got "
                    f"{got.token_ids}: {how_tokens_differ(got.token_ids, expected.token_ids)}. "
                    + eos_and_budget_advice(got.token_ids, expected.token_ids))
    got = decoded(outcomes[-1], "a prompt that holds EOS")
    require(len(got.token_ids) == 10, "an EOS inside the prompt must not stop decoding; only a generated EOS does "
                                      f"(max_tokens=10, got {len(got.token_ids)} tokens: {got.token_ids})")


def eos_and_budget_advice(got: list[int], expected: list[int]) -> str:
    """Where to look: the end of the text where only its end differs, else the rounds before it."""
    if got[:len(expected)] == expected or expected[:len(got)] == got:
        return "Emit EOS and nothing after it, and never more than max_tokens new tokens."
    return ("The tokens part before EOS or the budget come into it: look at the first round that differs (the test "
            "cell draws your rounds over correct decoding's) and pass test_exact first.")


COUNTED_EDGES = {  # eos_and_budget_cases whose counts test_counts judges, and the rule each shows
    "EOS inside an accepted draft": "When an EOS is among the accepted drafts, accepted counts those up to "
                                    "and including it.",
    "a budget that ends mid-draft": "A round with no room left for drafts proposes 0, accepts 0 and still "
                                    "counts as a round.",
}


def check_counts(decoder, starts: tuple[int, ...] | None = None, k: int = 4, answers=None) -> None:
    script, answers = zoo.scripted_script(), answers_or_recorded(answers)
    starts = starts or tuple(script.cycle[10:16])
    edges = [case for case in eos_and_budget_cases() if case[3] in COUNTED_EDGES]
    runner = as_runner(decoder)
    with failed_decodes_shown(runner, [
            *[scripted_case(prompt_for_token(start), 24, answers.rounds(start, k, 24),
                            f"prompt {prompt_for_token(start)!r} (k={k}, max_tokens=24)") for start in starts],
            *[scripted_case(prompt_for_token(start), max_tokens, answers.rounds(start, edge_k, max_tokens),
                            f"{label} (k={edge_k}, max_tokens={max_tokens})")
              for start, edge_k, max_tokens, label in edges]]):
        outcomes = runner.run({"kind": "decode", "pair": "scripted", "ids": True, "cases": [
            *[(prompt_for_token(start), 24, k) for start in starts],
            *[(prompt_for_token(start), max_tokens, edge_k) for start, edge_k, max_tokens, _ in edges]]})
    for start, outcome in zip(starts, outcomes):
        expected, prompt = answers.rounds(start, k, 24), prompt_for_token(start)
        with rounds_shown(outcome, prompt, 24, expected, f"prompt {prompt!r} (k={k}, max_tokens=24)"):
            got = decoded(outcome, f"prompt {prompt!r}")
            require_seen_forwards(outcome)
            calls = len(outcome.forwards["target"])
            require(calls >= expected.rounds,
                    f"the kit saw {calls} target forward passes for a decode that takes {expected.rounds} rounds, "
                    "which need one each: every forward must go through the model's own call, with its hooks in "
                    "place")
            require(calls == expected.rounds, too_many_forwards(outcome, expected))
            require(got.proposed == expected.proposed and got.accepted == expected.accepted,
                    f"per-round counts should be proposed {expected.proposed}, accepted {expected.accepted}; the "
                    f"decoder reported proposed {got.proposed}, accepted {got.accepted}. Count accepted drafts only "
                    "(not the bonus or correction token) and propose no more drafts than the budget leaves room "
                    "for; a round with no room left for drafts proposes 0 and still counts as a round.")
    for (start, edge_k, max_tokens, label), outcome in zip(edges, outcomes[len(starts):]):
        expected, got = answers.rounds(start, edge_k, max_tokens), decoded(outcome, label)
        if got.token_ids != expected.token_ids:
            continue  # wrong tokens are test_eos_and_budget's to name
        with rounds_shown(outcome, prompt_for_token(start), max_tokens, expected,
                          f"{label} (k={edge_k}, max_tokens={max_tokens})"):
            require(got.proposed == expected.proposed and got.accepted == expected.accepted,
                    f"{label} (k={edge_k}, max_tokens={max_tokens}): per-round counts should be proposed "
                    f"{expected.proposed}, accepted {expected.accepted}; the decoder reported proposed "
                    f"{got.proposed}, accepted {got.accepted}. {COUNTED_EDGES[label]}")


def too_many_forwards(outcome: CaseOutcome, expected: DecodeResult) -> str:
    """More target forwards than rounds: more rounds than correct decoding, more than one forward in a
    round, or a target doing the drafts' work.

    Told apart from the kit's own record: a round begins with the draft's calls, so the runs of draft
    calls (no target call between them) count the rounds that drafted.
    """
    calls, drafts = outcome.forwards["target"], outcome.forwards["draft"]
    drafted_first = bool(drafts) and (not calls or drafts[0].started < calls[0].started)
    runs = len(first_after(drafts, calls)) + drafted_first
    drafting = sum(1 for p in expected.proposed if p > 0)
    seen = f"{len(calls)} target forward passes for a decode that takes {expected.rounds} rounds"
    if runs > drafting:
        return (f"{seen}, {drafting} of them drafting; the draft ran in {runs}: more rounds than correct decoding "
                "takes. Each round must keep every accepted draft and add the target's own token")
    if runs == drafting:
        return (f"{seen}, and the draft ran in the {runs} rounds it should: a round makes more than one target "
                "forward. One per round: its logits give the acceptance, the correction and the bonus token")
    return (f"{seen}, {drafting} of them drafting, but the draft ran in only {runs}: the target is doing the "
            "drafts' work. One target forward per round checks all of the round's drafts")


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


def check_same_call_twice(decoder, starts: tuple[int, ...] | None = None, k: int = 4, answers=None) -> None:
    """A method called twice on the same input (as a cell run twice calls it) gives the same answer. For a cached
    decoder, drafting one token twice meets, the second time, a cache that already holds all of its input."""
    script, answers = zoo.scripted_script(), answers_or_recorded(answers)
    runner = as_runner(decoder)
    prefixes = [[script.eos_chain[0], start] for start in starts or tuple(script.cycle[24:27])]
    cases = [(p, draft_k) for p in prefixes for draft_k in (1, k)]
    drafts = runner.run({"kind": "draft", "pair": "scripted", "cases": cases, "repeat": 2})
    for (prefix, draft_k), outcome in zip(cases, drafts):
        expected = answers.draft_chain(prefix[-1], draft_k)
        [again] = outcome.result["repeats"] or [None]
        require(outcome.result["tokens"] == expected and again == expected,
                f"generate_draft_tokens called twice on the prefix {prefix} (k={draft_k}) gave "
                f"{outcome.result['tokens']} then {again}, expected {expected} both times: a cache that already "
                "holds all of the input must still give the logits at its last position (feed that position again)")
        if draft_k != 1 or not outcome.forwards["draft"]:
            continue
        # The drafts of the scripted pair follow the last token alone: the forward shows where its logits were.
        last = outcome.forwards["draft"][-1]
        reached = last.cached_tokens + last.new_tokens
        require(reached == len(prefix),
                f"generate_draft_tokens called twice on the prefix {prefix} (k=1): the second call's draft forward "
                f"fed {last.new_tokens} token(s) on a cache holding {last.cached_tokens}, so its logits were for "
                f"position {reached} of a {len(prefix)}-token input: crop a cache that holds all of the input to "
                f"{len(prefix) - 1} positions (and the ids it holds to match), then feed the last token again")
    cases = [(p, answers.draft_chain(p[-1], k)) for p in prefixes for _ in range(2)]
    verified = _verify(runner, cases)
    for index in range(0, len(cases), 2):
        (prefix, drafts), first, second = cases[index], verified[index], verified[index + 1]
        require(first == second, f"verify_tokens_vectorized called twice on the prefix {prefix} with drafts "
                                 f"{drafts} gave {first} then {second}: the same input must give the same answer")


def check_cache_use(decoder, starts: tuple[int, ...] | None = None, k: int = 4, max_tokens: int = 30,
                    answers=None) -> None:
    """After the prefill no forward re-sends the prefix, and no cache keeps a rejected draft.

    Judged from the forwards alone (how many tokens each fed, what its cache held), not from how
    many rounds the decoder took: that is test_counts' business.
    """
    script, answers = zoo.scripted_script(), answers_or_recorded(answers)
    starts = starts or tuple(script.cycle[20:24])
    prompts = [prompt_for_token(start) for start in starts]
    runner = as_runner(decoder)
    with failed_decodes_shown(runner, [scripted_case(prompt, max_tokens, answers.rounds(start, k, max_tokens),
                                                     f"prompt {prompt!r} (k={k}, max_tokens={max_tokens})", cached=True)
                                       for start, prompt in zip(starts, prompts)]):
        outcomes = runner.run({"kind": "decode", "pair": "scripted", "ids": True,
                               "cases": [(prompt, max_tokens, k) for prompt in prompts]})
    for start, prompt, outcome in zip(starts, prompts, outcomes):
        expected = answers.rounds(start, k, max_tokens)
        with rounds_shown(outcome, prompt, max_tokens, expected, f"prompt {prompt!r} (k={k}, max_tokens={max_tokens})",
                          cached=True):
            result = decoded(outcome, f"prompt {prompt!r}")
            require(result.token_ids == expected.token_ids,
                    f"prompt {prompt!r} (k={k}, max_tokens={max_tokens}): the cached decoder must produce the "
                    f"target's greedy tokens; {how_tokens_differ(result.token_ids, expected.token_ids)}")
            judge_cache_use(outcome, zoo_tokenizer()(prompt).input_ids + list(result.token_ids), k)
    check_other_text_starts_afresh(decoder, k, answers)


def judge_cache_use(outcome: CaseOutcome, text: list[int], k: int) -> None:
    """The forwards of one decode that ended in `text` (prompt and output ids), at k drafts a round: after the
    prefill none starts afresh or re-sends the prefix, and no cache keeps a rejected draft."""
    require_seen_forwards(outcome)
    target_calls, draft_calls = outcome.forwards["target"], outcome.forwards["draft"]
    missing = unfed_position(target_calls, text)
    require(missing is None, f"no target forward the kit saw fed position {missing} of the text: every "
                             "forward must go through the model's own call, with its hooks in place")
    # A round starts at a target forward: the draft's next forward must find its cache cropped.
    draft_round_starts = first_after(draft_calls, target_calls)
    for role, calls, most, judged in (("target", target_calls, k + 1, None),
                                      ("draft", draft_calls, 2, draft_round_starts)):
        afresh = next((i for i, call in enumerate(calls) if i > 0 and call.cached_tokens == 0), None)
        require(afresh is None,
                f"the {role}'s forward {afresh} started from an empty cache and fed "
                f"{calls[afresh].new_tokens if afresh is not None else 0} tokens, the whole text so far: keep "
                "the cache across rounds (cached_prefix) and, after a rejection, crop it in rollback so that "
                "it still holds a prefix of the text")
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
                "(specdec_kit.crop_to) in rollback, before the next round")


def check_other_text_starts_afresh(decoder, k: int = 4, answers=None) -> None:
    """Drafting on a text that does not extend what the draft's cache holds: that cache is not used.

    One decoder drafts after `[c0, a]`, then after `[c0, b]`: the second prefix shares only its first
    token with what the cache holds, so cached_prefix must start afresh (or the drafts come from the
    other text's keys and values)."""
    script = zoo.scripted_script()
    cases = [([script.eos_chain[0], script.cycle[30]], k), ([script.eos_chain[0], script.cycle[40]], k)]
    answers = answers_or_recorded(answers)
    expected = [answers.draft_chain(prefix[-1], k) for prefix, _ in cases]
    runner = as_runner(decoder)
    [alone] = runner.run({"kind": "draft", "pair": "scripted", "cases": cases[1:]})
    require(alone.result["tokens"] == expected[1],
            f"generate_draft_tokens on {cases[1][0]} (a new decoder) returned {alone.result['tokens']}, expected the "
            f"draft's greedy tokens {expected[1]}: pass test_cached_exact first")
    after_other = (f"generate_draft_tokens on {cases[1][0]} right after drafting on {cases[0][0]} (whose cache shares "
                   "only its first token with it)")
    lesson = ("the draft's cache held the other text. A cache that does not hold the first tokens of input_ids must "
              "not be used: cached_prefix returns (None, 0) and the method starts afresh")
    try:
        _, second = runner.run({"kind": "draft", "pair": "scripted", "cases": cases})
    except Exception as e:  # the student's code fails on the mismatched cache: say why it was handed one
        raise CheckFailed(f"{after_other} raised {e}: {lesson}") from e
    require(second.result["tokens"] == expected[1],
            f"{after_other} returned {second.result['tokens']}, expected {expected[1]}: {lesson}")
