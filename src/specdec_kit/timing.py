"""The kit's clock and forward counters: what it measures with, never trusting a decoder's own numbers.

    result, seconds = timed(device, decoder.speculative_decode, prompt)   # device synchronised around it
    with ForwardRecorder(decoder.target_model) as target_calls:
        decoder.speculative_decode(prompt)
    print(len(target_calls), [call.new_tokens for call in target_calls], target_calls.seconds)

`Observer` hooks a decoder's models (and their input embeddings) and emits one event per forward call;
`observer.expect_tokens(n)` stops a decode that makes no progress (`NoProgress`).

On CUDA each recorded call is bracketed by `torch.cuda.synchronize`, so its seconds are the GPU's
and not the launch's; that costs tens of microseconds per call against forwards of milliseconds.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .cache import cache_kwargs, cache_of, crop_to, passed_cache
from .tracebacks import render

ROLES = ("target", "draft")
# Hooks run as they are, never traced by torch.compile: traced, a hook's state (a counter, the recorder it
# appends to) becomes a guard of the compiled model, which then recompiles at every call until its limit.
_eager = torch.compiler.disable
ROUND_SLACK = 4  # target forwards per token a decode may make before it counts as making no progress
Emit = Callable[[dict], None]


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so that a timer read afterwards covers it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn, *args):
    """(fn(*args), wall seconds), with the device synchronised on both sides."""
    synchronize(device)
    start = time.perf_counter()
    out = fn(*args)
    synchronize(device)
    return out, time.perf_counter() - start


@dataclass(frozen=True)
class ForwardCall:
    new_tokens: int  # positions fed in this call (input_ids.shape[1])
    cached_tokens: int  # positions already in the KV cache passed to it (0 without one)
    seconds: float  # wall time of the call
    started: float = 0.0  # perf_counter at the call's start: orders the calls of two recorders
    input_ids: tuple[int, ...] | None = None  # the ids fed (first row), when the recorder was asked for them
    padding: int = 0  # positions its attention mask left out (counted with the ids)
    training: bool | None = None  # the model's mode, and its dtype's name, when the call was made
    dtype: str | None = None


class ForwardRecorder(list):
    """A list of ForwardCall, appended to by forward hooks while the `with` block runs."""

    def __init__(self, model: torch.nn.Module, record_ids: bool = False):
        super().__init__()
        self._model = model
        self._record_ids = record_ids  # off by default: reading ids back is a host sync, which timing avoids
        self._handles = []
        self._pending = None  # (new_tokens, cached_tokens, ids, start) of the call in progress
        self._cuda = next(model.parameters()).device.type == "cuda"

    def __enter__(self) -> ForwardRecorder:
        self._handles = [
            self._model.register_forward_pre_hook(_eager(self._before), with_kwargs=True),
            self._model.register_forward_hook(_eager(self._after), always_call=True),
        ]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()

    @property
    def seconds(self) -> float:
        return sum(call.seconds for call in self)

    def _before(self, module, args, kwargs) -> None:
        new_tokens, cached, ids = describe_call(args, kwargs, self._record_ids)
        if self._cuda:
            torch.cuda.synchronize()
        self._pending = (new_tokens, cached, ids, time.perf_counter())

    def _after(self, module, args, output) -> None:
        if self._cuda:
            torch.cuda.synchronize()
        new_tokens, cached, ids, start = self._pending
        self.append(ForwardCall(new_tokens, cached, time.perf_counter() - start, start, ids))


DTYPES = ("float32", "float16", "bfloat16", "float64")  # the dtypes a forward is named by; any other is "other"


def dtype_name(dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    return name if name in DTYPES else "other"


def describe_call(args: tuple, kwargs: dict, record_ids: bool = False) -> tuple[int, int, tuple[int, ...] | None]:
    """(positions fed, positions already in the KV cache, the fed ids if asked) of one model forward call."""
    input_ids = kwargs.get("input_ids", args[0] if args else None)
    if input_ids is None:  # called with inputs_embeds
        input_ids = kwargs["inputs_embeds"][..., 0]
    cache = passed_cache(kwargs)
    cached = cache.get_seq_length() if cache is not None and hasattr(cache, "get_seq_length") else 0
    ids = tuple(input_ids[0].tolist()) if record_ids and input_ids.dtype == torch.long else None
    return input_ids.shape[1], int(cached), ids


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


class Observer:
    """Hooks on a decoder's models and their input embeddings that emit one event per forward call.

    `with Observer(decoder, emit) as observer:` observes inside the block; `observer.expect_tokens(n)`
    before a decode of at most n tokens raises NoProgress once the target has made more forward passes
    than such a decode can take (one per round, each round at least one token; `ROUND_SLACK` times
    that, so a decode that is merely wasteful still ends and is judged by its counts). It also keeps what the
    decoder's last few `verify_tokens_vectorized` calls returned (a wrapper on the instance while the block runs),
    so that NoProgress can say what the rounds gave back, and as `case_rounds` every round of the decode, which a
    probe reports when the decode fails (the rounds it did complete, for a test cell to draw). Each round is judged
    against the target's forward before its verification returned (a reference to its logits is kept until the
    next), so that a round that emits no token can be told by its cause (`no_token_verdict`).
    """

    KEPT_ROUNDS = 3

    def __init__(self, decoder, emit: Emit, record_ids: bool = False):
        self._handles = []
        self._emit, self._record_ids = emit, record_ids
        self._max_tokens, self._target_forwards = None, 0
        self._rounds: list[VerifyCall] = []
        self.case_rounds: list[dict] = []  # every round of the decode since expect_tokens, as VerifyCall.record()
        self._target_in, self._target_out = None, None  # (cached, ids) of the target's last forward; then its logits
        for role in ROLES:
            model = getattr(decoder, f"{role}_model", None)
            if not isinstance(model, torch.nn.Module):
                continue
            self._handles.append(model.register_forward_pre_hook(self._on_forward(role), with_kwargs=True))
            if role == "target":
                self._handles.append(model.register_forward_hook(_eager(self._on_target_output)))
            embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
            if isinstance(embeddings, torch.nn.Module):
                self._handles.append(embeddings.register_forward_hook(self._on_embedding(role)))
        self._decoder, self._own_verify = decoder, "verify_tokens_vectorized" in getattr(decoder, "__dict__", {})
        verify = getattr(decoder, "verify_tokens_vectorized", None)
        if callable(verify) and hasattr(decoder, "__dict__"):
            def watched(*args, **kwargs):
                out = verify(*args, **kwargs)
                call = VerifyCall.of(args, kwargs, out, self._target_out)
                self._rounds = [*self._rounds[1 - self.KEPT_ROUNDS:], call]
                self.case_rounds.append(call.record())
                return out

            self._verify = verify
            decoder.verify_tokens_vectorized = watched

    def expect_tokens(self, max_tokens: int) -> None:
        self._max_tokens, self._target_forwards, self._rounds, self.case_rounds = max_tokens, 0, [], []

    def verdict(self) -> str:
        """What the last verification means where it returned no target token (`no_token_verdict`), else ""."""
        return no_token_verdict(self._rounds[-1] if self._rounds else None,
                                [r.get("slice") for r in self.case_rounds])

    def stuck_verdict(self) -> str:
        """What the last round means where it emitted no token: its verification returned none (`verdict`), or the
        next round ran on the same text (`dropped_verdict`); else ""."""
        last = self._rounds[-2:]
        stalled = len(last) == 2 and last[0].text is not None and last[0].text == last[1].text
        return self.verdict() or (dropped_verdict(last[0]) if stalled else "")

    def why_failed(self) -> str:
        """For a decode that failed: what its last verification returned and what that means, where it returned no
        target token; else ""."""
        verdict = self.verdict()
        return f"In its last round {self._rounds[-1].describe()}. {verdict}" if verdict else ""

    def _on_forward(self, role: str):
        @_eager
        def hook(module, args, kwargs):
            if role == "target" and self._max_tokens is not None:
                self._target_forwards += 1
                if self._target_forwards > ROUND_SLACK * (self._max_tokens + 1):
                    raise NoProgress(no_progress_message(self._target_forwards, self._max_tokens,
                                                         describe_rounds(self._rounds), self.stuck_verdict()))
            new_tokens, cached, ids = describe_call(args, kwargs, self._record_ids)
            if role == "target":
                self._target_in = (cached, kwargs.get("input_ids", args[0] if args else None))
            mask = kwargs.get("attention_mask")
            padding = int((mask == 0).sum()) if self._record_ids and isinstance(mask, torch.Tensor) else 0
            self._emit({"event": "forward", "role": role, "new_tokens": new_tokens, "cached_tokens": cached,
                        "ids": list(ids) if ids is not None else None, "padding": padding,
                        "training": module.training, "dtype": dtype_name(getattr(module, "dtype", None))})
        return hook

    def _on_target_output(self, module, args, output) -> None:
        logits = getattr(output, "logits", output[0] if isinstance(output, tuple) and output else None)
        self._target_out = (*self._target_in, logits) if self._target_in is not None else None

    def _on_embedding(self, role: str):
        @_eager
        def hook(module, args, output):
            self._emit({"event": "embedding", "role": role})
        return hook

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        if hasattr(self, "_verify"):
            if self._own_verify:
                self._decoder.verify_tokens_vectorized = self._verify
            else:
                self._decoder.__dict__.pop("verify_tokens_vectorized", None)
            del self._verify

    def __enter__(self) -> Observer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# What forwards cost


@dataclass(frozen=True)
class ForwardCosts:
    """Seconds of one draft step, and of a target forward by the tokens it is fed: `verify[n - 1]` for n tokens.
    A round of k drafts costs k draft steps and one target forward on k + 1 tokens (the last text token and the
    drafts): `round_seconds(k)`."""

    draft: float
    verify: tuple[float, ...]

    def round_seconds(self, k: int) -> float:
        return k * self.draft + self.verify[min(k, len(self.verify) - 1)]


@torch.inference_mode()
def median_forward_seconds(model: torch.nn.Module, context: torch.Tensor, new_tokens: int, repeats: int,
                           generator: torch.Generator) -> float:
    """Median seconds of `model` fed `new_tokens` random tokens on a KV cache of `context` (cropped back after each
    forward), after two warm-up forwards."""
    device, length = context.device, context.shape[1]
    cache = cache_of(model(context, use_cache=True))
    ids = torch.randint(0, model.config.vocab_size, (1, new_tokens), generator=generator).to(device)

    def step():
        model(ids, **cache_kwargs(cache), use_cache=True)
        crop_to(cache, length)

    times = [timed(device, step)[1] for _ in range(repeats + 2)]
    return statistics.median(times[2:])


def measure_forward_costs(target: torch.nn.Module, draft: torch.nn.Module, max_tokens: int,
                          context_len: int = 128, repeats: int = 7) -> ForwardCosts:
    """The ForwardCosts of this pair on this machine: target forwards on 1..max_tokens tokens and a draft step, each
    the median of `repeats` on a cache of `context_len` random tokens (seeded)."""
    generator = torch.Generator().manual_seed(0)
    device = next(target.parameters()).device
    context = torch.randint(0, target.config.vocab_size, (1, context_len), generator=generator).to(device)
    return ForwardCosts(
        draft=median_forward_seconds(draft, context, 1, repeats, generator),
        verify=tuple(median_forward_seconds(target, context, n, repeats, generator) for n in range(1, max_tokens + 1)))
