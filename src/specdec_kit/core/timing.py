"""The kit's clock and forward counters: what it measures with, never trusting a decoder's own numbers.

    result, seconds = timed(device, decoder.speculative_decode, prompt)   # device synchronised around it
    with ForwardRecorder(decoder.target_model) as target_calls:
        decoder.speculative_decode(prompt)
    print(len(target_calls), [call.new_tokens for call in target_calls], target_calls.seconds)

`Observer` hooks a decoder's models (and their input embeddings) and emits one event per forward call;
`observer.expect_tokens(n)` stops a decode that makes no progress (`no_progress.NoProgress`, which says why).

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
from .no_progress import NoProgress, VerifyCall, describe_rounds, dropped_verdict, no_progress_message, no_token_verdict

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
