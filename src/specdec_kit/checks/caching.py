"""The checks of the cached decoder: no forward re-sends the prefix, no cache keeps a rejected draft, a method
called twice gives the same answer, and a cache of another text is not used.

    from specdec_kit import checks
    checks.check_cache_use(CachedSpeculativeDecoder)   # raises CheckFailed with what to fix

Judged from the forwards alone (how many tokens each fed, what its cache held), replayed against the text the
decode ended in.
"""

from __future__ import annotations

from .. import zoo
from ..models.baseline import prompt_for_token, zoo_tokenizer
from .answers import answers_or_recorded
from .core import as_runner, decoded, require_seen_forwards
from .decoding import failed_decodes_shown, first_after, how_tokens_differ, rounds_shown, scripted_case
from .failure import CheckFailed, require
from .outcomes import CaseOutcome
from .steps import verify_answers


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
    verified = verify_answers(runner, cases)
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
