"""HF's own speculative methods for the instructor's benchmark, each decode's rounds read off the target's forwards.

    runners = hf_methods.RUNNERS     # runners.RUNNERS, HF's methods with their rounds (and a fixed k checked)
    bench.compare(classes, target, draft, prompts, [1, 2, 4], methods=[..., "hf_prompt_lookup"], runners=runners)

Reading a cached decoder's rounds off its target's forwards would hand a student every count the checks
ask for, so this lives with the course, not in the student package.
"""

from __future__ import annotations

from specdec_kit.bench import runners
from specdec_kit.bench.runners import Decoded, Setup
from specdec_kit.core.timing import ForwardRecorder


class HFKMismatchError(RuntimeError):
    """HF assisted generation proposed a different number of draft tokens than asked."""


def generate_in_rounds(setup: Setup, prompt: str, max_new_tokens: int, **generate_kwargs) -> Decoded:
    """The target's own `generate` with these arguments, its rounds read off its forward calls."""
    ids = runners.encode(setup, prompt)
    with ForwardRecorder(setup.target) as calls:
        decoded = runners.generate_tokens(setup, ids, max_new_tokens, **generate_kwargs)
    return Decoded(decoded.token_ids, *rounds_from_target_calls(list(calls), ids.shape[1], len(decoded.token_ids)))


def rounds_from_target_calls(calls, prompt_len: int, new_tokens: int) -> tuple[list[int], list[int]]:
    """Per-round proposed and accepted drafts of a cached decoder, read off its target's forwards.

    Round r feeds the last round's token plus its drafts onto a cache holding everything before that
    token, so the cache length grows by exactly the tokens round r emitted (accepted drafts + 1).
    """
    lengths = [prompt_len] + [call.cached_tokens + 1 for call in calls[1:]] + [prompt_len + new_tokens]
    proposed = [calls[0].new_tokens - prompt_len] + [call.new_tokens - 1 for call in calls[1:]]
    accepted = [after - before - 1 for before, after in zip(lengths, lengths[1:])]
    return proposed, accepted


def run_in_rounds(method: str):
    """bench's runner of one of HF's methods, with its rounds read; a fixed k is checked against them (transformers
    may ignore a pin)."""
    def run(setup: Setup, prompt: str, max_new_tokens: int, k: int, temperature: float | None = None) -> Decoded:
        decoded = generate_in_rounds(setup, prompt, max_new_tokens, **runners.HF_KWARGS[method](setup, k, temperature))
        if runners.HF_KWARGS[method] is runners.assisted_kwargs and max(decoded.proposed) != min(k, max_new_tokens - 1):
            raise HFKMismatchError(f"HF assisted generation was asked for k={k} but proposed at most "
                                   f"{max(decoded.proposed)} draft tokens per round: {decoded.proposed}")
        return decoded
    return run


RUNNERS = runners.RUNNERS | {method: run_in_rounds(method) for method in runners.HF_KWARGS}
