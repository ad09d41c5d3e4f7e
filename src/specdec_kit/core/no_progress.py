"""A decode that makes no progress, and why: `NoProgress` (raised at a target forward once a decode has made more
than any decode that ends could need) and how the kit tells the cause of a round that emits no token from what the
verifier returned (`VerifyCall`, `no_token_verdict`) or, where only forwards are seen, from them (`KeptTokens`).

    call = VerifyCall.of(args, kwargs, returned, forward)   # one verification, the slice of the logits it fits
    raise NoProgress(no_progress_message(forwards, max_tokens, describe_rounds(calls), no_token_verdict(call)))

A round that emits no token has one of two causes (`CAUSE_WORDS`), and every message about one names it in their
words.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .tracebacks import render


class NoProgress(BaseException):
    """A decode made more target forward passes than any decode that ends could need.

    Raised from the target's forward hook, so the loop stops in seconds instead of running on; a
    BaseException, so that a student's `except Exception` around a round cannot swallow it and loop on. In a
    notebook its traceback shows the cell that was run alone: the forward it was raised at is not the bug.
    """

    def _render_traceback_(self) -> list[str]:
        return render(self, first_only=True, why=": the kit stopped the decode at a target forward, which is not "
                                                  "where the bug is (the message says what the rounds returned)")


def no_progress_message(forwards: int, max_tokens: int, rounds: str = "", verdict: str = "") -> str:
    """NoProgress's words: what the last rounds returned (`rounds`), then what that means (`verdict`, where the last
    round shows why it emitted no token), else where to look in the loop."""
    advice = verdict or ("Every round must append the target's own token after the accepted drafts: the correction "
                         "after a rejection, the bonus token when every draft was accepted, and so also in a round "
                         "with no room left for drafts (k = 0)")
    return (f"speculative_decode made {forwards} target forward passes with max_tokens={max_tokens} and had not "
            f"returned: a round that emits no token repeats for ever. {rounds}{advice}")


# A round that emits no token has one of two causes, and every message about one names them in these words (the
# catalogue's test holds each catalogued bug's messages to its own cause's words, never the other's):
LATE = "late"  # verify_tokens_vectorized's slice of the target's logits starts at L, not L-1: k rows, not k+1
DROPPED = "dropped"  # the slice is right, but the target's own token (after a full acceptance, the bonus) is not kept
EITHER = "either"  # what the rounds show fits both
CAUSE_WORDS = {LATE: "starts one position late, at L instead of L-1", DROPPED: "drops the target's own token"}
UNTOLD = "do not show which"  # the words of a message that names both causes, the evidence fitting either
# Which slice of the target's logits a round's kept tokens fit (`fitted_slice`, `KeptTokens`): the right one (row
# i is the target's token after draft i-1), the one a position late, both, or neither (sampled tokens, another bug).
SLICES = ("L-1", "L", "both", "neither")
ROWS = ("next_token must hold the target's own token in every round: row n_accepted of the slice of the target's "
        "logits that starts at position L-1 (L = the text's length before the drafts), which has k+1 rows")


def slice_cause(slices) -> str:
    """The cause the rounds' slices (`SLICES`, None where unknown) show: LATE where some round fits the slice from L
    and every round that tells fits it, DROPPED for the slice from L-1, else EITHER."""
    told = {s for s in slices if s in SLICES} - {"both"}
    return {frozenset({"L"}): LATE, frozenset({"L-1"}): DROPPED}.get(frozenset(told), EITHER)


def no_token_verdict(call: VerifyCall | None, slices=()) -> str:
    """What a verification that returned no target token means: the cause that the decode's rounds (`slices`, each
    round's `VerifyCall.slice`) show, both where they fit either; "" where it returned one."""
    if call is None or call.next_ids is None or call.next_ids or call.drafts is None:
        return ""
    k = call.drafts
    if k == 0:
        lead, none = "That round added nothing", "none at all when k = 0"
    elif call.n_accepted == k:
        lead, none = "The bonus token is missing", "none for the bonus token"
    else:
        return ""
    late = f"A slice that {CAUSE_WORDS[LATE]}, has only k rows, {none}"
    cause = slice_cause(slices)
    if cause == LATE:
        return (f"{lead}: {ROWS}. {late}, and the rounds show such a slice: they kept the target's tokens one "
                "position on.")
    if cause == DROPPED:
        accepted = f"with all {k} drafts accepted" if k else "in a round with no drafts"
        return (f"{lead}: verify_tokens_vectorized {CAUSE_WORDS[DROPPED]} after a full acceptance. Its slice of the "
                f"target's logits is right (the rounds kept the target's own tokens), but {accepted} it returned no "
                f"next_token: {ROWS}, so after all k drafts row k, the bonus token (with k = 0 the round's only one).")
    return (f"{lead}: {ROWS}. {late}; a verifier whose slice is right but that {CAUSE_WORDS[DROPPED]} after a full "
            f"acceptance returns none as well: the rounds {UNTOLD}.")


