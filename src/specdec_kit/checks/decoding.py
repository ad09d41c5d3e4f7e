"""The checks of the decoding loop: exact tokens, EOS and the budget, the per-round counts.

    from specdec_kit import checks
    checks.check_exact(SpeculativeDecoder)             # each (prompt, k) decode equals the target's greedy output

Each runs whole decodes through probes and judges their tokens, counts and forwards against `answers` on the
`scripted` pair and against the target's own greedy decoding elsewhere. Where a decode fails, the failure carries
its rounds and correct decoding's (`rounds_shown`, `failed_decodes_shown`) for a notebook's test cell to draw.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import contextmanager

from .. import zoo
from ..core.no_progress import NoProgress
from ..core.result import DecodeResult
from ..models.baseline import first_difference, prompt_for_token, zoo_greedy, zoo_tokenizer
from ..rounds.expected import correct_rounds, scripted_rounds, verified_rounds
from ..rounds.record import build_rounds
from ..rounds.view import Rounds
from ..rounds.view import first_difference as first_round_difference
from .answers import answers_or_recorded, recorded
from .core import as_runner, decoded, require_seen_forwards
from .failure import CheckFailed, require
from .outcomes import CaseOutcome
from .steps import K_VALUES

PROMPTS = ("The future of Artificial Intelligence is", "Write the lyrics to the song 'Happy Birthday'.",
           "def fibonacci(n):\n")
EXACT_TOKENS = 30
# check_exact's own cases, whose correct rounds the release records (answers.exact_rounds) for a test cell to draw
EXACT_QUESTIONS = tuple(("tiny", prompt, k, EXACT_TOKENS) for prompt in PROMPTS for k in K_VALUES)


def how_tokens_differ(got: list[int], expected: list[int]) -> str:
    """Too many tokens, too few, or where they part: the words a student can act on. Every count it names is at most
    target greedy's length (the grader's own), never how many more the student's code returned."""
    if len(got) > len(expected) and got[:len(expected)] == expected:
        return (f"too many tokens: more than the {len(expected)} new tokens after which target greedy stops (the "
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
                                      f"(max_tokens=10, got {'more' if len(got.token_ids) > 10 else 'fewer'} "
                                      f"tokens: {got.token_ids})")


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


def first_after(calls, marks) -> set[int]:
    """Indices of `calls` that are the first to start after one of `marks` (calls of another model)."""
    firsts = set()
    for mark in marks:
        later = [i for i, call in enumerate(calls) if call.started > mark.started]
        if later:
            firsts.add(later[0])
    return firsts
