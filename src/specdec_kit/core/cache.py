"""KV-cache helpers that work on every transformers the kit supports (4.x, 5.x before and from 5.24).

`DynamicCache.crop(n)` kept an absolute length n in 4.x; 5.x rejects a positive n and removes -n
tokens for a negative one, which recent 4.x releases also accept. `crop_to` speaks in lengths.

transformers 5.24 renamed the cache a forward takes and returns from `past_key_values` to `cache`: the old
keyword still works there with a FutureWarning, reading `out.past_key_values` logs a warning, and both go in
5.40. Earlier versions know only `past_key_values`, and their forwards silently ignore a `cache=` keyword
(the model then runs as if it had no cache). `cache_kwargs` and `cache_of` use the installed version's name:

    out = model(input_ids=ids, **cache_kwargs(cache), use_cache=True)
    cache = cache_of(out)
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: `import specdec_kit` stays light for the instructor's tools
    import torch

LEGACY_KEYWORD = "past_key_values"


@functools.cache
def cache_keyword() -> str:
    """The name the installed transformers passes a KV cache by, to a forward and on its output: `cache` where
    the outputs have that field (5.24 on), `past_key_values` before."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    fields = {field.name for field in dataclasses.fields(CausalLMOutputWithPast)}
    return "cache" if "cache" in fields else LEGACY_KEYWORD


def cache_kwargs(cache) -> dict:
    """The keyword argument that passes `cache` (a DynamicCache or None) to a model forward:
    `model(input_ids=ids, **cache_kwargs(cache), use_cache=True)`."""
    return {cache_keyword(): cache}


def cache_of(output):
    """The KV cache a model forward returned (None when it kept none), read without a deprecation warning."""
    return getattr(output, cache_keyword())


def passed_cache(kwargs: dict):
    """The cache a forward's keyword arguments pass, under either name the installed transformers takes (from 5.24
    `cache` and, deprecated, `past_key_values`; before, only `past_key_values`); None without one."""
    for name in dict.fromkeys((cache_keyword(), LEGACY_KEYWORD)):
        if kwargs.get(name) is not None:
            return kwargs[name]
    return None


def crop_to(cache, length: int) -> None:
    """Keep the first `length` positions of `cache` (in place), dropping the rest from every layer."""
    current = cache.get_seq_length()
    if not 0 <= length <= current:
        raise ValueError(f"crop_to: cannot keep {length} positions of a cache that holds {current}")
    if length < current:
        cache.crop(length - current)  # negative: "remove this many", the form both majors accept


def common_prefix_length(a: torch.Tensor, b: torch.Tensor) -> int:
    """Length of the longest shared prefix of two (1, n) token-id tensors (one host sync)."""
    n = min(a.shape[-1], b.shape[-1])
    same = (a[..., :n] == b[..., :n]).reshape(-1)
    return int(same.cumprod(0).sum()) if n else 0