def dropped_verdict(call: VerifyCall | None) -> str:
    """What a round means whose verification returned a target token although the next round ran on the same text:
    the loop did not append it; "" where it returned none."""
    if call is None or not call.next_ids or call.drafts is None or call.n_accepted is None:
        return ""
    token = ("the correction after a rejection" if call.n_accepted < call.drafts else
             "the bonus token after a full acceptance" + (", the only token of a round with k = 0" if call.drafts == 0
                                                           else ""))
    return (f"verify_tokens_vectorized returned the target's own token (next_token of shape (1, {len(call.next_ids)}))"
            f", so its slice of the target's logits is right, but the next round ran on the same text: the loop "
            f"{CAUSE_WORDS[DROPPED]}, here {token}. Append next_token after the accepted drafts in every round.")


def forwards_verdict(kept: KeptTokens) -> str:
    """What the target's forwards alone (`kept`) show of a round that emits no token, sent again and again: the
    grader's model server sees no verifier's return."""
    cause, own, on = kept.cause(), "the target's own tokens", "the target's tokens one position on"
    if cause == DROPPED:
        return (f"{_evidence(kept, 'L-1', own)}: verify_tokens_vectorized's slice of the target's logits is right, "
                f"and the decode {CAUSE_WORDS[DROPPED]} after a full acceptance. Each round must append it after the "
                "accepted drafts: the bonus token, the target's argmax after the last draft (with k = 0, the round's "
                "only token).")
    if cause == LATE:
        return (f"{_evidence(kept, 'L', on)}: verify_tokens_vectorized's slice of the target's logits "
                f"{CAUSE_WORDS[LATE]}. Such a slice has only k rows, none for the token after a full acceptance (none "
                "at all when k = 0), so next_token has shape (1, 0).")
    return (f"Each round must append the target's own token, and the forwards {UNTOLD} of two causes stops this one: "
            f"the decode {CAUSE_WORDS[DROPPED]} after a full acceptance (the bonus token; with k = 0 the round's only "
            f"token), or verify_tokens_vectorized's slice of the target's logits {CAUSE_WORDS[LATE]}, so it gives "
            "none (next_token of shape (1, 0)).")


def _evidence(kept: KeptTokens, start: str, tokens: str) -> str:
    """What shows the slice from `start`: the rounds before the repeated one, its drafts, or both."""
    shown = [*([f"the rounds before this one kept {tokens}"] if start in kept.slices else []),
             *([f"this round's {kept.drafts} drafts are all {tokens}"] if kept.stuck == start else [])]
    said = " and ".join(shown)
    return said[:1].upper() + said[1:]


def no_token_cause(records: list[dict]) -> str:
    """The cause of the last round of `records` (`VerifyCall.record()`s, the last one a round that emitted no
    token): DROPPED where its verifier returned a token (the loop did not append it), else what the rounds show
    (`slice_cause`)."""
    if records and records[-1].get("next"):
        return DROPPED
    return slice_cause(r.get("slice") for r in records)


