"""`specdec-kit bench`: a notebook's decoders against target greedy and HF assisted generation.

    specdec-kit bench --pair synthetic-small --k 1,2,4,8 --repeats 3 --out out/bench

The one timing harness: the benchmark, the notebook's benchmark cell and speed check, and grading's speed
test all time through `run_bench`. On one pair, one machine and the same prompts, in one run, it times:
- `target_greedy`: the target's own `generate(do_sample=False)` with its cache (the baseline);
- `hf_assisted`: `generate(assistant_model=draft)` with k pinned in the draft's generation config;
- `no_cache`: the notebook's `SpeculativeDecoder`;
- `cached`: the notebook's `CachedSpeculativeDecoder`;
and, at each temperature of `temperatures` (top-p 1, no top-k), the sampling methods:
- `target_sampling`: the target's own `generate(do_sample=True)` (the baseline of the sampled rows);
- `hf_assisted_sampling`: `generate(assistant_model=draft, do_sample=True)`, HF's speculative sampling;
- `sampling`: the notebook's `SpeculativeSampler`;
and the model-free drafting methods, greedy and so judged against `target_greedy` (tokens identical):
- `hf_prompt_lookup`: `generate(prompt_lookup_num_tokens=k, max_matching_ngram_size=3)`, no draft model;
- `prompt_lookup`: the notebook's `PromptLookupDecoder`;
and the adaptive-k methods, greedy, whose k is the first round's:
- `hf_adaptive`: `generate(assistant_model=draft)` with HF's heuristic schedule and confidence threshold 0.4;
- `adaptive`: the notebook's `AdaptiveSpeculativeDecoder`.
HF's rows hold their tokens and forward counts; their rounds and acceptance are read off the target's forwards
only by the instructor package (`specdec_course.bench.hf_methods`), since that reading would answer the checks.
Sampled rows are compared with `target_sampling` at their temperature: the same
distribution, not the same tokens. Each method gets a warm-up; methods run interleaved per prompt and repeat,
with their order rotated, so drift hits all alike. Forward calls are counted and timed by hooks on the models
(`timing.py`), never taken from the decoder. The figures (`rows`, `summary`, `by_category`, `micro`) follow
`bench_schema.json`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import platform
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pandas as pd
import torch
import transformers
from tqdm.auto import tqdm

from . import zoo
from .baseline import target_greedy
from .loading import load_model
from .machine import busy_warning, cores, other_busy_cores
from .prompts import Prompt
from .result import Acceptance, acceptance, accepted_by_position
from .theory import forward_bound_speedup, leviathan_speedup
from .timing import ForwardRecorder, NoProgress, Observer, median_forward_seconds, synchronize, timed
from .tracebacks import library_name, render

SCHEMA_VERSION = 4
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
SAMPLING_SEED = 0
CONTEXT_LEN = 128  # cache length the micro-benchmark's forwards run on
MICRO_REPEATS = 15
WARMUP_TOKENS = 8


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


# Before anything heavy, each decoder to be timed decodes this on the tiny pair (seconds on a CPU).
PREFLIGHT_PROMPT, PREFLIGHT_TOKENS, PREFLIGHT_K = "The future of Artificial Intelligence is", 12, 3


class NotReadyError(ValueError):
    """A notebook's decoder cannot be benchmarked yet: on the tiny pair it fails or gives other tokens."""

    def _render_traceback_(self) -> list[str]:
        return render(self)


# The test that shows each class works, named where a demo cell finds it unfinished.
PASS_FIRST = {"SpeculativeDecoder": "test_exact", "CachedSpeculativeDecoder": "test_cached_exact",
              "SpeculativeSampler": "test_sampling", "PromptLookupDecoder": "test_lookup",
              "AdaptiveSpeculativeDecoder": "test_adaptive"}


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


# ---------------------------------------------------------------------------------------------
# Measuring


