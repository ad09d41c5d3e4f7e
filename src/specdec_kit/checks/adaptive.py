"""The check of adaptive k: how many drafts each round makes, read off the target's forwards by the kit.

On the context-free `scripted` pair, with forward prices given to the decoder (`COSTS`), every round of correct
adaptive decoding is known in advance (`answers.adaptive_rounds`): the draft is wrong after some tokens
(a rejection), unsure of its proposal after others (probability 0.25 against the 0.4 threshold: drafting stops),
and right and sure elsewhere; k comes from the counts of the counted rounds (those right after a rejection) and
the prices. The kit reads each round's drafts from the target's forward calls (the positions a
round's forward covers beyond the text so far), never from the decoder's report, and names the rule behind the
first round that differs; both caches are judged as Part 2's are (`judge_cache_use`). On the `tiny` pair the output
must equal the target's greedy output.
"""

from __future__ import annotations

from dataclasses import asdict

from .. import zoo
from ..core.timing import ForwardCosts
from ..models.baseline import prompt_for_token, zoo_tokenizer
from .answers import answers_or_recorded
from .caching import judge_cache_use
from .core import as_runner, decoded, require_seen_forwards
from .decoding import check_exact, how_tokens_differ
from .failure import CheckFailed, require

THRESHOLD = 0.4  # AdaptiveSpeculativeDecoder's default confidence_threshold, which the probes construct it with
MAX_K = 16  # and its default max_k
# The prices the scripted cases give the decoder: a draft step 0.1, a target forward 1 + 0.02 per token fed.
COSTS = ForwardCosts(draft=0.1, verify=tuple(1 + 0.02 * n for n in range(1, MAX_K + 2)))
# (cycle index of the start token, first k, max_tokens): starts whose rounds meet rejections, unsure drafts, and
# counted rounds after which k grows and shrinks.
CASES = ((0, 4, 40), (23, 1, 40), (57, 6, 32))
TINY_PROMPTS = ("The future of Artificial Intelligence is", "def fibonacci(n):\n")
TINY_K, TINY_TOKENS = (1, 5), 40


def check_adaptive(decoder, cases=CASES, costs: ForwardCosts = COSTS, tiny_pair: str = "tiny",
                   tiny_prompts=TINY_PROMPTS, answers=None) -> None:
    runner = as_runner(decoder)
    check_adaptive_rounds(runner, cases, costs, answers_or_recorded(answers))
    # Part 1's exactness check, first k as k; given prices spare the decoder measuring its own for every case list.
    check_exact(runner, tiny_pair, tiny_prompts, TINY_K, TINY_TOKENS, init={"forward_costs": asdict(costs)})


def check_adaptive_rounds(runner, cases, costs: ForwardCosts, answers, max_k: int = MAX_K) -> None:
    cycle = zoo.scripted_script().cycle
    requests = [(prompt_for_token(cycle[start]), max_tokens, k) for start, k, max_tokens in cases]
    init = {"forward_costs": asdict(costs), **({"max_k": max_k} if max_k != MAX_K else {})}
    outcomes = runner.run({"kind": "decode", "pair": "scripted", "cases": requests, "ids": True, "init": init})
    for (start, k, max_tokens), (prompt, _, _), outcome in zip(cases, requests, outcomes):
        rounds = answers.adaptive_rounds(cycle[start], k, max_tokens, costs, max_k)
        expected, got = rounds.result, decoded(outcome, f"prompt {prompt!r}")
        prices = ", ".join(f"{v:g}" for v in costs.verify[:3])
        what = (f"first k={k}, max_k={max_k}, max_tokens={max_tokens}, prompt {prompt!r}, forward_costs: a draft step "
                f"{costs.draft:g}, a target forward on 1, 2, 3, ... tokens {prices}, ...")
        require(got.token_ids == expected.token_ids, f"{what}: the output must equal the target's greedy output; "
                                                     f"{how_tokens_differ(got.token_ids, expected.token_ids)}")
        require_seen_forwards(outcome)
        prompt_ids = zoo_tokenizer()(prompt).input_ids
        try:  # both caches kept across rounds and cropped after a rejection, as Part 2's: first, as the rounds are
            judge_cache_use(outcome, prompt_ids + got.token_ids, max_k)  # read off forwards that trust the caches
        except CheckFailed as e:
            raise CheckFailed(f"{what}: {e}") from None
        judge_rounds(what, rounds, outcome.forwards["target"], len(prompt_ids))