def fitted_slice(text: int | None, drafts: tuple[int, ...] | None, n_accepted: int | None,
                 next_ids: tuple[int, ...] | None, forward: tuple | None) -> str | None:
    """Which slice of the target's logits a verification's n_accepted and next_token fit (`SLICES`): drafts accepted
    while each equals its row, then the row after them (a verifier that returns none is not judged by it). None where
    the round's target forward is not at hand: `forward` is the target's last (positions cached, ids fed, logits),
    which must have scored these drafts at the text's end."""
    if forward is None or None in (text, drafts, n_accepted, next_ids):
        return None
    cached, ids, logits = forward
    if not (isinstance(ids, torch.Tensor) and ids.dim() == 2 and not ids.is_floating_point()
            and isinstance(logits, torch.Tensor) and logits.dim() == 3):
        return None
    k, end = len(drafts), cached + ids.shape[1]
    first = end - logits.shape[1]  # the position of the first row (logits_to_keep may keep only the last ones)
    if end != text + k or text - 1 < first or (k and tuple(ids[0, ids.shape[1] - k:].tolist()) != drafts):
        return None
    own = logits[0, text - 1 - first:].argmax(dim=-1).tolist()  # (k+1,): the target's token after the text, each draft
    right, late = _fits(drafts, own, n_accepted, next_ids), _fits(drafts, own[1:], n_accepted, next_ids)
    return {(True, False): "L-1", (False, True): "L", (True, True): "both"}.get((right, late), "neither")


def _fits(drafts: tuple[int, ...], rows: list[int], n_accepted: int, next_ids: tuple[int, ...]) -> bool:
    """Whether n_accepted and next_token are what a slice of the target's logits whose rows are `rows` gives."""
    n = 0
    while n < min(len(drafts), len(rows)) and drafts[n] == rows[n]:
        n += 1
    return n_accepted == n and (not next_ids or (n < len(rows) and next_ids[0] == rows[n]))


class KeptTokens:
    """A decode's rounds as the target's forwards alone show them (the grader's model server sees no verifier's
    return): whether the tokens each round kept are the target's own (a slice of its logits from L-1) or the
    target's one position on (from L), and what the drafts of the last round are.

    `drafted(n)` counts draft forwards; `target(cached, ids, own)` takes each target forward (the positions in its
    cache, the ids fed, the target's argmax at each row). A round's drafts are the last ids of its target forward, one
    per draft forward since the one before; drafts made without the draft model (prompt lookup) count as text, and
    only what a round kept past them is judged.
    """

    def __init__(self):
        self._text: list[int | None] = []  # the id at each position, as last fed
        self._drafting = 0  # draft forwards since the last target forward
        self._round: tuple[int, int, list[int]] | None = None  # (where its drafts start, its first row's position, own)
        self.slices: list[str] = []  # what each round kept fits, one of SLICES
        self.drafts = 0  # how many drafts the last round had
        self.stuck: str | None = None  # which slice its drafts fit were all accepted (a round that emits no token)

    def drafted(self, n: int = 1) -> None:
        self._drafting += n

    def target(self, cached: int, ids: list[int], own: list[int]) -> None:
        k, self._drafting = min(self._drafting, len(ids)), 0
        del self._text[cached:]
        self._text += [None] * (cached - len(self._text)) + list(ids)
        start, first = cached + len(ids) - k, cached + len(ids) - len(own)
        if self._round is not None and self._round[0] < start:  # what the round before kept, up to these drafts
            self.slices.append(self._fit(range(self._round[0], start), *self._round[1:]))
        self._round, self.drafts = (start, first, own), k
        self.stuck = self._fit(range(start, start + k), first, own) if k else None

    def cause(self) -> str:
        return slice_cause([*self.slices, self.stuck])

    def _fit(self, positions: range, first: int, own: list[int]) -> str:
        """Whether the ids at `positions` are the target's own tokens (`own`, by row from position `first`): the
        argmax at the position before each ("L-1"), at its own ("L"), both or neither."""
        def fits(shift: int) -> bool:
            told = [self._text[p] == own[p - shift - first] for p in positions
                    if 0 <= p - shift - first < len(own) and self._text[p] is not None]
            return bool(told) and all(told)

        return {(True, False): "L-1", (False, True): "L", (True, True): "both"}.get((fits(1), fits(0)), "neither")