def acceptance_figures(drafts: Acceptance) -> dict:
    """The row's acceptance columns (bench_schema.json): rate, alpha, tokens per round and the counts."""
    return {"acceptance_rate": drafts.rate, "alpha": drafts.alpha, "tokens_per_round": drafts.tokens_per_round,
            "rounds": drafts.rounds, "accepted": drafts.accepted, "proposed": drafts.proposed,
            "rejections": drafts.rejections}


def measure(setup: Setup, method: str, prompt: Prompt, k: int | None, max_new_tokens: int,
            temperature: float | None = None, runners: dict[str, Callable] = RUNNERS) -> tuple[Decoded, dict]:
    """Run one method once, timed, with both models' forwards counted and timed by hooks."""
    with ForwardRecorder(_model_of(setup, method, "target")) as target_calls, \
            ForwardRecorder(_model_of(setup, method, "draft")) as draft_calls:
        outcome, seconds = timed(setup.device, runners[method], setup, prompt.text, max_new_tokens, k, temperature)
    row = {
        "method": method, "k": k, "temperature": temperature, "prompt_id": prompt.id, "category": prompt.category,
        "new_tokens": len(outcome.token_ids), "seconds": seconds, "tokens_per_s": len(outcome.token_ids) / seconds,
        "target_forwards": len(target_calls), "draft_forwards": len(draft_calls),
        "target_input_lengths": [c.new_tokens for c in target_calls],
        "draft_input_lengths": [c.new_tokens for c in draft_calls],
        "forward_seconds": target_calls.seconds + draft_calls.seconds,
    }
    if outcome.proposed is None:
        row.update(acceptance_rate=None, alpha=None, tokens_per_round=None)
    else:
        row.update(acceptance_figures(acceptance(outcome.proposed, outcome.accepted, len(outcome.token_ids),
                                                 outcome.ended_at_eos)),
                   proposed_by_round=list(outcome.proposed), accepted_by_round=list(outcome.accepted))
    return outcome, row


def _model_of(setup: Setup, method: str, role: str) -> torch.nn.Module:
    own = getattr(setup.decoders[method], f"{role}_model") if method in DECODER_METHODS else None
    return own or (setup.target if role == "target" else setup.draft)  # a lookup decoder has no draft model


def micro_benchmark(setup: Setup, k_values: list[int], context_len: int = CONTEXT_LEN) -> dict:
    """Median seconds of single forwards on a cache of `context_len`: the costs the theory needs."""
    gen = torch.Generator().manual_seed(0)
    context = torch.randint(0, len(setup.tokenizer), (1, context_len), generator=gen).to(setup.device)

    def median_forward(model, new_tokens: int) -> float:
        return median_forward_seconds(model, context, new_tokens, MICRO_REPEATS, gen)

    return {
        "context_len": context_len, "threads": torch.get_num_threads(),
        "target_1": median_forward(setup.target, 1), "draft_1": median_forward(setup.draft, 1),
        "target_verify": {str(k): median_forward(setup.target, k + 1) for k in k_values},
    }


