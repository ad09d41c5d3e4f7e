"""Speedup and acceptance rate against k, from a `bench` document, beside the theory curves.

    from specdec_kit.plot import plot_bench
    plot_bench(json.load(open("out/bench/bench.json")))   # a matplotlib Figure; shows inline in notebooks
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from .theory import leviathan_speedup

STYLE = {"hf_assisted": ("tab:orange", "s"), "no_cache": ("tab:gray", "^"), "cached": ("tab:blue", "o")}


def plot_bench(document: dict, theory_method: str = "cached"):
    """Two panels: speedup over target greedy (median, interquartile bars) and acceptance rate, by k.

    Theory, for `theory_method`: Leviathan et al.'s expected speedup from its measured alpha and c, and
    the forward-bound speedup from the measured forward times (what zero overhead would give).
    """
    summary = pd.DataFrame(document["summary"])
    speculative = summary[summary.k.notna()].sort_values("k")
    fig, (ax_speed, ax_accept) = plt.subplots(1, 2, figsize=(11, 4.2))
    for method, group in speculative.groupby("method", sort=False):
        color, marker = STYLE.get(method, ("black", "x"))
        errors = [group.speedup - group.speedup_q1, group.speedup_q3 - group.speedup]
        ax_speed.errorbar(group.k, group.speedup, yerr=errors, color=color, marker=marker, capsize=3, label=method)
        ax_accept.plot(group.k, group.acceptance_rate, color=color, marker=marker, label=method)
    theory = speculative[speculative.method == theory_method]
    if len(theory):
        ks = [int(k) for k in theory.k]
        ax_speed.plot(ks, [leviathan_speedup(a, k, c) for a, k, c in zip(theory.alpha, ks, theory.c)],
                      ls="--", color="tab:green", label=f"Leviathan (alpha, c of {theory_method})")
        ax_speed.plot(ks, theory.forward_bound_speedup, ls=":", color="tab:red",
                      label=f"forward-bound ({theory_method})")
    ax_speed.axhline(1.0, color="black", lw=0.8)
    ax_speed.set(xlabel="k (draft tokens per step)", ylabel="speedup over target greedy", title="Speedup")
    ax_accept.set(xlabel="k (draft tokens per step)", ylabel="accepted / proposed draft tokens",
                  title="Acceptance rate", ylim=(0, 1.05))
    for ax in (ax_speed, ax_accept):
        ax.set_xticks(sorted({int(k) for k in speculative.k}))
        ax.grid(alpha=0.3)
    # One legend under both panels, so that it never covers a curve (the speed panel's names every line).
    handles, labels = ax_speed.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle(f"{document['pair'] or document['target'] + ' / ' + document['draft']} on {document['device']}, "
                 f"{document['dtype']}, {document['threads']} threads")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig
