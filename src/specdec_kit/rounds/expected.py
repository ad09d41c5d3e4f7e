"""Correct decoding's rounds, to draw a decode's rounds over: from a verifier's records of a decode that never
returned, from the scripted pair's script, or from given drafts.
"""

from __future__ import annotations

from ..core.no_progress import no_token_cause
from ..core.result import DecodeResult
from .view import Round, Rounds


def verified_rounds(prompt_ids: list[int], verified: list[dict], decode) -> Rounds:
    """The rounds of a decode that never returned, as its verifier returned them (`no_progress.VerifyCall.record`: the
    text's length, the drafts, n_accepted, next_token), up to the first that added nothing to the text: the rounds
    it completed, and the one it was stuck in, marked with its cause (a token its verifier returned counts as
    dropped there). Forwards and caches are not known."""
    rounds, tokens = [], []
    for number, record in enumerate(verified):
        drafts, next_ids = record.get("drafts") or [], record.get("next") or []
        accepted = min(max(record.get("accepted") or 0, 0), len(drafts))
        later = verified[number + 1]["text"] if number + 1 < len(verified) else None
        stalled = later is not None and later == record.get("text")  # every later round repeats this one
        kept = [] if stalled else next_ids[:1]
        cause = no_token_cause(verified[:number + 1]) if not kept and (stalled or later is None) else ""
        rounds.append(Round(list(drafts), len(drafts), accepted, kept[0] if kept else None, {},
                            {"target": None, "draft": None}, cause))
        tokens += [*drafts[:accepted], *kept]
        if stalled:
            break
    result = DecodeResult("", tokens, [r.proposed for r in rounds], [r.accepted for r in rounds])
    return Rounds(list(prompt_ids), result, rounds, "", decode, "the decode never returned: its rounds as its "
                                                                "verifier returned them, up to the one it was stuck in")


def scripted_rounds(prompt_ids: list[int], expected: DecodeResult, max_tokens: int, decode,
                    cached: bool = True) -> Rounds:
    """Correct decoding's rounds of `expected` on the `scripted` pair, whose draft proposes `draft_next` of the
    token before, whatever came earlier (`zoo.Script`); with the caches a cached decoder keeps when `cached`."""
    from ..zoo import scripted_script

    script, text, drafts, position = scripted_script(), list(prompt_ids), [], 0
    for proposed, accepted in zip(expected.proposed, expected.accepted):
        chain, last = [], text[-1]
        for _ in range(proposed):
            last = script.draft_next[last]
            chain.append(last)
        drafts.append(chain)
        emitted = expected.token_ids[position:position + accepted + 1]
        position += len(emitted)
        text += emitted
    return correct_rounds(prompt_ids, expected, drafts, max_tokens, decode, {script.eos_id}, cached)


def correct_rounds(prompt_ids: list[int], expected: DecodeResult, drafts: list[list[int]], max_tokens: int, decode,
                   eos: set[int], cached: bool = True) -> Rounds:
    """Correct decoding's rounds of `expected`, whose round r proposed `drafts[r]`; with the caches a cached decoder
    keeps when `cached`."""
    text, rounds, position = list(prompt_ids), [], 0
    for chain, proposed, accepted in zip(drafts, expected.proposed, expected.accepted):
        emitted = expected.token_ids[position:position + accepted + 1]
        position += len(emitted)
        text += emitted
        # the target's cache holds all but its last token; the draft's also lacks the last draft after a full
        # acceptance (a draft forward feeds the token before the one it proposes)
        full = 0 < proposed == accepted < len(emitted)
        held = {"target": len(text) - 1, "draft": len(text) - 1 - full} if cached else {"target": None, "draft": None}
        rounds.append(Round(list(chain), proposed, accepted, emitted[accepted] if len(emitted) > accepted else None,
                            {"target": 1, "draft": proposed}, held))
    if rounds:
        rounds[-1].cache_after = {"target": None, "draft": None}  # no round follows to show them
    for r, round_ in enumerate(rounds):
        if not any(later.proposed for later in rounds[r + 1:]):
            round_.cache_after["draft"] = None  # no later draft forward shows it
    ended = ("EOS" if expected.token_ids and expected.token_ids[-1] in eos else
             "budget" if len(expected.token_ids) >= max_tokens else "")
    return Rounds(list(prompt_ids), expected, rounds, ended, decode)