def summarize(rows: list[dict], micro: dict) -> list[dict]:
    """One entry per method and k: medians, paired speedups and the theory beside them."""
    table = pd.DataFrame(rows)
    if "temperature" not in table:
        table["temperature"] = None
    c = micro["draft_1"] / micro["target_1"]
    summary = []
    keys = ["method", table.k.fillna(-1), table.temperature.fillna(-1)]
    for (method, k, temperature), group in table.groupby(keys, sort=False):
        k = None if k == -1 else int(k)
        temperature = None if temperature == -1 else float(temperature)
        base = table[(table.method == baseline_of(method)) & (table.temperature.fillna(-1) == (temperature or -1))]
        base_s_per_token = base.seconds.sum() / base.new_tokens.sum()
        base = base.set_index(["prompt_id", "repeat"])["tokens_per_s"]
        paired = group.tokens_per_s.to_numpy() / base.loc[list(zip(group.prompt_id, group.repeat))].to_numpy()
        identical = group.identical_to_target.dropna()
        entry = {
            "method": method, "k": k, "temperature": temperature, "tokens_per_s": float(group.tokens_per_s.median()),
            "speedup": float(pd.Series(paired).median()),
            "speedup_q1": float(pd.Series(paired).quantile(0.25)),
            "speedup_q3": float(pd.Series(paired).quantile(0.75)),
            "acceptance_rate": None, "alpha": None, "tokens_per_round": None, "c": c,
            "predicted_speedup": None, "forward_bound_speedup": None,
            "efficiency": float(group.forward_seconds.sum() / group.seconds.sum()),
            **forwards_per_token(group),
            "identical_all": bool(identical.all()) if len(identical) else None,
        }
        if k is not None:
            drafts = Acceptance(int(group.proposed.sum()), int(group.accepted.sum()), int(group.rejections.sum()),
                                int(group.rounds.sum()), int(group.new_tokens.sum()))
            verify = micro["target_verify"].get(str(k))
            entry.update({
                "acceptance_rate": drafts.rate, "alpha": drafts.alpha, "tokens_per_round": drafts.tokens_per_round,
                "predicted_speedup": None if drafts.alpha is None else leviathan_speedup(drafts.alpha, k, c),
                "accepted_by_position": by_position(group, k),
                "forward_bound_speedup": forward_bound_speedup(drafts.tokens_per_round, base_s_per_token, k,
                                                               micro["draft_1"], verify)
                if verify and drafts.tokens_per_round else None,
            })
        summary.append(entry)
    return summary


def by_position(rows: pd.DataFrame, k: int) -> list[float | None] | None:
    """accepted_by_position over the rows that kept their per-round counts (HF's methods report none)."""
    kept = rows[[isinstance(counts, list) for counts in rows.get("proposed_by_round", pd.Series(index=rows.index))]]
    return accepted_by_position(list(kept.proposed_by_round), list(kept.accepted_by_round), k) if len(kept) else None


def forwards_per_token(rows: pd.DataFrame) -> dict:
    """Target and draft forward passes per new token over `rows`: the cost the clock does not see."""
    tokens = rows.new_tokens.sum()
    return {"target_forwards_per_token": float(rows.target_forwards.sum() / tokens),
            "draft_forwards_per_token": float(rows.draft_forwards.sum() / tokens)}


def summarize_by_category(rows: list[dict]) -> list[dict]:
    """Per method, k and prompt category: forwards per token and the median paired speedup over target greedy
    (greedy methods only: where each kind of drafting wins depends on what the text repeats)."""
    table = pd.DataFrame(rows)
    greedy = table[table.temperature.isna()] if "temperature" in table else table
    base = greedy[greedy.method == "target_greedy"].set_index(["prompt_id", "repeat"])["tokens_per_s"]
    entries = []
    for (method, k, category), group in greedy[greedy.k.notna()].groupby(["method", "k", "category"], sort=False):
        paired = group.tokens_per_s.to_numpy() / base.loc[list(zip(group.prompt_id, group.repeat))].to_numpy()
        entries.append({"method": method, "k": int(k), "category": category, "prompts": int(group.prompt_id.nunique()),
                        "speedup": float(pd.Series(paired).median()), **forwards_per_token(group)})
    return entries


def baseline_of(method: str) -> str:
    """What a method's speedup is measured against: the target's own sampling for sampled methods."""
    return "target_sampling" if method in SAMPLING_METHODS else "target_greedy"


# ---------------------------------------------------------------------------------------------
# The run