def shape_of(value) -> list[int] | str:
    """A tensor's shape, or the name of the type that came instead."""
    return list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__


def _shape(value) -> str:
    shape = shape_of(value)
    return f"of shape {tuple(shape)}" if isinstance(shape, list) else f"of type {shape}"


def _length(value) -> int | None:
    return value.shape[1] if isinstance(value, torch.Tensor) and value.dim() == 2 else None


def _count(value) -> str:
    try:
        return str(int(value))
    except (TypeError, ValueError, RuntimeError):
        return f"of type {type(value).__name__}"


@dataclass(frozen=True)
class VerifyCall:
    """One call of a decoder's verify_tokens_vectorized: the input's and drafts' lengths, what it returned, and as
    plain ids (where they are ids) the drafts, n_accepted and next_token: a round as the verifier saw it. `slice` is
    which slice of the target's logits its n_accepted and next_token fit (`fitted_slice`), None where not known."""

    text: int | None  # input_ids.shape[1]
    drafts: int | None  # draft_tokens.shape[1]
    returned: object
    draft_ids: tuple[int, ...] | None = None
    n_accepted: int | None = None
    next_ids: tuple[int, ...] | None = None
    slice: str | None = None

    @staticmethod
    def of(args: tuple, kwargs: dict, returned, forward: tuple | None = None) -> VerifyCall:
        """The call, judged against `forward`, the target's last forward (`fitted_slice`)."""
        ids = args[0] if args else kwargs.get("input_ids")
        drafts = args[1] if len(args) > 1 else kwargs.get("draft_tokens")
        n_accepted, next_ids = None, None
        if isinstance(returned, tuple) and len(returned) == 3:
            n_accepted, next_ids = _int(returned[1]), _row(returned[2])
        text, draft_ids = _length(ids), _row(drafts)
        return VerifyCall(text, _length(drafts), returned, draft_ids, n_accepted, next_ids,
                          fitted_slice(text, draft_ids, n_accepted, next_ids, forward))

    def describe(self) -> str:
        round_ = f"a round with {self.drafts} drafts" if self.drafts is not None else "a round"
        out = self.returned
        if not (isinstance(out, tuple) and len(out) == 3):
            return f"verify_tokens_vectorized returned {_shape(out)} in {round_}"
        accepted, n_accepted, next_token = out
        return (f"verify_tokens_vectorized returned n_accepted {_count(n_accepted)}, accepted_tokens "
                f"{_shape(accepted)} and next_token {_shape(next_token)} in {round_}")

    def record(self) -> dict:
        """The round as plain data (a `stuck` event's): the text's length, the drafts, n_accepted, next_token, and
        which slice of the target's logits they fit."""
        return {"text": self.text, "drafts": list(self.draft_ids) if self.draft_ids is not None else None,
                "accepted": self.n_accepted, "next": list(self.next_ids) if self.next_ids is not None else None,
                "slice": self.slice}


def _row(value) -> tuple[int, ...] | None:
    """The first row of a (1, n) tensor of ids, else None."""
    if isinstance(value, torch.Tensor) and value.dim() == 2 and value.shape[0] == 1 and not value.is_floating_point():
        return tuple(value[0].tolist())
    return None


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError, RuntimeError):
        return None


def describe_rounds(calls: list[VerifyCall]) -> str:
    """What the last rounds' verifications returned, and on how long a text each ran: the words of NoProgress."""
    if not calls:
        return ""
    last, texts = calls[-1], [c.text for c in calls]
    grew = "" if None in texts or len(texts) < 2 else (
        f" The last {len(texts)} rounds ran on texts of {', '.join(map(str, texts))} tokens"
        + (": the text stopped growing." if len(set(texts)) == 1 else "."))
    return f"In the last round {last.describe()}{'' if last.text is None else f' on a text of {last.text} tokens'}." \
           f"{grew} "
