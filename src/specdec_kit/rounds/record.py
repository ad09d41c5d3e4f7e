"""A decode's rounds read off its forwards, as the kit saw them: what the draft proposed, what the target kept.

    rounds = record_rounds(decoder, "The future of", max_tokens=40, num_speculative_tokens=4)
    rounds            # in Jupyter or Colab: one line per round, as self-contained HTML
    rounds.save("rounds.html")

`record_rounds` runs the decoder's `speculative_decode` (`speculative_sample` when sampling settings are given) with
forward recorders on both models, and builds the rounds from the `DecodeResult` and the forwards alone, so it needs
nothing of the decoder's own making: a round's verify forward feeds the text the target's cache lacks and then that
round's drafts, so its last `proposed[r]` ids are the drafts, accepted or not; the next round's forwards show how much
of each cache the rollback kept.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ..core.result import DecodeResult
from ..core.timing import ForwardCall, ForwardRecorder
from .view import Round, Rounds


def record_rounds(decoder, prompt: str, max_tokens: int = 40, num_speculative_tokens: int = 4,
                  **sampling) -> Rounds:
    """Decode `prompt` with `decoder`, recording both models' forwards, and return its rounds."""
    models = {"target": decoder.target_model, "draft": getattr(decoder, "draft_model", None)}
    with contextlib.ExitStack() as stack:
        calls = {role: stack.enter_context(ForwardRecorder(model, record_ids=True))
                 for role, model in models.items() if model is not None}
        if sampling:
            result = decoder.speculative_sample(prompt, max_tokens, num_speculative_tokens, **sampling)
        else:
            result = decoder.speculative_decode(prompt, max_tokens, num_speculative_tokens)
    tokenizer = decoder.target_tokenizer
    prompt_ids = tokenizer(prompt).input_ids
    return build_rounds(prompt_ids, result, calls.get("target", []), calls.get("draft", []), max_tokens,
                        eos_ids(decoder.target_model, tokenizer), tokenizer.decode)


def build_rounds(prompt_ids: list[int], result: DecodeResult, target: list[ForwardCall], draft: list[ForwardCall],
                 max_tokens: int, eos: set[int], decode: Callable[[list[int]], str]) -> Rounds:
    """The rounds of `result` from the target's and the draft's forwards (one target forward a round)."""
    one_each = len(target) == len(result.proposed)
    note = "" if one_each else (f"the target ran {len(target)} forwards in {len(result.proposed)} rounds, not one a "
                                "round: the drafts could not be read off them")
    rounds, position = [], 0
    caching = {"target": any(c.cached_tokens for c in target), "draft": any(c.cached_tokens for c in draft)}
    for r, (proposed, accepted) in enumerate(zip(result.proposed, result.accepted)):
        drafts = [] if proposed == 0 else None
        added = accepted + 1  # without the forwards: the accepted drafts and one target token
        forwards, caches = {}, {"target": None, "draft": None}  # not seen without one target forward a round
        if one_each:
            call, later = target[r], target[r + 1] if r + 1 < len(target) else None
            if proposed and call.input_ids is not None and len(call.input_ids) >= proposed:
                drafts = list(call.input_ids[-proposed:])
            if later:  # what the round added: up to the text the next round continues (its cache and feed, less
                # that round's drafts)
                added = later.cached_tokens + later.new_tokens - result.proposed[r + 1] - len(prompt_ids) - position
            start = target[r - 1].started if r else float("-inf")
            next_draft = next((c for c in draft if c.started > call.started), None)
            forwards = {"target": 1, "draft": sum(start < c.started < call.started for c in draft)}
            caches = {"target": later and later.cached_tokens if caching["target"] else None,  # none kept: no cache
                      "draft": next_draft and next_draft.cached_tokens if caching["draft"] else None}
        emitted = result.token_ids[position:position + max(added, 0)]
        position += len(emitted)
        rounds.append(Round(drafts, proposed, accepted, emitted[accepted] if len(emitted) > accepted else None,
                            forwards, caches))
    ended = ("EOS" if result.token_ids and result.token_ids[-1] in eos else
             "budget" if len(result.token_ids) >= max_tokens else "")
    return Rounds(list(prompt_ids), result, rounds, ended, decode, note)


def eos_ids(model, tokenizer) -> set[int]:
    found = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    found = found if isinstance(found, list) else [found]
    return {i for i in [*found, tokenizer.eos_token_id] if i is not None}
