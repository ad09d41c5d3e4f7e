"""The check of prompt lookup: drafts looked up in the text so far, verified by the target as in Part 1.

Three things, each judged by the kit: the drafts `generate_draft_tokens` returns on given sequences (the
latest or the earliest earlier occurrence of the largest matching n-gram, both correct); the output against
the target's greedy output on the `tiny` pair, whose text repeats itself after a few dozen tokens; and on the
context-free `scripted` pair, prompts that hold a stretch of the text to come, where the rounds lookup needs
are known in advance (`answers.lookup_rounds`): the kit counts the target's forwards, and a decoder that
misses a match makes more. No draft model may run.
"""

from __future__ import annotations

from .. import zoo
from ..models.baseline import zoo_greedy, zoo_tokenizer
from .answers import answers_or_recorded
from .core import as_runner, decoded, require_seen_forwards
from .decoding import check_exact, how_tokens_differ
from .failure import CheckFailed, require

# (ids, k) with what each shows; the expected drafts are `answers.lookup`'s (max_ngram_size 3, the decoder's default).
DRAFT_CASES = (
    ([5, 6, 7, 8, 5, 6], 2),  # [8, 5, 6] occurs nowhere earlier, [5, 6] does: [7, 8]
    ([1, 2, 9, 3, 2, 9, 1, 2, 9], 2),  # the 3-gram [1, 2, 9] wins over the later 2-gram [2, 9]: [3, 2]
    ([7, 1, 7, 2, 7], 2),  # only the 1-gram [7] matches, twice: [2, 7] (latest) or [1, 7] (earliest)
    ([1, 2, 3, 9, 1, 2, 3], 4),  # the drafts may run into the last n tokens: [9, 1, 2, 3]
    ([4, 4, 4, 4], 3),  # one token follows the only earlier [4, 4, 4]: [4]
    ([1, 2, 3, 4], 3),  # nothing repeats: no drafts, shape (1, 0)
)
TINY_PROMPTS = ("The future of Artificial Intelligence is", "def fibonacci(n):\n")
TINY_K, TINY_TOKENS = (2, 5), 40
# Scripted prompts: the cycle's tokens [start, start + stretch) and then `start` again, so that the text to come
# repeats the stretch: (cycle index of the start, stretch length, k, max_tokens).
SCRIPTED_CASES = ((10, 12, 4, 20), (30, 6, 3, 16), (50, 9, 8, 24))


def scripted_prompt_ids(start: int, stretch: int) -> list[int]:
    cycle = zoo.scripted_script().cycle
    return [*cycle[start:start + stretch], cycle[start]]


def check_lookup(decoder, draft_cases=DRAFT_CASES, tiny_pair: str = "tiny", tiny_prompts=TINY_PROMPTS,
                 scripted_cases=SCRIPTED_CASES, answers=None) -> None:
    runner, answers = as_runner(decoder), answers_or_recorded(answers)
    check_lookup_drafts(runner, draft_cases, answers)
    check_exact(runner, tiny_pair, tiny_prompts, TINY_K, TINY_TOKENS, what="prompt lookup's", draft_free=True,
                advice="Drafts of any length n <= k (0 too) go through the same verification, append and rollback "
                       "as Part 2's.")
    check_lookup_rounds(runner, scripted_cases, answers)


def check_lookup_drafts(runner, cases, answers) -> None:
    for (ids, k), outcome in zip(cases, runner.run({"kind": "draft", "pair": "scripted", "cases": list(cases)})):
        got = outcome.result["tokens"]
        require(outcome.result["type"] == "Tensor" and outcome.result["shape"] == [1, len(got)],
                f"generate_draft_tokens must return a tensor of shape (1, n) with n <= k, got "
                f"{outcome.result['shape'] or outcome.result['type']} after {ids}")
        answer = answers.lookup(ids, k)
        correct = [list(drafts) for drafts in answer.drafts]
        if got not in correct:
            expected = " or ".join(dict.fromkeys(map(str, correct)))
            raise CheckFailed(f"drafts looked up after {ids} with k={k}: expected {expected}, got {got}. "
                              f"{why_drafts_differ(ids, k, got, answer.matches)}")


def why_drafts_differ(ids: list[int], k: int, got: list[int], matches) -> str:
    """The likely mistake behind drafts that are neither correct answer, given the correct `matches` (n, start)."""
    matches = [m for m in matches if m]
    if not got and matches:
        return ("The last tokens do occur earlier. The last n tokens themselves are not an earlier occurrence (nothing "
                "follows them yet): search only the starts before them.")
    if any(got == ids[start:start + k] for _, start in matches):
        return "These are the matched tokens themselves: propose the tokens that follow the match."
    if len(got) > k:
        return f"Propose at most k = {k} tokens."
    return ("Try the largest n first (max_ngram_size, then smaller down to 1) and propose the tokens right after the "
            "occurrence of the last n tokens.")


def check_lookup_rounds(runner, cases, answers) -> None:
    tokenizer = zoo_tokenizer()
    requests, predicted = [], []
    for start, stretch, k, max_tokens in cases:
        ids = scripted_prompt_ids(start, stretch)
        prompt = tokenizer.decode(ids)
        expected = list(zoo_greedy("scripted", prompt, max_tokens))
        requests.append((prompt, max_tokens, k))
        predicted.append((expected, answers.lookup_rounds(ids, expected, k)))
    for (prompt, max_tokens, k), (expected, rounds), outcome in zip(
            requests, predicted, runner.run({"kind": "decode", "pair": "scripted", "cases": requests})):
        got = decoded(outcome, f"prompt {prompt!r}")
        require(got.token_ids == expected, f"k={k}, prompt {prompt!r}: the output must equal the target's greedy "
                                           f"output; {how_tokens_differ(got.token_ids, expected)}")
        require_seen_forwards(outcome)
        calls = len(outcome.forwards["target"])
        require(calls >= rounds, f"the kit saw {calls} target forward passes where prompt lookup takes {rounds} "
                                 "rounds: every forward must go through the model's own call, with its hooks in place")
        if calls > rounds:
            never = not any(got.proposed)
            raise CheckFailed(
                f"k={k}, max_tokens={max_tokens}, prompt {prompt!r}: the prompt holds a stretch of the text to come, "
                f"so lookup drafting takes {rounds} rounds of one target forward each, but the kit saw {calls}. "
                + ("Your decoder reported no drafts at all: look the last n tokens up in the earlier text, and "
                   "propose up to k tokens after the match." if never else
                   "Look for a missed match (the last n tokens looked up in the prompt and the text so far, largest n "
                   "first), a fully accepted round that drops the bonus token, or more than one target forward in "
                   "a round."))