def bench_plan(methods: list[str], k_values: list[int], temperatures: list[float] = (),
               adaptive_k: list[int] | None = None) -> list[tuple]:
    """(method, k, temperature) of every timed configuration, each side's baseline first; the adaptive methods
    start from each of `adaptive_k` (default: k_values)."""
    greedy = [m for m in methods if m not in SAMPLING_METHODS]
    sampled = [m for m in methods if m in SAMPLING_METHODS]
    if sampled and not temperatures:
        raise ValueError(f"{', '.join(sampled)} sample: give the temperatures to sample at (--temperatures 0.7,1.0)")
    plan = []
    if greedy:  # target greedy is the baseline every greedy speedup is paired with
        plan += [("target_greedy", None, None)]
        plan += [(m, k, None) for k in k_values for m in greedy if m not in BASELINES
                 and (m not in ADAPTIVE_METHODS or adaptive_k is None or k in adaptive_k)]
    for temperature in temperatures if sampled else ():
        plan += [("target_sampling", None, temperature)]
        plan += [(m, k, temperature) for k in k_values for m in sampled if m not in BASELINES]
    return plan


def interleaved(plan: list, prompts: list, repeats: int):
    """(repeat, prompt, plan's entries in this run's order): every entry once per prompt and repeat, the order
    rotated from run to run so that drift hits all alike. The benchmark, `benchmark_decoder` and grading's speed
    test all time in this order."""
    for repeat in range(repeats):
        for index, prompt in enumerate(prompts):
            shift = (repeat + index) % len(plan)
            yield repeat, prompt, plan[shift:] + plan[:shift]


def run_bench(setup: Setup, prompts: list[Prompt], k_values: list[int], repeats: int,
              methods: list[str], max_new_tokens: int | None = None, progress: bool = True,
              micro: bool = True, temperatures: list[float] = (),
              micro_k_values: list[int] | None = None, adaptive_k: list[int] | None = None,
              runners: dict[str, Callable] = RUNNERS) -> tuple[list, dict]:
    """All rows (method x k x temperature x prompt x repeat) and the micro-benchmark (unless `micro` is False; of
    verification at `micro_k_values`, default `k_values`), methods interleaved, each run by `runners[method]`.
    Sampled rows draw from torch's generator, seeded once here."""
    plan = bench_plan(methods, k_values, temperatures, adaptive_k)
    torch.manual_seed(SAMPLING_SEED)
    warm = prompts[0]
    for method, k, temperature in plan:  # warm-up: first calls pay for allocation, kernel selection and caches
        runners[method](setup, warm.text, WARMUP_TOKENS, k, temperature)
    rows = []
    bar = tqdm(total=repeats * len(prompts) * len(plan), desc="bench", disable=not progress)
    for repeat, prompt, order in interleaved(plan, prompts, repeats):
        budget = max_new_tokens or prompt.max_new_tokens
        outcomes = {}
        for method, k, temperature in order:
            outcomes[(method, k, temperature)] = measure(setup, method, prompt, k, budget, temperature, runners)
            bar.update()
        greedy = outcomes.get(("target_greedy", None, None))
        for (_, _, temperature), (outcome, row) in outcomes.items():
            # Sampled text has the target's distribution, never its tokens: nothing to compare.
            same = None if temperature else outcome.token_ids == greedy[0].token_ids
            rows.append(row | {"repeat": repeat, "identical_to_target": same})
    bar.close()
    return rows, micro_benchmark(setup, micro_k_values or k_values) if micro else {}


def make_setup(target_name: str, draft_name: str, decoder_classes: dict[str, type], device: torch.device,
               dtype: torch.dtype | None, methods: list[str]) -> Setup:
    target, tokenizer = load_model(target_name, device, dtype)
    draft, _ = load_model(draft_name, device, dtype)
    decoders = {m: decoder_classes[DECODER_METHODS[m]](target_name, draft_name, device=str(device), dtype=dtype)
                for m in methods if m in DECODER_METHODS}
    return Setup(target, draft, tokenizer, decoders, device)


