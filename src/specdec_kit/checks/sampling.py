"""The check of speculative sampling: the distribution of what a sampler emits against the target's own.

On the `sampling` pair (`zoo.sampling_script`: target and draft distributions set by hand, the draft's mass
deliberately elsewhere) the probe samples `SAMPLES` continuations per case, one seeded generator each, and
the check compares the first two tokens with the target's exact warped distribution, computed here from the
kit's own copy of the target's logits (nothing is sampled on the kit's side). Two chi-square goodness-of-fit
tests per case (scipy.stats.chisquare): the first token alone, then the two-token joint distribution. Bins
whose expected count is below `MIN_EXPECTED` are pooled (and the pool joins the smallest bin if it is still
below), a token the warped target gives probability 0 fails outright, and a test fails when its p-value is
below `ALPHA`. Seeded, so a given sampler always gets the same verdict; the catalogued mistakes move the
statistic to hundreds where the threshold is about 20.

The output distribution is the same for any draft distribution, so it cannot show drafts sampled from the wrong
q (only the acceptance rate drops). The greedy limit can: with a top_p that keeps one token, p and q are
one-hot and speculative sampling is greedy speculative decoding, whose rounds on the scripted pair are known.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cache

import torch
from scipy.stats import chisquare

from .. import zoo
from ..core.sampling import warp
from ..models.baseline import prompt_for_token, zoo_model, zoo_tokenizer
from .answers import answers_or_recorded
from .caching import judge_cache_use
from .core import as_runner, require_seen_forwards
from .decoding import too_many_forwards
from .failure import CheckFailed, require

PAIR = "sampling"
SAMPLES = 200  # continuations per case: the forgotten residual's statistic is about 0.2 per sample, 40 here
ALPHA = 1e-4  # a correct sampler fails a test with this probability over seeds
MIN_EXPECTED = 5.0
ZERO = 1e-9  # probabilities below this are treated as 0 (top-p's cut, and the pair's ~1e-11 leaks)
GREEDY_TOP_P = 1e-6  # warp keeps only the most likely token: p and q are one-hot


@dataclass(frozen=True)
class SamplingCase:
    """One sampling setting. The first round drafts k tokens (max_tokens = k + 1 leaves room for them all);
    with k = 1 the second token is the bonus token after an accepted draft."""

    prompt: str
    k: int
    temperature: float
    top_p: float
    seed: int

    @property
    def max_tokens(self) -> int:
        return self.k + 1

    def describe(self) -> str:
        return f"k={self.k}, temperature={self.temperature}, top_p={self.top_p}, prompt {self.prompt!r}"


CACHE_CASE = SamplingCase("The future of Artificial Intelligence is", 3, 1.0, 1.0, seed=3)
CACHE_TOKENS = 24  # several rounds, rejections among them: the draft's mass lies elsewhere on this pair
CASES = (SamplingCase("The future of Artificial Intelligence is", 2, 1.0, 1.0, seed=1),
         SamplingCase("The future of Artificial Intelligence is", 1, 0.7, 0.8, seed=2))


def check_sampling(decoder, cases: tuple[SamplingCase, ...] = CASES, samples: int = SAMPLES,
                   cache_case: SamplingCase = CACHE_CASE, greedy_cases: tuple[tuple[int, int, int], ...] | None = None,
                   answers=None) -> None:
    runner = as_runner(decoder)
    requests = [[c.prompt, c.max_tokens, c.k, c.temperature, c.top_p, samples, c.seed] for c in cases]
    outcomes = runner.run({"kind": "sample", "pair": PAIR, "cases": requests})
    for case, outcome in zip(cases, outcomes):
        result = outcome.result
        require(result["type"] == "DecodeResult",
                f"{case.describe()}: speculative_sample must return a specdec_kit.DecodeResult, got {result['type']}")
        lengths = Counter(len(tokens) for tokens in result["samples"])
        require(set(lengths) == {case.max_tokens},
                f"{case.describe()}: with max_tokens={case.max_tokens} every sample must have {case.max_tokens} "
                f"tokens (this pair never emits EOS), got lengths {dict(lengths)}")
        judge_case(case, [tuple(tokens[:2]) for tokens in result["samples"]])
    check_sampler_cache(runner, cache_case)
    check_greedy_limit(runner, greedy_cases, answers)


def check_greedy_limit(runner, cases: tuple[tuple[int, int, int], ...] | None = None, answers=None) -> None:
    """At top_p = GREEDY_TOP_P the sampler must decode as the greedy cached decoder does, round for round, on the
    scripted pair's cases (start token, k, max_tokens): each draft is the draft's most likely token after the text
    before it, accepted iff it is the target's. Judged by the tokens and the target forwards the kit counted (the
    rounds' own counts are test_counts' to judge). At k = 2 a fully accepted round ends where the draft's next token
    depends on which position of its two-token forward its logits are read at (at k = 3, 4 or 6 the script's
    rejections line the rounds up so that it does not)."""
    answers = answers_or_recorded(answers)
    cases = cases or tuple((start, 2, 24) for start in zoo.scripted_script().cycle[10:12])
    outcomes = runner.run({"kind": "sample", "pair": "scripted", "cases": [
        [prompt_for_token(start), max_tokens, k, 1.0, GREEDY_TOP_P, 1, seed]
        for seed, (start, k, max_tokens) in enumerate(cases)]})
    for (start, k, max_tokens), outcome in zip(cases, outcomes):
        where = (f"sampling prompt {prompt_for_token(start)!r} on the scripted pair with top_p={GREEDY_TOP_P:g} "
                 f"(one token kept: p and q one-hot), k={k}, max_tokens={max_tokens}")
        require(outcome.result["type"] == "DecodeResult" and outcome.result["samples"],
                f"{where}: speculative_sample must return a specdec_kit.DecodeResult, got {outcome.result['type']}")
        expected = answers.rounds(start, k, max_tokens)
        require(outcome.result["samples"][0] == expected.token_ids,
                f"{where}: speculative sampling of one-hot distributions is greedy decoding; expected the target's "
                f"greedy tokens {expected.token_ids}, got {outcome.result['samples'][0]}")
        require_seen_forwards(outcome)
        require(len(outcome.forwards["target"]) == expected.rounds,
                f"{where}: {too_many_forwards(outcome, expected)}. With one-hot p and q each draft is the draft's most "
                "likely token and is accepted iff it is the target's, so the rounds are greedy speculative decoding's: "
                "sample each draft from q at the position right after the text it extends (the last logits of the "
                "draft's forward, also when that forward feeds two tokens after a fully accepted round).")


def check_sampler_cache(runner, case: SamplingCase, max_tokens: int = CACHE_TOKENS) -> None:
    """One longer sample, judged by its forwards as test_cache_use judges the cached decoder's: the sampler keeps
    both caches across rounds and crops them after a rejection."""
    [outcome] = runner.run({"kind": "sample", "pair": PAIR, "ids": True, "cases": [
        [case.prompt, max_tokens, case.k, case.temperature, case.top_p, 1, case.seed]]})
    require(outcome.result["type"] == "DecodeResult" and outcome.result["samples"],
            f"{case.describe()}: speculative_sample must return a specdec_kit.DecodeResult with token_ids, got "
            f"{outcome.result['type'] if outcome.result['type'] != 'DecodeResult' else 'one without token ids'}")
    text = zoo_tokenizer(PAIR)(case.prompt).input_ids + list(outcome.result["samples"][0])
    try:
        judge_cache_use(outcome, text, case.k)
    except CheckFailed as e:
        raise CheckFailed(f"sampling {max_tokens} tokens, {case.describe()}: {e}") from None


def judge_case(case: SamplingCase, pairs: list[tuple[int, int]]) -> None:
    """Raise CheckFailed, naming the likely mistake, if the sampled first tokens or token pairs do not fit."""
    p_first, p_joint = exact_distributions("target", case.prompt, case.temperature, case.top_p)
    first = [a for a, _ in pairs]
    p_value, where = goodness_of_fit(first, p_first)
    if p_value < ALPHA:
        raise CheckFailed(f"{case.describe()}: the first sampled token does not follow the target's warped "
                          f"distribution ({where}). {diagnose_first(case, first, p_first)}")
    p_value, where = goodness_of_fit(pairs, p_joint)
    if p_value < ALPHA:
        second = ("With k=1 the second token is the bonus token after an accepted draft (or the target's own token "
                  "in a round with no room for drafts): sample it from the target's warped p at the position after "
                  "the last draft, never from the draft's q." if case.k == 1 else
                  "The second token is the second draft, accepted with probability min(1, p/q) at its own position, "
                  "or the token sampled from the residual there.")
        raise CheckFailed(f"{case.describe()}: the first token follows the target's distribution but the first two "
                          f"together do not ({where}). {second}")


def diagnose_first(case: SamplingCase, first: list[int], p_first: dict) -> str:
    """What a first-token distribution that fails says about the sampler."""
    top = max(p_first, key=p_first.get)
    if Counter(first)[top] >= 0.99 * len(first) and p_first[top] < 0.9:
        return (f"Nearly every sample starts with the target's most likely token {top} (probability "
                f"{p_first[top]:.2f}): the drafts are verified greedily. Accept draft x with probability "
                "min(1, p(x)/q(x)) using a uniform random number, and sample the target's token instead of "
                "taking its argmax.")
    q_first, _ = exact_distributions("draft", case.prompt, case.temperature, case.top_p)
    from_p = correction_from_p(p_first, q_first)
    if goodness_of_fit(first, from_p)[0] >= ALPHA:
        return ("It fits what sampling the correction from p itself gives: after a rejection, sample from the "
                "residual max(0, p - q), normalised, not from p.")
    return ("Check, in order: drafts sampled from the draft's warped q; acceptance with probability min(1, p/q) "
            "at each draft's own position; the residual max(0, p - q) after a rejection; p and q both warped with "
            "the same temperature and top_p (specdec_kit.core.sampling.warp); every random number from the generator.")


def correction_from_p(p: dict, q: dict) -> dict:
    """The first token's distribution when the correction after a rejection is sampled from p: min(p, q) kept,
    the rest of the mass spread as p."""
    kept = {x: min(p.get(x, 0.0), q.get(x, 0.0)) for x in set(p) | set(q)}
    rejected = 1.0 - sum(kept.values())
    return {x: kept.get(x, 0.0) + rejected * p.get(x, 0.0) for x in kept}


def goodness_of_fit(observed: list, expected: dict) -> tuple[float, str]:
    """(p-value, what the test saw) of the chi-square test of `observed` outcomes against `expected`
    probabilities, bins below MIN_EXPECTED pooled; an outcome of probability 0 gives p-value 0."""
    counts, n = Counter(observed), len(observed)
    impossible = {x: c for x, c in counts.items() if expected.get(x, 0.0) < ZERO}
    if impossible:
        x, c = max(impossible.items(), key=lambda item: item[1])
        return 0.0, f"{x} came up {c} times in {n} samples where its probability is 0"
    total = sum(expected.values())
    ranked = sorted(expected, key=expected.get, reverse=True)
    kept = [x for x in ranked if n * expected[x] / total >= MIN_EXPECTED]
    pooled = [x for x in ranked if x not in kept]
    f_exp = [n * expected[x] / total for x in kept]
    f_obs = [counts[x] for x in kept]
    pool_exp, pool_obs = sum(n * expected[x] / total for x in pooled), sum(counts[x] for x in pooled)
    if pool_exp >= MIN_EXPECTED or not kept:
        f_exp.append(pool_exp)
        f_obs.append(pool_obs)
    else:
        f_exp[-1] += pool_exp
        f_obs[-1] += pool_obs
    if len(f_exp) < 2:
        return 1.0, "one outcome only"
    statistic, p_value = chisquare(f_obs, f_exp)
    worst = max(range(len(kept)), key=lambda i: abs(f_obs[i] - f_exp[i]) / f_exp[i] ** 0.5, default=None)
    seen = "" if worst is None else (f"; {kept[worst]} came up {f_obs[worst]} times where {f_exp[worst]:.0f} "
                                     "were expected")
    return float(p_value), (f"chi-square {statistic:.1f} over {len(f_exp)} bins, {n} samples, p-value "
                            f"{p_value:.2g} < {ALPHA:g}{seen}")


@cache
def exact_distributions(role: str, prompt: str, temperature: float, top_p: float) -> tuple[dict, dict]:
    """The `sampling` pair's `role` model: ({x1: P(x1)}, {(x1, x2): P(x1, x2)}) of its first two sampled tokens
    after `prompt`, from its own warped logits."""
    model, tokenizer = zoo_model(PAIR, role)
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        first = _support(warp(model(ids).logits[0, -1], temperature, top_p))
        joint = {}
        for x1, p1 in first.items():
            after = _support(warp(model(torch.cat([ids, torch.tensor([[x1]])], dim=1)).logits[0, -1],
                                  temperature, top_p))
            joint.update({(x1, x2): p1 * p2 for x2, p2 in after.items()})
    return first, joint


def _support(probs: torch.Tensor) -> dict[int, float]:
    return {int(x): float(probs[x]) for x in torch.nonzero(probs >= ZERO).flatten()}
