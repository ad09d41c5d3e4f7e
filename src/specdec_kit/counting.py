"""Count a model's forward calls from outside, never trusting the decoder's own numbers.

    with ForwardRecorder(decoder.target_model) as target_calls:
        decoder.speculative_decode(prompt)
    print(len(target_calls), [call.new_tokens for call in target_calls])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ForwardCall:
    new_tokens: int  # positions fed in this call (input_ids.shape[1])
    cached_tokens: int  # positions already in the KV cache passed to it (0 without one)


class ForwardRecorder(list):
    """A list of ForwardCall, appended to by a forward pre-hook while the `with` block runs."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self._model = model
        self._handle = None

    def __enter__(self) -> ForwardRecorder:
        self._handle = self._model.register_forward_pre_hook(self._record, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()

    def _record(self, module, args, kwargs) -> None:
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        if input_ids is None:  # called with inputs_embeds
            input_ids = kwargs["inputs_embeds"][..., 0]
        cache = kwargs.get("past_key_values")
        cached = cache.get_seq_length() if cache is not None and hasattr(cache, "get_seq_length") else 0
        self.append(ForwardCall(new_tokens=input_ids.shape[1], cached_tokens=int(cached)))