def compare(decoder_classes: dict[str, type], target: str, draft: str, prompts: list[Prompt], k_values: list[int],
            *, pair: str | None = None, repeats: int = 3, methods: list[str] = METHODS, device: str = "cpu",
            dtype: torch.dtype | None = None, max_new_tokens: int | None = None, progress: bool = True,
            temperatures: list[float] = (), micro_k_values: list[int] | None = None,
            adaptive_k: list[int] | None = None, runners: dict[str, Callable] = RUNNERS) -> dict:
    """Load, run every method and return the bench document: what `bench`, `demo` and notebooks call.

    `decoder_classes` maps class names (SpeculativeDecoder, CachedSpeculativeDecoder, SpeculativeSampler) to a
    notebook's classes; `no_cache`, `cached` and `sampling` need the one they run. `max_new_tokens` (None: each
    prompt's own) caps every decode; the sampling methods run at each of `temperatures`, the adaptive ones from
    each of `adaptive_k` (default: every k); `micro_k_values` (default: k_values) are the verification lengths
    (k + 1) the micro-benchmark times; `runners` runs each method (the instructor package adds HF's own).
    """
    from .loading import resolve_device

    device = resolve_device(device)
    bench_plan(list(methods), k_values, temperatures)  # refuses sampling methods without a temperature
    preflight(decoder_classes, methods, say=print if progress else None)
    setup = make_setup(target, draft, decoder_classes, device, dtype, list(methods))
    machine = {"cores": cores(), "threads": torch.get_num_threads(), "busy_cores_before": other_busy_cores()}
    warn(busy_warning(machine["busy_cores_before"], machine["threads"]), progress)
    rows, micro = run_bench(setup, prompts, k_values, repeats, list(methods), max_new_tokens, progress=progress,
                            temperatures=temperatures, micro_k_values=micro_k_values, adaptive_k=adaptive_k,
                            runners=runners)
    machine["busy_cores_after"] = other_busy_cores()
    warn(busy_warning(machine["busy_cores_after"], machine["threads"], when="as the benchmark ended"), progress)
    return report(setup, rows, micro, pair=pair, target=target, draft=draft, k_values=k_values, machine=machine)


def warn(warning: str | None, progress: bool) -> None:
    if warning and progress:
        print(warning)


def preflight(decoder_classes: dict[str, type], methods, say: Callable[[str], None] | None = print) -> None:
    """Each decoder that `methods` time must decode one prompt on the tiny pair as the target does, before
    the benchmark loads its pair: an unfinished or wrong decoder fails in seconds, saying what to do."""
    from transformers.utils import logging as hf_logging

    from .baseline import zoo_greedy

    expected = list(zoo_greedy("tiny", PREFLIGHT_PROMPT, PREFLIGHT_TOKENS))
    for name in dict.fromkeys(DECODER_METHODS[m] for m in methods if m in DECODER_METHODS):
        try:
            bars = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()  # loading bars for a seconds-long check would drown its line
            try:
                decoder = decoder_classes[name](*(str(p) for p in zoo.materialize("tiny")), device="cpu")
            finally:
                if bars:
                    hf_logging.enable_progress_bar()
            with Observer(decoder, lambda event: None) as observer:  # only to stop a decode that never ends
                observer.expect_tokens(PREFLIGHT_TOKENS)
                sampler = name == DECODER_METHODS["sampling"]
                decode = decoder.speculative_sample if sampler else decoder.speculative_decode
                got = list(decode(PREFLIGHT_PROMPT, PREFLIGHT_TOKENS, PREFLIGHT_K).token_ids)
        except NotImplementedError as e:
            raise NotReadyError(f"{name} is not finished: {unfinished(e)} still raises NotImplementedError. "
                                f"Write it and pass {PASS_FIRST.get(name, 'the tests of its part')} first; this cell "
                                "runs finished decoders") from None
        except (Exception, NoProgress) as e:
            raise NotReadyError(f"{name} failed on the tiny pair before running here: {type(e).__name__}: {e}. "
                                f"Pass {PASS_FIRST.get(name, 'the tests of its part')} first") from e
        if sampler:  # sampled tokens follow the target only in distribution: check the budget alone
            if len(got) != PREFLIGHT_TOKENS and got[-1:] != [decoder.target_tokenizer.eos_token_id]:
                raise NotReadyError(f"{name} returned {len(got)} tokens for max_tokens={PREFLIGHT_TOKENS} on the "
                                    "tiny pair: pass test_sampling first")
        elif got != expected:
            raise NotReadyError(f"{name} does not give the target's greedy tokens on the tiny pair (got {got}, "
                                f"expected {expected}): pass test_exact first")
        if say:
            say(f"{name} decodes the tiny pair {'within its budget' if sampler else 'as its target does'}: "
                "benchmarking it")


