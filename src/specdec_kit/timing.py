"""The kit's clock and forward counters: what it measures with, never trusting a decoder's own numbers.

    result, seconds = timed(device, decoder.speculative_decode, prompt)   # device synchronised around it
    with ForwardRecorder(decoder.target_model) as target_calls:
        decoder.speculative_decode(prompt)
    print(len(target_calls), [call.new_tokens for call in target_calls], target_calls.seconds)

On CUDA each recorded call is bracketed by `torch.cuda.synchronize`, so its seconds are the GPU's
and not the launch's; that costs tens of microseconds per call against forwards of milliseconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch


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
            self._model.register_forward_pre_hook(self._before, with_kwargs=True),
            self._model.register_forward_hook(self._after, always_call=True),
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


def describe_call(args: tuple, kwargs: dict, record_ids: bool = False) -> tuple[int, int, tuple[int, ...] | None]:
    """(positions fed, positions already in the KV cache, the fed ids if asked) of one model forward call."""
    input_ids = kwargs.get("input_ids", args[0] if args else None)
    if input_ids is None:  # called with inputs_embeds
        input_ids = kwargs["inputs_embeds"][..., 0]
    cache = kwargs.get("past_key_values")
    cached = cache.get_seq_length() if cache is not None and hasattr(cache, "get_seq_length") else 0
    ids = tuple(input_ids[0].tolist()) if record_ids and input_ids.dtype == torch.long else None
    return input_ids.shape[1], int(cached), ids
