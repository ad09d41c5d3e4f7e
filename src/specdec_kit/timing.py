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
    verification returned no token), else where to look in the loop."""
    advice = verdict or ("Every round must append the target's own token after the accepted drafts: the correction "
                         "after a rejection, the bonus token when every draft was accepted, and so also in a round "
                         "with no room left for drafts (k = 0)")
    return (f"speculative_decode made {forwards} target forward passes with max_tokens={max_tokens} and had not "
            f"returned: a round that emits no token repeats for ever. {rounds}{advice}")


def no_token_verdict(call: VerifyCall | None) -> str:
    """What a verification that returned no target token means, naming the likely cause (its slice of the target's
    logits starts one position late), or "" where it returned one."""
    if call is None or call.next_ids is None or call.next_ids or call.drafts is None:
        return ""
    rows = ("next_token must hold the target's own token in every round: row n_accepted of the slice of the target's "
            "logits that starts at position L-1 (L = the text's length before the drafts), which has k+1 rows. A slice "
            "that starts one position late, at L instead of L-1, has only k rows")
    if call.drafts == 0:
        return f"That round added nothing: {rows}, none at all when k = 0."
    if call.n_accepted == call.drafts:
        return f"The bonus token is missing: {rows}, none for the bonus token."
    return ""


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
    plain ids (where they are ids) the drafts, n_accepted and next_token: a round as the verifier saw it."""

    text: int | None  # input_ids.shape[1]
    drafts: int | None  # draft_tokens.shape[1]
    returned: object
    draft_ids: tuple[int, ...] | None = None
    n_accepted: int | None = None
    next_ids: tuple[int, ...] | None = None

    @staticmethod
    def of(args: tuple, kwargs: dict, returned) -> VerifyCall:
        ids = args[0] if args else kwargs.get("input_ids")
        drafts = args[1] if len(args) > 1 else kwargs.get("draft_tokens")
        n_accepted, next_ids = None, None
        if isinstance(returned, tuple) and len(returned) == 3:
            n_accepted, next_ids = _int(returned[1]), _row(returned[2])
        return VerifyCall(_length(ids), _length(drafts), returned, _row(drafts), n_accepted, next_ids)

    def describe(self) -> str:
        round_ = f"a round with {self.drafts} drafts" if self.drafts is not None else "a round"
        out = self.returned
        if not (isinstance(out, tuple) and len(out) == 3):
            return f"verify_tokens_vectorized returned {_shape(out)} in {round_}"
        accepted, n_accepted, next_token = out
        return (f"verify_tokens_vectorized returned n_accepted {_count(n_accepted)}, accepted_tokens "
                f"{_shape(accepted)} and next_token {_shape(next_token)} in {round_}")

    def record(self) -> dict:
        """The round as plain data (a `stuck` event's): the text's length, the drafts, n_accepted, next_token."""
        return {"text": self.text, "drafts": list(self.draft_ids) if self.draft_ids is not None else None,
                "accepted": self.n_accepted, "next": list(self.next_ids) if self.next_ids is not None else None}


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
    probe reports when the decode fails (the rounds it did complete, for a test cell to draw).
    """

    KEPT_ROUNDS = 3

    def __init__(self, decoder, emit: Emit, record_ids: bool = False):
        self._handles = []
        self._emit, self._record_ids = emit, record_ids
        self._max_tokens, self._target_forwards = None, 0
        self._rounds: list[VerifyCall] = []
        self.case_rounds: list[dict] = []  # every round of the decode since expect_tokens, as VerifyCall.record()
        for role in ROLES:
            model = getattr(decoder, f"{role}_model", None)
            if not isinstance(model, torch.nn.Module):
                continue
            self._handles.append(model.register_forward_pre_hook(self._on_forward(role), with_kwargs=True))
            embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
            if isinstance(embeddings, torch.nn.Module):
                self._handles.append(embeddings.register_forward_hook(self._on_embedding(role)))
        self._decoder, self._own_verify = decoder, "verify_tokens_vectorized" in getattr(decoder, "__dict__", {})
        verify = getattr(decoder, "verify_tokens_vectorized", None)
        if callable(verify) and hasattr(decoder, "__dict__"):
            def watched(*args, **kwargs):
                out = verify(*args, **kwargs)
                call = VerifyCall.of(args, kwargs, out)
                self._rounds = [*self._rounds[1 - self.KEPT_ROUNDS:], call]
                self.case_rounds.append(call.record())
                return out

            self._verify = verify
            decoder.verify_tokens_vectorized = watched

    def expect_tokens(self, max_tokens: int) -> None:
        self._max_tokens, self._target_forwards, self._rounds, self.case_rounds = max_tokens, 0, [], []

    def verdict(self) -> str:
        """What the last verification means where it returned no target token (`no_token_verdict`), else ""."""
        return no_token_verdict(self._rounds[-1] if self._rounds else None)

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
                                                         describe_rounds(self._rounds), self.verdict()))
            new_tokens, cached, ids = describe_call(args, kwargs, self._record_ids)
            mask = kwargs.get("attention_mask")
            padding = int((mask == 0).sum()) if self._record_ids and isinstance(mask, torch.Tensor) else 0
            self._emit({"event": "forward", "role": role, "new_tokens": new_tokens, "cached_tokens": cached,
                        "ids": list(ids) if ids is not None else None, "padding": padding,
                        "training": module.training, "dtype": dtype_name(getattr(module, "dtype", None))})
        return hook

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