def unfinished(error: BaseException) -> str:
    """The student's method that raised `error` (the innermost frame of their own code), as `Class.name()`."""
    tb, name = error.__traceback__, ""
    while tb is not None:
        if library_name(tb.tb_frame.f_code.co_filename) is None:
            code = tb.tb_frame.f_code
            name = getattr(code, "co_qualname", code.co_name)  # Python 3.11 names the class too
        tb = tb.tb_next
    return f"{name}()" if name and not name.startswith("<") else "one of its methods"


class NotReady:
    """Stands in for a decoder that `preflight` found unfinished: any use of it raises the NotReadyError that says
    what to finish first, so that every cell that uses it says so (and none fails on a name never defined)."""

    def __init__(self, error: NotReadyError):
        self._error = error

    def __getattr__(self, name: str):
        raise NotReadyError(str(self._error))

    def __repr__(self) -> str:
        return f"<not ready: {self._error}>"


def finished(decoder_classes: dict[str, type], methods, say: Callable[[str], None] = print) -> bool:
    """Whether every decoder that `methods` time passes `preflight` (seconds, on the tiny pair); where one does not,
    `say` says in one line which and what to finish first, so that a bonus part's demo skips its benchmark instead of
    failing the notebook's run."""
    try:
        preflight(decoder_classes, methods, say=None)
    except NotReadyError as e:
        say(f"Skipped until it is finished: {e}")
        return False
    return True


def bonus_compare(decoder_classes: dict[str, type], methods: list[str], sweep: Sweep, pair: str, device: str,
                  run: bool, say: Callable[[str], None] = print) -> dict | None:
    """A bonus part's demo cell: `compare` of `methods` on the benchmark cell's `sweep`, once every decoder they time
    is finished (`finished`) and `run` (the notebook's BONUS_SWEEPS) is set; else None, saying in one line why."""
    from .loading import resolve_pair
    from .prompts import load_prompts

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


def checked_decoder(decoder_class: type, target: str, draft: str, device: str = "cpu", **init):
    """`decoder_class(target, draft, device=device, **init)` once it decodes the tiny pair as its target does
    (`preflight`, seconds); until then a `NotReady` stand-in that says what to finish first wherever it is used."""
    try:
        preflight({decoder_class.__name__: decoder_class}, [m for m, name in DECODER_METHODS.items()
                                                            if name == decoder_class.__name__], say=None)
    except NotReadyError as e:
        return NotReady(e)
    return decoder_class(target, draft, device=device, **init)


