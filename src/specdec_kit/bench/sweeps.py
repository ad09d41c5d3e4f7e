"""The notebook's sweeps: what its benchmark cell times on a CPU or a GPU, and the bonus parts' demo benchmarks.

    sweep = notebook_sweep("cpu")          # 2 prompts x k in 1, 2, 4, 12 tokens, 2 repeats
    bonus_compare({"SpeculativeSampler": SpeculativeSampler}, list(SAMPLING_METHODS), sweep, "tiny", "cpu", True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .benchmark import compare
from .readiness import finished


@dataclass(frozen=True)
class Sweep:
    """What a notebook's benchmark cell runs: the first `prompts` of the kit's prompts, each k, `repeats` times,
    `max_new_tokens` each (None: each prompt's own budget); the bonus sampler at each of `temperatures`."""

    prompts: int
    k_values: tuple[int, ...]
    max_new_tokens: int | None
    repeats: int
    temperatures: tuple[float, ...] = (1.0,)

    def __str__(self) -> str:
        tokens = f"{self.max_new_tokens} tokens" if self.max_new_tokens else "each prompt's own budget"
        return (f"sweep: {self.prompts} prompts x k in {', '.join(map(str, self.k_values))}, {tokens}, "
                f"{self.repeats} repeat{'s' if self.repeats > 1 else ''}")


# Each prompt repeated, so that each point has a spread to judge it by (a CPU's 2 prompts x 2 repeats: 4 ratios a
# point); a CPU keeps to 3 k and 12 tokens, so that a finished notebook runs in about two minutes there (the student
# README gives the measured time); a GPU times more k and each prompt's whole budget.
NOTEBOOK_SWEEPS = {"cpu": Sweep(2, (1, 2, 4), 12, 2), "cuda": Sweep(3, (1, 2, 3, 4, 6, 8), None, 3, (0.7, 1.0))}


def notebook_sweep(device: str) -> Sweep:
    """The benchmark cell's default sweep on `device` ("cuda", "cuda:0", "cpu", ...)."""
    return NOTEBOOK_SWEEPS["cuda" if str(device).startswith("cuda") else "cpu"]


def bonus_compare(decoder_classes: dict[str, type], methods: list[str], sweep: Sweep, pair: str, device: str,
                  run: bool, say: Callable[[str], None] = print) -> dict | None:
    """A bonus part's demo cell: `compare` of `methods` on the benchmark cell's `sweep`, once every decoder they time
    is finished (`finished`) and `run` (the notebook's BONUS_SWEEPS) is set; else None, saying in one line why."""
    from ..core.prompts import load_prompts
    from ..models.loading import resolve_pair

    if not finished(decoder_classes, methods, say):
        return None
    if not run:
        say(f"Skipped: BONUS_SWEEPS is False (a minute or more each on a CPU); set it to True in the benchmark cell "
            f"to time this part on the {sweep}")
        return None
    target, draft = resolve_pair(pair)
    return compare(decoder_classes, target, draft, load_prompts()[:sweep.prompts], list(sweep.k_values), pair=pair,
                   repeats=sweep.repeats, max_new_tokens=sweep.max_new_tokens, device=device, methods=list(methods),
                   temperatures=list(sweep.temperatures))  # only sampling methods read them (bench_plan)
