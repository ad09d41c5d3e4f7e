"""The benchmark's methods: each one decode of a prompt, by name, on the models of a `Setup`.

    decoded = RUNNERS["hf_assisted"](setup, "The future of", 32, 4)   # Decoded: its new tokens
    decoded.token_ids

What `benchmark.py` times (its `runners`, by default `RUNNERS`), on one pair:
- `target_greedy`: the target's own `generate(do_sample=False)` with its cache (the baseline);
- `hf_assisted`: `generate(assistant_model=draft)` with k pinned in the draft's generation config;
- `no_cache`: the notebook's `SpeculativeDecoder`;
- `cached`: the notebook's `CachedSpeculativeDecoder`;
and, at a temperature (top-p 1, no top-k), the sampling methods:
- `target_sampling`: the target's own `generate(do_sample=True)` (the baseline of the sampled rows);
- `hf_assisted_sampling`: `generate(assistant_model=draft, do_sample=True)`, HF's speculative sampling;
- `sampling`: the notebook's `SpeculativeSampler`;
and the model-free drafting methods, greedy and so judged against `target_greedy` (tokens identical):
- `hf_prompt_lookup`: `generate(prompt_lookup_num_tokens=k, max_matching_ngram_size=3)`, no draft model;
- `prompt_lookup`: the notebook's `PromptLookupDecoder`;
and the adaptive-k methods, greedy, whose k is the first round's:
- `hf_adaptive`: `generate(assistant_model=draft)` with HF's heuristic schedule and confidence threshold 0.4;
- `adaptive`: the notebook's `AdaptiveSpeculativeDecoder`.
HF's rows hold their tokens only; their rounds and acceptance are read off the target's forwards only by the
instructor package (`specdec_course.bench.hf_methods`), since that reading would answer the checks.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..models.baseline import target_greedy

METHODS = ("target_greedy", "hf_assisted", "no_cache", "cached")
SAMPLING_METHODS = ("target_sampling", "hf_assisted_sampling", "sampling")
LOOKUP_METHODS = ("hf_prompt_lookup", "prompt_lookup")
ADAPTIVE_METHODS = ("hf_adaptive", "adaptive")
ADAPTIVE_THRESHOLD = 0.4  # the draft probability below which drafting stops: HF's default, the notebook's too
LOOKUP_NGRAM = 3  # the largest n-gram both lookups match: HF's max_matching_ngram_size, PromptLookupDecoder's default
BASELINES = ("target_greedy", "target_sampling")
DECODER_METHODS = {"no_cache": "SpeculativeDecoder", "cached": "CachedSpeculativeDecoder",
                   "sampling": "SpeculativeSampler", "prompt_lookup": "PromptLookupDecoder",
                   "adaptive": "AdaptiveSpeculativeDecoder"}


@dataclass(frozen=True)
class Decoded:
    """One decode: its new tokens and, for speculative methods, per-round proposed/accepted drafts."""

    token_ids: list[int]
    proposed: list[int] | None = None
    accepted: list[int] | None = None
    ended_at_eos: bool = False


@dataclass
class Setup:
    """What the methods run on: the kit's own target and draft, and the notebook's decoders."""

    target: torch.nn.Module
    draft: torch.nn.Module
    tokenizer: object
    decoders: dict[str, object]  # method name -> decoder instance
    device: torch.device


# ---------------------------------------------------------------------------------------------
# The four methods


def run_target_greedy(setup: Setup, prompt: str, max_new_tokens: int, k: int | None,
                      temperature: float | None = None) -> Decoded:
    ids = encode(setup, prompt)
    return Decoded(target_greedy(setup.target, ids, max_new_tokens))


def sampling_kwargs(temperature: float) -> dict:
    """generate's sampling arguments for `temperature` alone: top-p 1 and no top-k, as `sampling.warp` does."""
    return {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0}


def run_target_sampling(setup: Setup, prompt: str, max_new_tokens: int, k: int | None,
                        temperature: float | None = None) -> Decoded:
    return generate_tokens(setup, encode(setup, prompt), max_new_tokens, **sampling_kwargs(temperature))


