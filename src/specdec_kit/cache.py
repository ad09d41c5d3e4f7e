"""KV-cache helpers that work on transformers 4.x and 5.x alike.

`DynamicCache.crop(n)` kept an absolute length n in 4.x; 5.x rejects a positive n and removes -n
tokens for a negative one, which recent 4.x releases also accept. `crop_to` speaks in lengths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: `import specdec_kit` stays light for the instructor's tools
    import torch


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
