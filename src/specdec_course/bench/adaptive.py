"""`specdec-course adaptive`: adaptive k against every fixed k and HF's own schedule, on several pairs in one run.

    specdec-course adaptive --pairs tiny,tiny-b,synthetic-small --k 1,2,3,4,6,8 --repeats 2 --out out/adaptive

On each pair the benchmark times target greedy, the notebook's `CachedSpeculativeDecoder` at every k, and, only from
the first k `FIRST_K` (the notebook's default; neither is told the pair's best k), HF's heuristic schedule
(`hf_adaptive`) and the notebook's `AdaptiveSpeculativeDecoder` (`adaptive`). Two judgements per pair:
- cost: the seconds of a token's forwards, each target forward priced by the micro-benchmark's median for its
  input length (measured at every length 1..MAX_K + 1 that adaptive k may feed) and each draft forward at one
  draft step. Forward counts are deterministic, so this is too, given one run's prices.
  Adaptive passes within `TOLERANCE` of the best fixed k's cost and at or below HF's schedule's.
- time: the median over prompts and repeats of adaptive's tokens/s over the other method's on the same prompt and
  repeat, with half its interquartile range as the margin: at least 1 - TOLERANCE - margin against the best
  fixed k (best by this time), at least 1 - margin against HF's schedule.
The bar (`bar_met`): adaptive passes both on at least two pairs whose best fixed k differ.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

FIRST_K = 4  # the first round's k for both adaptive methods: the notebook's default num_speculative_tokens
TOLERANCE = 0.05  # how far above the best fixed k adaptive may land
MAX_K = 16  # AdaptiveSpeculativeDecoder's default max_k: the micro-benchmark prices target forwards up to MAX_K + 1
METHODS = ["target_greedy", "cached", "hf_adaptive", "adaptive"]


def forward_seconds(row: dict, micro: dict) -> float:
    """The row's forwards priced by the micro-benchmark: target forwards by input length, draft forwards by one step."""
    ks = sorted(int(k) for k in micro["target_verify"])
    lengths = [1] + [k + 1 for k in ks]
    prices = [micro["target_1"]] + [micro["target_verify"][str(k)] for k in ks]
    target = float(np.interp(row["target_input_lengths"], lengths, prices).sum())
    return target + micro["draft_1"] * row["draft_forwards"]


def costs(document: dict) -> pd.DataFrame:
    """Per method and k (speculative methods): priced seconds per token, and forwards per token."""
    rows = pd.DataFrame(document["rows"])
    rows = rows[rows.k.notna()].copy()
    rows["priced"] = [forward_seconds(row, document["micro"]) for row in rows.to_dict("records")]
    table = rows.groupby(["method", "k"])[["priced", "target_forwards", "draft_forwards", "new_tokens"]].sum()
    return pd.DataFrame({"cost_per_token": table.priced / table.new_tokens,
                         "target_forwards_per_token": table.target_forwards / table.new_tokens,
                         "draft_forwards_per_token": table.draft_forwards / table.new_tokens})


def paired_ratio(document: dict, method: str, k: int, other: str, other_k: int) -> tuple[float, float]:
    """(median, half the interquartile range) over prompts and repeats of method's tokens/s over other's."""
    rows = pd.DataFrame(document["rows"])
    mine = rows[(rows.method == method) & (rows.k == k)].set_index(["prompt_id", "repeat"]).tokens_per_s
    theirs = rows[(rows.method == other) & (rows.k == other_k)].set_index(["prompt_id", "repeat"]).tokens_per_s
    ratio = (mine / theirs.loc[mine.index]).to_numpy()
    q1, median, q3 = np.quantile(ratio, [0.25, 0.5, 0.75])
    return float(median), float((q3 - q1) / 2)