def judge_rounds(what: str, rounds, calls, prompt_len: int) -> None:
    """Each round's drafts from the target's forwards alone: a round's forward covers the text so far (on its cache
    or fed whole) and the drafts. Up to the first round that differs the text is the expected one; a forward on a
    cache also shows how much text the round before it left (the cache holds all of it but the last token)."""
    expected, length = rounds.result, prompt_len
    for r, call in enumerate(calls[:len(expected.proposed)]):
        drafted = call.cached_tokens + call.new_tokens - length
        if drafted != expected.proposed[r]:
            raise CheckFailed(f"{what}: round {r} should draft {expected.proposed[r]} tokens, the kit saw {drafted} "
                              f"(read off the target's forwards; the rounds should draft {list(expected.proposed)}). "
                              f"{why_rounds_differ(rounds, r, drafted)}")
        emitted = expected.accepted[r] + 1
        length += emitted
        following = calls[r + 1] if r + 1 < len(calls) else None
        if following is not None and following.cached_tokens and following.cached_tokens + 1 < length:
            short = length - following.cached_tokens - 1
            raise CheckFailed(f"{what}: round {r} should add {emitted} tokens to the text ({expected.accepted[r]} "
                              f"accepted drafts and the target's own token), but the next round continued a text "
                              f"{short} shorter: every round appends its accepted drafts and the target's own token "
                              "(the correction, or the bonus token after a full acceptance)")
    require(len(calls) == len(expected.proposed),
            f"{what}: the kit saw {len(calls)} target forward passes where correct adaptive decoding takes "
            f"{len(expected.proposed)} rounds of one each")


def why_rounds_differ(rounds, r: int, drafted: int) -> str:
    """The rule behind round r's drafts, the first that differ from correct adaptive decoding's."""
    expected = rounds.result.proposed
    unsure = expected[r] < rounds.planned[r]
    if unsure and drafted > expected[r]:
        return (f"In round {r} the draft gave its token {expected[r]} a probability of about 0.25, below "
                f"confidence_threshold = {THRESHOLD}: stop drafting right after such a token.")
    if r == 0:
        return f"The first round drafts num_speculative_tokens = {rounds.k[0]} tokens (or fewer at a confidence stop)."
    steps = "; ".join(schedule_step(rounds, i) for i in range(max(0, r - 3), r))
    return (f"The schedule, from round {max(0, r - 3)} (k = {rounds.k[max(0, r - 3)]}): {steps}; so round {r} plans "
            f"{rounds.planned[r]} drafts (k, at most the budget's room). next_k picks the k with the most expected "
            "tokens per costs.round_seconds(k): k draft steps and a target forward on k + 1 tokens.")


def schedule_step(rounds, i: int) -> str:
    """What round i did to k, in the words of the rule."""
    drafted, accepted = rounds.result.proposed[i], rounds.result.accepted[i]
    outcome = f"round {i} accepted {accepted} of {drafted} drafts"
    if not rounds.counted[i]:
        return (f"{outcome} but does not follow a rejection (it is the first round or follows a fully accepted "
                f"one), so it is not counted and k stays {rounds.k[i + 1]}")
    reached, rejected = rounds.counts[i]
    last = max((j for j, n in enumerate(reached) if n), default=0) + 1
    return (f"{outcome} and is counted (right after a rejection): reached = "
            f"{list(reached[:last])}, rejected = {list(rejected[:last])} (zeros after), so next_k gives "
            f"k = {rounds.k[i + 1]}")
