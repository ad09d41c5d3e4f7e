"""The target alone: its own greedy decoding, and where another decoding leaves it.

    expected = target_greedy(model, input_ids, 30)          # new token ids of model.generate(do_sample=False)
    mismatch = first_mismatch(model, input_ids, expected, got)  # where got leaves expected, with the margin
    zoo_greedy("tiny", prompt, 30)                          # the same on the kit's own copy of a zoo pair

Speculative decoding must give exactly these tokens, so the checks, the benchmark and the demo compare
with them. Nothing here implements a part of the assignment.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache

import torch


def target_greedy(model, input_ids: torch.Tensor, max_new_tokens: int) -> list[int]:
    out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_new_tokens,
                         do_sample=False)
    return out[0, input_ids.shape[1]:].tolist()


@dataclass(frozen=True)
class Mismatch:
    position: int  # index among the new tokens
    margin: float  # the target's top-1 minus top-2 logit there, computed over the reference prefix


def first_difference(got: list[int], expected: list[int]) -> int:
    """Index of the first token where `got` leaves `expected` (the shorter length if one is a prefix)."""
    return next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))


def first_mismatch(model, prompt_ids: torch.Tensor, expected: list[int], got: list[int]) -> Mismatch | None:
    """Where `got` leaves `expected` (None if identical), with the target's logit margin at that point."""
    if got == expected:
        return None
    position = first_difference(got, expected)
    prefix = torch.tensor([expected[:position]], device=prompt_ids.device, dtype=prompt_ids.dtype)
    with torch.inference_mode():
        logits = model(torch.cat([prompt_ids, prefix], dim=1)).logits[0, -1].float()
    top2 = logits.topk(2).values
    return Mismatch(position, float(top2[0] - top2[1]))


# ---------------------------------------------------------------------------------------------
# The kit's own copy of a zoo pair


@cache
def zoo_model(pair: str, role: str = "target"):
    """(model, tokenizer) of the kit's own copy of `pair`'s `role` ("target" or "draft"), on the CPU in fp32."""
    from .loading import load_model, resolve_pair

    target, draft = resolve_pair(pair)
    return load_model(target if role == "target" else draft, "cpu", torch.float32)


def zoo_tokenizer(pair: str = "scripted"):
    """The zoo's tokenizer (every pair shares it), loaded by the kit."""
    return zoo_model(pair)[1]


@lru_cache(maxsize=4096)
def zoo_greedy(pair: str, prompt: str, max_new_tokens: int) -> tuple[int, ...]:
    """The new tokens of the kit's own copy of `pair`'s target, decoding `prompt` greedily (cached)."""
    model, tokenizer = zoo_model(pair)
    return tuple(target_greedy(model, tokenizer(prompt, return_tensors="pt").input_ids, max_new_tokens))


def prompt_for_token(token: int) -> str:
    """A one-token prompt: `scripted` tokens encode back to themselves."""
    return zoo_tokenizer().decode([token])