def report(setup: Setup, rows: list[dict], micro: dict, *, pair: str | None, target: str, draft: str,
           k_values: list[int], machine: dict | None = None) -> dict:
    """The JSON document `bench` writes (see bench_schema.json)."""
    public = ("method", "k", "temperature", "prompt_id", "category", "repeat", "new_tokens", "seconds", "tokens_per_s",
              "acceptance_rate", "alpha", "tokens_per_round", "target_forwards", "draft_forwards",
              "identical_to_target", "target_input_lengths", "draft_input_lengths", "forward_seconds", "rounds",
              "proposed", "accepted", "rejections", "proposed_by_round", "accepted_by_round")
    return {
        "version": SCHEMA_VERSION, "pair": pair, "target": target, "draft": draft,
        "device": _device_name(setup.device), "dtype": str(setup.target.dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(), "torch": torch.__version__, "transformers": transformers.__version__,
        "python": platform.python_version(), "k_values": k_values, "micro": micro,
        **({"machine": machine} if machine else {}),
        "rows": [{key: _plain(row.get(key)) for key in public} for row in rows],
        "summary": [{key: _plain(value) for key, value in entry.items()} for entry in summarize(rows, micro)],
        "by_category": [{key: _plain(value) for key, value in entry.items()}
                        for entry in (summarize_by_category(rows) if "target_greedy" in {r["method"] for r in rows}
                                      else [])],
    }


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({platform.processor() or platform.machine()})"


def _plain(value):
    """JSON-safe: numpy scalars to Python, NaN to null."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def schema() -> dict:
    return json.loads((resources.files("specdec_kit") / "bench_schema.json").read_text())


def validate(document: dict) -> None:
    """Raise jsonschema.ValidationError unless `document` follows bench_schema.json."""
    import jsonschema

    jsonschema.validate(document, schema())


def write_outputs(document: dict, out_dir: Path, json_path: Path | None = None) -> dict[str, Path]:
    """Validate, then write bench.json, bench.csv and bench.png under `out_dir`."""
    from .plot import plot_bench

    validate(document)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": json_path or out_dir / "bench.json", "csv": out_dir / "bench.csv", "png": out_dir / "bench.png"}
    paths["json"].write_text(json.dumps(document, indent=1) + "\n")
    pd.DataFrame(document["rows"]).drop(columns=["target_input_lengths", "draft_input_lengths"]).to_csv(
        paths["csv"], index=False)
    plot_bench(document).savefig(paths["png"], dpi=120, bbox_inches="tight")
    return paths


def benchmark_decoder(decoder, prompt: str, max_tokens: int = 100, num_runs: int = 3,
                      compare_baseline: bool = True, num_speculative_tokens: int = 4) -> dict:
    """The course's `benchmark` method, answered by this harness for one prompt and one decoder.

    Times `decoder` (and, with `compare_baseline`, the target's own greedy decoding on the same
    models) with warm-up, synchronisation and interleaving, and returns the harness's figures.
    """
    device = decoder.target_model.device
    setup = Setup(decoder.target_model, decoder.draft_model, decoder.target_tokenizer,
                  {"cached": decoder}, device)
    methods = ["target_greedy", "cached"] if compare_baseline else ["cached"]
    one = Prompt("prompt", "user", prompt, max_tokens)
    plan = [(m, None if m == "target_greedy" else num_speculative_tokens) for m in methods]
    for method, k in plan:
        RUNNERS[method](setup, prompt, WARMUP_TOKENS, k)
    rows = []
    for repeat, _, order in interleaved(plan, [one], num_runs):
        for method, k in order:
            outcome, row = measure(setup, method, one, k, max_tokens)
            rows.append(row | {"repeat": repeat, "tokens": outcome.token_ids})
    spec = [r for r in rows if r["method"] == "cached"]
    result = {
        "num_runs": num_runs, "k": num_speculative_tokens, "new_tokens": spec[0]["new_tokens"],
        "times": [r["seconds"] for r in spec], "tokens_per_s": statistics.median(r["tokens_per_s"] for r in spec),
        "acceptance_rate": spec[0]["acceptance_rate"], "tokens_per_round": spec[0]["tokens_per_round"],
        "target_forwards": spec[0]["target_forwards"],
    }
    if compare_baseline:
        base = [r for r in rows if r["method"] == "target_greedy"]
        ratios = [s["tokens_per_s"] / b["tokens_per_s"] for s, b in zip(spec, base)]
        result.update({
            "baseline_times": [r["seconds"] for r in base],
            "baseline_tokens_per_s": statistics.median(r["tokens_per_s"] for r in base),
            "speedup": statistics.median(ratios),
            "latency_reduction": 1 - statistics.median(s["seconds"] / b["seconds"] for s, b in zip(spec, base)),
            "identical_to_target": all(s["tokens"] == base[0]["tokens"] for s in spec),
        })
    synchronize(device)
    return result
