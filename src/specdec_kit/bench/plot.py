"""Speedup and acceptance rate against k, from a `bench` document, beside the theory curves; and acceptance by draft
position against alpha^i.

    from specdec_kit.bench.plot import plot_bench, plot_acceptance_by_position
    plot_bench(json.load(open("out/bench/bench.json")))   # a matplotlib Figure; shows inline in notebooks
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from ..core.theory import leviathan_speedup
from .machine import too_busy

STYLE = {"hf_assisted": ("tab:orange", "s"), "no_cache": ("tab:gray", "^"), "cached": ("tab:blue", "o"),
         "hf_assisted_sampling": ("tab:brown", "D"), "sampling": ("tab:purple", "v"),
         "hf_prompt_lookup": ("tab:olive", "P"), "prompt_lookup": ("tab:cyan", "X"),
         "hf_adaptive": ("tab:pink", "<"), "adaptive": ("tab:red", ">")}
SAMPLED_LINES = ("--", "-.", ":")  # one line style per temperature of the sampled methods
CAPTION_HEIGHT = 0.08  # of the figure, under the legend


def plot_bench(document: dict, theory_method: str = "cached"):
    """Two panels: speedup over the target alone (median, interquartile bars) and acceptance rate, by k.

    Greedy methods are compared with target greedy; sampled methods (dashed, one style per temperature) with
    the target's own sampling at their temperature.

    Theory, for `theory_method`: Leviathan et al.'s expected speedup from its measured alpha and c, and
    the forward-bound speedup from the measured forward times (what zero overhead would give).
    """
    summary = pd.DataFrame(document["summary"])
    if "temperature" not in summary:
        summary["temperature"] = None
    speculative = summary[summary.k.notna()].sort_values("k")
    temperatures = sorted(speculative.temperature.dropna().unique())
    fig, (ax_speed, ax_accept) = plt.subplots(1, 2, figsize=(11, 4.2))
    for (method, temperature), group in speculative.groupby(["method", speculative.temperature.fillna(0)],
                                                           sort=False):
        color, marker = STYLE.get(method, ("black", "x"))
        line = SAMPLED_LINES[temperatures.index(temperature) % len(SAMPLED_LINES)] if temperature else "-"
        label = f"{method} (T={temperature:g})" if temperature else method
        errors = [group.speedup - group.speedup_q1, group.speedup_q3 - group.speedup]
        ax_speed.errorbar(group.k, group.speedup, yerr=errors, color=color, marker=marker, ls=line, capsize=3,
                          label=label)
        ax_accept.plot(group.k, group.acceptance_rate, color=color, marker=marker, ls=line, label=label)
    theory = speculative[(speculative.method == theory_method) & speculative.temperature.isna()]
    if len(theory):
        ks = [int(k) for k in theory.k]
        ax_speed.plot(ks, [leviathan_speedup(a, k, c) for a, k, c in zip(theory.alpha, ks, theory.c)],
                      ls="--", color="tab:green", label=f"Leviathan (alpha, c of {theory_method})")
        ax_speed.plot(ks, theory.forward_bound_speedup, ls=":", color="tab:red",
                      label=f"forward-bound ({theory_method})")
    ax_speed.axhline(1.0, color="black", lw=0.8)
    ax_speed.set(xlabel="k (draft tokens per step)",
                 ylabel="speedup over target greedy" if not temperatures else "speedup over the target alone",
                 title="Speedup")
    ax_accept.set(xlabel="k (draft tokens per step)", ylabel="accepted / proposed draft tokens",
                  title="Acceptance rate", ylim=(0, 1.05))
    for ax in (ax_speed, ax_accept):
        ax.set_xticks(sorted({int(k) for k in speculative.k}))
        ax.grid(alpha=0.3)
    # One legend under both panels, so that it never covers a curve (the speed panel's names every line).
    handles, labels = ax_speed.get_legend_handles_labels()
    columns = min(len(labels), 5)
    # The caption (two lines at most) under the legend.
    fig.text(0.5, 0.005, caption(document), ha="center", va="bottom", fontsize=8, wrap=True)
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, CAPTION_HEIGHT), ncol=columns, fontsize=8,
               frameon=False)
    fig.suptitle(f"{document['pair'] or document['target'] + ' / ' + document['draft']} on {document['device']}, "
                 f"{document['dtype']}, {document['threads']} threads")
    fig.tight_layout(rect=(0, CAPTION_HEIGHT + 0.035 * (-(-len(labels) // columns) + 1), 1, 1))
    return fig


def caption(document: dict) -> str:
    """What the points and bars are, over how many prompts, repeats and tokens, and whether the machine was busy."""
    rows = pd.DataFrame(document["rows"])
    prompts, repeats = rows.prompt_id.nunique(), int(rows.repeat.max()) + 1
    tokens = rows.new_tokens.max()
    text = (f"Points: medians; bars: the middle half (25th to 75th percentile) of the {prompts * repeats} paired "
            f"speedups per point ({prompts} prompt{'s' * (prompts != 1)} x {repeats} repeat{'s' * (repeats != 1)}, "
            f"up to {tokens} new tokens each).")
    machine = document.get("machine") or {}
    busy = max((machine.get(k) or 0 for k in ("busy_cores_before", "busy_cores_after")), default=0)
    if machine and too_busy(busy, machine["threads"], machine["cores"]):
        text += f" Measured while other processes kept {busy:.1f} of {machine['cores']} cores busy: figures unreliable."
    return text


def plot_acceptance_by_position(document: dict, method: str = "cached"):
    """The measured probability that draft position i is accepted (of the rounds that proposed i drafts) for each k
    of `method`, beside alpha^i from that k's alpha: where they part, acceptances are not independent."""
    summary = pd.DataFrame(document["summary"])
    rows = summary[(summary.method == method) & summary.k.notna()]
    if "temperature" in rows:
        rows = rows[rows.temperature.isna()]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for color, (_, entry) in zip(plt.cm.viridis([i / max(len(rows), 1) for i in range(len(rows))]), rows.iterrows()):
        measured = entry.get("accepted_by_position")
        if not isinstance(measured, list) or entry.alpha is None or pd.isna(entry.alpha):
            continue
        positions = list(range(1, len(measured) + 1))
        ax.plot(positions, measured, marker="o", color=color, label=f"k={int(entry.k)} measured")
        ax.plot(positions, [entry.alpha ** i for i in positions], ls="--", color=color,
                label=f"k={int(entry.k)}: alpha^i, alpha={entry.alpha:.2f}")
    ax.set(xlabel="draft position i", ylabel="P(draft i accepted | proposed)", ylim=(0, 1.05),
           title=f"Acceptance by draft position ({method})")
    ax.set_xticks(range(1, int(rows.k.max()) + 1) if len(rows) else [])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
