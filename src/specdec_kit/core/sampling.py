"""Temperature and top-p: the one warping that speculative sampling's p and q both go through.

    from specdec_kit.core.sampling import warp
    p = warp(target_logits, temperature=0.7, top_p=0.9)   # probabilities, float32, the logits' shape

Built from transformers' own logits warpers, applied in the order `generate(do_sample=True)` applies them,
so a sampler that uses it samples from the distribution `generate` would.
"""

from __future__ import annotations

import torch
from transformers import TemperatureLogitsWarper, TopPLogitsWarper


def check_sampling_settings(temperature: float, top_p: float) -> None:
    """Refuse settings that do not define a distribution, saying what to pass instead."""
    if not temperature > 0:
        raise ValueError(f"temperature must be above 0, got {temperature}: for greedy decoding call "
                         "speculative_decode instead")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}: 1 keeps every token")


def warp(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0) -> torch.Tensor:
    """Probabilities (float32, the shape of `logits`, last dimension the vocabulary) after dividing the logits
    by `temperature` and keeping the smallest set of most likely tokens whose mass reaches `top_p`."""
    check_sampling_settings(temperature, top_p)
    scores = logits.reshape(-1, logits.shape[-1]).float()
    if temperature != 1.0:
        scores = TemperatureLogitsWarper(temperature)(None, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(None, scores)
    return scores.softmax(dim=-1).reshape(logits.shape)


def __getattr__(name: str):
    """`check_sampling`, this term's first name for `check_sampling_settings` (the checks' `check_sampling` judges a
    sampler), still imports, with a warning naming the new name."""
    if name == "check_sampling":
        import warnings

        warnings.warn("specdec_kit.core.sampling.check_sampling is now check_sampling_settings", FutureWarning,
                      stacklevel=2)
        return check_sampling_settings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
