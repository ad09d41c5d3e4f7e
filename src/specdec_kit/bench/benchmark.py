"""`specdec-kit bench`: a notebook's decoders against target greedy and HF assisted generation.

    specdec-kit bench --pair synthetic-small --k 1,2,4,8 --repeats 3 --out out/bench

The one timing harness: the benchmark, the notebook's benchmark cell and speed check, and grading's speed
test all time through `run_bench`. On one pair, one machine and the same prompts, in one run, it times the
methods of `runners.py` (target greedy, HF assisted generation, the notebook's decoders; the sampling methods at
each temperature of `temperatures`, the model-free lookups, the adaptive-k methods), each run by its runner.
Sampled rows are compared with `target_sampling` at their temperature: the same
distribution, not the same tokens. Each method gets a warm-up; methods run interleaved per prompt and repeat,
with their order rotated, so drift hits all alike. Forward calls are counted and timed by hooks on the models
(`core/timing.py`), never taken from the decoder. The figures (`rows`, `summary`, `by_category`, `micro`) follow
`bench_schema.json`. Each decoder to be timed passes `readiness.preflight` first.
"""

from __future__ import annotations

import json
import math
import platform
import statistics
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import pandas as pd
import torch
import transformers
from tqdm.auto import tqdm

from ..core.prompts import Prompt
from ..core.result import Acceptance, acceptance, accepted_by_position
from ..core.theory import forward_bound_speedup, leviathan_speedup
from ..core.timing import ForwardRecorder, median_forward_seconds, synchronize, timed
from ..models.loading import load_model
from .machine import busy_warning, cores, other_busy_cores
from .readiness import preflight
from .runners import ADAPTIVE_METHODS, BASELINES, DECODER_METHODS, METHODS, RUNNERS, SAMPLING_METHODS, Decoded, Setup

SCHEMA_VERSION = 4
SAMPLING_SEED = 0
CONTEXT_LEN = 128  # cache length the micro-benchmark's forwards run on
MICRO_REPEATS = 15
WARMUP_TOKENS = 8


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
    from ..models.loading import resolve_device

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
    return json.loads((resources.files("specdec_kit.bench") / "bench_schema.json").read_text())


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