def generate_tokens(setup: Setup, ids: torch.Tensor, max_new_tokens: int, **generate_kwargs) -> Decoded:
    """The new tokens of the target's own `generate` after `ids` (the encoded prompt) with these arguments."""
    with without_internal_notice():
        out = setup.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                    **generate_kwargs)
    return Decoded(out[0, ids.shape[1]:].tolist())


INTERNAL_NOTICE = "Passing `generation_config` together with generation-related arguments"


class _DropInternalNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(INTERNAL_NOTICE)


@contextlib.contextmanager
def without_internal_notice():
    """transformers' assisted generation calls its draft's `generate` with both a generation config and settings,
    then warns the caller that doing so is deprecated: its own call, nothing a caller can change, so the kit's HF
    runs drop that one line (transformers prints it once per process)."""
    logger, dropped = logging.getLogger("transformers.generation.utils"), _DropInternalNotice()
    logger.addFilter(dropped)
    try:
        yield
    finally:
        logger.removeFilter(dropped)


def pin_assistant_k(draft: torch.nn.Module, k: int) -> None:
    """transformers 5 reads k from the draft's generation config and ignores a generate() argument."""
    config = draft.generation_config
    config.num_assistant_tokens = k
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0


def assisted_kwargs(setup: Setup, k: int, temperature: float | None = None) -> dict:
    """HF assisted generation at a fixed k, greedy or sampling at `temperature`."""
    pin_assistant_k(setup.draft, k)
    return {"assistant_model": setup.draft, **(sampling_kwargs(temperature) if temperature else {"do_sample": False})}


def adaptive_kwargs(setup: Setup, k: int, temperature: float | None = None) -> dict:
    """HF's own adaptive k: from k, +2 after a round that accepts every draft, -1 otherwise, and a draft stopped
    below ADAPTIVE_THRESHOLD. Set afresh each call: the heuristic schedule carries k over from call to call."""
    config = setup.draft.generation_config
    config.num_assistant_tokens, config.num_assistant_tokens_schedule = k, "heuristic"
    config.assistant_confidence_threshold = ADAPTIVE_THRESHOLD
    return {"assistant_model": setup.draft, "do_sample": False}


def lookup_kwargs(setup: Setup, k: int, temperature: float | None = None) -> dict:
    """HF's prompt lookup: up to k drafts per round from n-gram matches, no draft model."""
    return {"prompt_lookup_num_tokens": k, "max_matching_ngram_size": LOOKUP_NGRAM, "do_sample": False}


# generate's arguments for each of HF's own speculative methods. The student package times their tokens; the
# instructor package (`specdec_course.bench.hf_methods`) also reads their rounds off the target's forwards.
HF_KWARGS = {"hf_assisted": assisted_kwargs, "hf_assisted_sampling": assisted_kwargs,
             "hf_prompt_lookup": lookup_kwargs, "hf_adaptive": adaptive_kwargs}


def run_hf(method: str) -> Callable:
    def run(setup: Setup, prompt: str, max_new_tokens: int, k: int, temperature: float | None = None) -> Decoded:
        return generate_tokens(setup, encode(setup, prompt), max_new_tokens, **HF_KWARGS[method](setup, k, temperature))
    return run


def run_decoder(method: str) -> Callable:
    def run(setup: Setup, prompt: str, max_new_tokens: int, k: int, temperature: float | None = None) -> Decoded:
        decoder = setup.decoders[method]
        if temperature:
            result = decoder.speculative_sample(prompt, max_new_tokens, k, temperature=temperature)
        else:
            result = decoder.speculative_decode(prompt, max_new_tokens, k)
        eos = setup.tokenizer.eos_token_id
        return Decoded(list(result.token_ids), list(result.proposed), list(result.accepted),
                       ended_at_eos=bool(result.token_ids) and result.token_ids[-1] == eos)
    return run


RUNNERS = {"target_greedy": run_target_greedy, "target_sampling": run_target_sampling,
           **{method: run_hf(method) for method in HF_KWARGS},
           **{method: run_decoder(method) for method in DECODER_METHODS}}


def encode(setup: Setup, prompt: str) -> torch.Tensor:
    return setup.tokenizer(prompt, return_tensors="pt").input_ids.to(setup.device)
