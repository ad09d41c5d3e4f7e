"""The course's oracle: every round of correct decoding on the `scripted` pair (and, from their models, on the other
zoo pairs), prompt lookup's drafts and rounds, and the adaptive-k schedule, computed by the instructor package and
never shipped to students.

    rounds = predict_rounds(last_token, k=4, max_tokens=24)  # DecodeResult of correct decoding on `scripted`
    ORACLE.lookup(ids, k)                                    # what checks.answers asks, answered live

The hidden checks pass `ORACLE` as the checks' `answers`; `answers.render_answers` runs the visible
checks with it to write the answers the student package reads as data.
"""

from __future__ import annotations

import torch

from specdec_kit import zoo
from specdec_kit.bench.runners import LOOKUP_NGRAM
from specdec_kit.checks.answers import AdaptiveRounds, ExactRounds, LookupAnswer
from specdec_kit.core.result import DecodeResult
from specdec_kit.core.timing import ForwardCosts
from specdec_kit.models.baseline import first_difference, zoo_greedy, zoo_model


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
        n_accepted, round_tokens = verify_scripted(current, drafts)
        tokens += round_tokens
        proposed.append(k_round)
        accepted.append(min(n_accepted, len(round_tokens)))
        if round_tokens[-1] == script.eos_id:
            break
        current = round_tokens[-1]
    return DecodeResult("", tokens, proposed, accepted)


def verify_scripted(current: int, drafts: list[int]) -> tuple[int, list[int]]:
    """A round's verification on `scripted` after token `current`: (accepted drafts, the tokens the round emits:
    those drafts and the target's own token, cut after an EOS)."""
    script = zoo.scripted_script()
    n_accepted, token = 0, current
    while n_accepted < len(drafts) and drafts[n_accepted] == script.target_next[token]:
        token = drafts[n_accepted]
        n_accepted += 1
    round_tokens = drafts[:n_accepted] + [script.target_next[token]]
    if script.eos_id in round_tokens:
        round_tokens = round_tokens[: round_tokens.index(script.eos_id) + 1]
    return n_accepted, round_tokens


def draft_chain(start: int, k: int) -> list[int]:
    """The scripted draft's k greedy tokens after `start`."""
    script = zoo.scripted_script()
    chain = [script.draft_next[start]]
    while len(chain) < k:
        chain.append(script.draft_next[chain[-1]])
    return chain


# ---------------------------------------------------------------------------------------------
# Prompt lookup


def lookup_match(ids: list[int], max_ngram_size: int = 3, latest: bool = True) -> tuple[int, int] | None:
    """(n, start) of an earlier occurrence ids[start:start + n] of ids' last n tokens, for the largest n <=
    max_ngram_size that occurs earlier: the latest occurrence, or the earliest (HF's) with `latest=False`."""
    for n in range(min(max_ngram_size, len(ids) - 1), 0, -1):
        starts = range(len(ids) - n)  # every start but the last n tokens' own
        for start in reversed(starts) if latest else starts:
            if ids[start:start + n] == ids[-n:]:
                return n, start
    return None


def lookup_drafts(ids: list[int], k: int, max_ngram_size: int = 3, latest: bool = True) -> list[int]:
    """Prompt lookup's drafts: the up to k tokens after `lookup_match`'s occurrence; [] if there is none."""
    match = lookup_match(ids, max_ngram_size, latest)
    return ids[sum(match):sum(match) + k] if match else []


def lookup_rounds(prompt_ids: list[int], expected: list[int], k: int, max_ngram_size: int = 3,
                  latest: bool = True) -> int:
    """The rounds prompt lookup takes to emit `expected` (the target's greedy tokens) after `prompt_ids`: each round
    looks up min(k, budget left - 1) drafts, keeps those the target agrees with and adds the target's own token."""
    done, rounds = 0, 0
    while done < len(expected):
        room = min(k, len(expected) - done - 1)
        drafts = lookup_drafts(prompt_ids + expected[:done], room, max_ngram_size, latest) if room > 0 else []
        agreed = first_difference(drafts, expected[done:done + len(drafts)])
        done, rounds = done + agreed + 1, rounds + 1
    return rounds


# ---------------------------------------------------------------------------------------------
# Adaptive k on the scripted pair


PRIOR_WEIGHT, PRIOR_RATE = 3.0, 0.75  # the schedule's prior: 3 drafts' worth of evidence at acceptance 0.75


def record_round(reached: list[int], rejected: list[int], drafted: int, n_accepted: int) -> None:
    """Count a round: drafts 1..min(n_accepted + 1, drafted) were checked (reached[j - 1] for draft j), and the one
    after the accepted ones was rejected if n_accepted < drafted (rejected[n_accepted])."""
    for j in range(min(n_accepted + 1, drafted)):
        reached[j] += 1
    if n_accepted < drafted:
        rejected[n_accepted] += 1


def round_rates(reached: list[int], rejected: list[int], costs: ForwardCosts, max_k: int,
                prior_weight: float = PRIOR_WEIGHT, prior_rate: float = PRIOR_RATE) -> list[float]:
    """Expected tokens per second of a round of k = 1..max_k drafts. Draft j survives with probability
    1 - hazard(j), hazard(j) = (rejected[j - 1] + w (1 - alpha)) / (reached[j - 1] + w), alpha the acceptance of
    all counted drafts with w = prior_weight drafts at prior_rate; a round of k yields 1 + the sum over j <= k of
    the chance that drafts 1..j all survive, and costs costs.round_seconds(k)."""
    checked, refused = sum(reached), sum(rejected)
    alpha = (checked - refused + prior_weight * prior_rate) / (checked + prior_weight)
    survival, tokens, rates = 1.0, 1.0, []
    for j in range(1, max_k + 1):
        survival *= 1 - (rejected[j - 1] + prior_weight * (1 - alpha)) / (reached[j - 1] + prior_weight)
        tokens += survival
        rates.append(tokens / costs.round_seconds(j))
    return rates