def judge(document: dict, first_k: int = FIRST_K, tolerance: float = TOLERANCE) -> dict:
    """The verdict on one pair's bench document (which must hold METHODS at `first_k` and at least one other k)."""
    table = costs(document)
    fixed = table.loc["cached"].cost_per_token
    best_k = int(fixed.idxmin())
    adaptive, hf = table.loc[("adaptive", first_k)], table.loc[("hf_adaptive", first_k)]
    summary = pd.DataFrame(document["summary"]).set_index(["method", "k"])
    fastest_k = int(summary.loc["cached"].speedup.idxmax())
    vs_best, best_margin = paired_ratio(document, "adaptive", first_k, "cached", fastest_k)
    vs_hf, hf_margin = paired_ratio(document, "adaptive", first_k, "hf_adaptive", first_k)
    return {
        "pair": document["pair"], "first_k": first_k, "best_fixed_k": best_k,
        "cost_per_token": {"best_fixed": float(fixed[best_k]), "adaptive": float(adaptive.cost_per_token),
                           "hf_adaptive": float(hf.cost_per_token), **{f"k={k}": float(v) for k, v in fixed.items()}},
        "target_forwards_per_token": {"best_fixed": float(table.loc[("cached", best_k)].target_forwards_per_token),
                                      "adaptive": float(adaptive.target_forwards_per_token),
                                      "hf_adaptive": float(hf.target_forwards_per_token)},
        "cost_within_tolerance": bool(adaptive.cost_per_token <= (1 + tolerance) * fixed[best_k]),
        "cost_at_most_hf": bool(adaptive.cost_per_token <= hf.cost_per_token),
        "fastest_fixed_k": fastest_k,
        "tokens_per_s_vs_fastest_fixed": {"median": vs_best, "margin": best_margin},
        "tokens_per_s_vs_hf": {"median": vs_hf, "margin": hf_margin},
        "time_within_tolerance": bool(vs_best >= 1 - tolerance - best_margin),
        "time_at_least_hf": bool(vs_hf >= 1 - hf_margin),
    }


def passed(verdict: dict) -> bool:
    return all(verdict[key] for key in ("cost_within_tolerance", "cost_at_most_hf", "time_within_tolerance",
                                        "time_at_least_hf"))


def bar_met(verdicts: list[dict]) -> bool:
    """Adaptive passes on at least two pairs whose best fixed k differ."""
    return len({v["best_fixed_k"] for v in verdicts if passed(v)}) >= 2


def verdict_table(verdicts: list[dict]) -> str:
    """The judgements side by side, one column per pair."""
    lines = {}
    for v in verdicts:
        cost, time = v["cost_per_token"], v["tokens_per_s_vs_fastest_fixed"]
        lines[v["pair"]] = {
            "best fixed k (cost)": v["best_fixed_k"],
            "ms/token: best fixed k": f"{1000 * cost['best_fixed']:.2f}",
            f"ms/token: adaptive (k from {v['first_k']})": f"{1000 * cost['adaptive']:.2f}",
            f"ms/token: HF heuristic (k from {v['first_k']})": f"{1000 * cost['hf_adaptive']:.2f}",
            "adaptive / best fixed (cost)": f"{cost['adaptive'] / cost['best_fixed']:.3f}",
            "adaptive / HF (cost)": f"{cost['adaptive'] / cost['hf_adaptive']:.3f}",
            "fastest fixed k (tokens/s)": v["fastest_fixed_k"],
            "adaptive / fastest fixed (tokens/s)": f"{time['median']:.3f} +- {time['margin']:.3f}",
            "adaptive / HF (tokens/s)": f"{v['tokens_per_s_vs_hf']['median']:.3f} +- "
                                        f"{v['tokens_per_s_vs_hf']['margin']:.3f}",
            "passes": "yes" if passed(v) else "no",
        }
    return pd.DataFrame(lines).to_string()


def write(verdicts: list[dict], out_dir: Path) -> Path:
    path = out_dir / "adaptive.json"
    path.write_text(json.dumps({"tolerance": TOLERANCE, "verdicts": verdicts}, indent=1) + "\n")
    return path
