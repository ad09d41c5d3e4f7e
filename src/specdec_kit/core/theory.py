"""What speculative decoding should gain, from measured acceptance and forward costs.

    leviathan_speedup(alpha=0.8, k=4, c=0.1)         # Leviathan et al. (2023)'s expected speedup
    forward_bound_speedup(3.5, 0.03, 4, 0.002, 0.045)   # with zero overhead outside the model forwards
"""

from __future__ import annotations


def leviathan_speedup(alpha: float, k: int, c: float) -> float:
    """Expected speedup of Leviathan et al. (2023): (1 - a^(k+1)) / ((1 - a)(k c + 1)).

    It assumes a verify pass over k+1 tokens costs one target step, which a CPU does not grant.
    """
    if alpha >= 1:
        return (k + 1) / (k * c + 1)
    return (1 - alpha ** (k + 1)) / ((1 - alpha) * (k * c + 1))


def forward_bound_speedup(tokens_per_round: float, baseline_seconds_per_token: float, k: int,
                          draft_step: float, verify_pass: float) -> float:
    """The speedup if a round cost nothing but its forwards: k draft steps and one target verify pass,
    each as measured, against the baseline's seconds per token."""
    return tokens_per_round * baseline_seconds_per_token / (k * draft_step + verify_pass)