def schedule_k(reached: list[int], rejected: list[int], costs: ForwardCosts, max_k: int) -> int:
    """The adaptive schedule's next k: the one with the most expected tokens per second (the smallest on a tie)."""
    rates = round_rates(reached, rejected, costs, max_k)
    return rates.index(max(rates)) + 1


def predict_adaptive_rounds(last_token: int, k: int, max_tokens: int, costs: ForwardCosts,
                            max_k: int = 16) -> AdaptiveRounds:
    """What correct adaptive-k decoding does on `scripted` after `last_token`, starting at k, with forward `costs`.
    The draft is unsure (probability about 0.25, below the 0.4 threshold) of the token it proposes after a `flat`
    token and sure (about 0.99) elsewhere, so drafting stops right after that token."""
    script = zoo.scripted_script()
    tokens, proposed, accepted, ks, plans, counted, counts = [], [], [], [], [], [], []
    reached, rejected, fresh = [0] * max_k, [0] * max_k, False
    current = last_token
    while len(tokens) < max_tokens:
        planned = min(k, max_k, max_tokens - len(tokens) - 1)
        ks.append(k)
        plans.append(planned)
        drafts, token = [], current
        while len(drafts) < planned:
            unsure = token in script.flat
            token = script.draft_next[token]
            drafts.append(token)
            if unsure:
                break
        n_accepted, round_tokens = verify_scripted(current, drafts)
        tokens += round_tokens
        proposed.append(len(drafts))
        accepted.append(min(n_accepted, len(round_tokens)))
        counted.append(bool(drafts) and fresh)
        if counted[-1]:
            record_round(reached, rejected, len(drafts), n_accepted)
            k = schedule_k(reached, rejected, costs, max_k)
        if drafts:
            fresh = n_accepted < len(drafts)
        counts.append((tuple(reached), tuple(rejected)))
        if round_tokens[-1] == script.eos_id:
            break
        current = round_tokens[-1]
    return AdaptiveRounds(DecodeResult("", tokens, proposed, accepted), tuple(ks), tuple(plans), tuple(counted),
                          tuple(counts))




@torch.inference_mode()
def exact_rounds(pair: str, prompt: str, k: int, max_tokens: int) -> ExactRounds:
    """What correct greedy speculative decoding does on the zoo pair `pair`: the target's greedy tokens (the kit's
    own, `zoo_greedy`), in rounds of min(k, budget left - 1) drafts, the draft model's greedy tokens after the text
    so far, of which the prefix that equals the target's tokens is accepted, then the target's own token."""
    expected = list(zoo_greedy(pair, prompt, max_tokens))
    draft, tokenizer = zoo_model(pair, "draft")
    text = tokenizer(prompt, return_tensors="pt").input_ids
    tokens, proposed, accepted, drafts = [], [], [], []
    while len(tokens) < len(expected):
        ids, chain = torch.cat([text, torch.tensor([tokens], dtype=text.dtype)], dim=1), []
        for _ in range(min(k, max_tokens - len(tokens) - 1)):
            chain.append(int(draft(ids).logits[0, -1].argmax()))
            ids = torch.cat([ids, torch.tensor([[chain[-1]]], dtype=ids.dtype)], dim=1)
        target = expected[len(tokens):len(tokens) + len(chain)]
        n_accepted = first_difference(chain, target)
        round_tokens = expected[len(tokens):len(tokens) + n_accepted + 1]  # ends at EOS, where the target's text does
        tokens += round_tokens
        proposed.append(len(chain))
        accepted.append(min(n_accepted, len(round_tokens)))
        drafts.append(tuple(chain))
    return ExactRounds(DecodeResult("", tokens, proposed, accepted), tuple(drafts))


class Oracle:
    """The questions of `specdec_kit.checks.answers`, answered by computing them."""

    def draft_chain(self, start: int, k: int) -> list[int]:
        return draft_chain(start, k)

    def rounds(self, start: int, k: int, max_tokens: int) -> DecodeResult:
        return predict_rounds(start, k, max_tokens)

    def lookup(self, ids: list[int], k: int) -> LookupAnswer:
        orders = (True, False)  # the latest earlier occurrence, then the earliest (HF's)
        return LookupAnswer(tuple(tuple(lookup_drafts(ids, k, LOOKUP_NGRAM, latest)) for latest in orders),
                            tuple(lookup_match(ids, LOOKUP_NGRAM, latest) for latest in orders))

    def lookup_rounds(self, ids: list[int], expected: list[int], k: int) -> int:
        return lookup_rounds(ids, expected, k, LOOKUP_NGRAM)

    def adaptive_rounds(self, start: int, k: int, max_tokens: int, costs: ForwardCosts, max_k: int) -> AdaptiveRounds:
        return predict_adaptive_rounds(start, k, max_tokens, costs, max_k)

    def exact_rounds(self, pair: str, prompt: str, k: int, max_tokens: int) -> ExactRounds:
        return exact_rounds(pair, prompt, k, max_tokens)


ORACLE = Oracle()
