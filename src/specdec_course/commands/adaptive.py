"""`specdec-course adaptive`: adaptive k judged against every fixed k and HF's schedule (adaptive.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from specdec_kit.cli import add_command, check_k, common_options, load_run


def register(commands) -> None:
    parser = add_command(commands, "adaptive", "judge the notebook's adaptive k against every fixed k and HF's "
                         "heuristic schedule, on several pairs in one run",
                         "specdec-course adaptive --pairs tiny,tiny-b,synthetic-small --k 1,2,3,4,6,8 --repeats 2",
                         [common_options()])
    parser.add_argument("--pairs", default="tiny,tiny-b,synthetic-small", help="comma-separated pairs to judge on")
    parser.add_argument("--k", default="1,2,3,4,6,8", help="the fixed k values (must include 4, the first k)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per method, k and prompt")
    parser.add_argument("--out", default="out/adaptive", help="directory for adaptive.json and each pair's files")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specdec_kit.bench import benchmark as bench
    from specdec_kit.bench import figures

    from ..bench import adaptive, hf_methods

    k_values = [int(k) for k in args.k.split(",")]
    check_k(k_values)
    if adaptive.FIRST_K not in k_values:
        raise ValueError(f"--k must include {adaptive.FIRST_K}, the adaptive methods' first k")
    verdicts = []
    for pair in args.pairs.split(","):
        args.pair = pair
        run = load_run(args, ("CachedSpeculativeDecoder", "AdaptiveSpeculativeDecoder"))
        print(f"{pair}: {len(run.prompts)} prompts x {args.repeats} repeats, k in {k_values}")
        document = bench.compare(run.classes, run.target, run.draft, run.prompts, k_values, pair=pair,
                                 repeats=args.repeats, methods=adaptive.METHODS, device=str(run.device),
                                 dtype=run.dtype, runners=hf_methods.RUNNERS,
                                 micro_k_values=list(range(1, adaptive.MAX_K + 1)),
                                 adaptive_k=[adaptive.FIRST_K])
        bench.write_outputs(document, Path(args.out) / pair)
        verdicts.append(adaptive.judge(document))
    met = adaptive.bar_met(verdicts)
    text = (adaptive.verdict_table(verdicts) + f"\nbar ({adaptive.TOLERANCE:.0%} of the best fixed k "
            f"and at least HF's schedule, on two pairs whose best fixed k differ): {'met' if met else 'not met'}")
    print(text)
    page = figures.write_page(Path(args.out) / "adaptive.md", "Adaptive k against every fixed k and HF's schedule",
                              args.command_line, text, image=f"{pair}/bench.png")
    print(f"wrote {adaptive.write(verdicts, Path(args.out))}, {page} and each pair's bench files under "
          f"{args.out}")
    return 0 if met else 1
