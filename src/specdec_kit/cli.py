"""The specdec-kit command, the students' (and everyone's): run and time a notebook's decoders, build the offline
models. The instructors' commands (release, grading, the selftest, ...) are `specdec-course`'s.

Torch and transformers are imported inside the commands that use them, so that `--help` and `--version`
answer at once.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import logging
import shlex
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__

if TYPE_CHECKING:
    import torch

# Where the notebook is, run from a repository's root: the student repository's, else the course's solution.
DEFAULT_NOTEBOOKS = (Path("speculative_decoding.ipynb"), Path("solutions") / "speculative_decoding.ipynb")


@dataclass
class Run:
    """What `demo` and `bench` share: the device, the pair, the prompts and the notebook's classes."""

    device: torch.device
    pair: str | None
    target: str
    draft: str
    prompts: list
    dtype: torch.dtype | None
    classes: dict


def load_run(args: argparse.Namespace, class_names: tuple[str, ...]) -> Run:
    import torch

    from .core.prompts import load_prompts
    from .models.loading import default_pair, resolve_device, resolve_pair
    from .protocol.adapters import load_decoder_classes

    device = resolve_device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.target or args.draft:
        if not (args.target and args.draft):
            raise ValueError("--target and --draft go together")
        pair, (target, draft) = None, (args.target, args.draft)
    else:
        pair = args.pair or default_pair(device)
        target, draft = resolve_pair(pair)
    prompts = load_prompts(args.prompts)[: args.limit]
    if args.max_new_tokens:
        prompts = [replace(p, max_new_tokens=args.max_new_tokens) for p in prompts]
    dtype = getattr(torch, args.dtype) if args.dtype else None
    # The notebook's own cells print and log (its device and pair): here only its definitions are wanted.
    with contextlib.redirect_stdout(io.StringIO()):
        logging.disable(logging.INFO)
        try:
            classes = load_decoder_classes(_notebook(args.notebook), class_names)
        finally:
            logging.disable(logging.NOTSET)
    return Run(device, pair, target, draft, prompts, dtype, classes)


def cmd_demo(args: argparse.Namespace) -> int:
    import pandas as pd
    import torch

    from . import zoo
    from .bench import figures
    from .bench.demo import run_demo

    check_k([args.k])
    run = load_run(args, ("SpeculativeDecoder", "CachedSpeculativeDecoder"))
    decoder = run.classes["CachedSpeculativeDecoder"](run.target, run.draft, device=str(run.device), dtype=run.dtype)
    dtype_name = str(decoder.target_model.dtype).removeprefix("torch.")
    lines = [f"pair: {run.pair or 'custom'} (target {run.target}, draft {run.draft})",
             f"device {run.device}, dtype {dtype_name}, threads {torch.get_num_threads()}, k {args.k}, "
             f"notebook {_notebook(args.notebook)}"]
    if run.pair in zoo.PAIRS and zoo.pair_info(run.pair)["agreement"] is not None:
        lines.append(f"zoo build: the draft's argmax equals the target's on "
                     f"{zoo.pair_info(run.pair)['agreement']:.0%} of the positions of the kit's prompts")
    print("\n".join(lines))
    table = run_demo(decoder, run.prompts, args.k)
    identical = (table["identical"] == "yes").sum()
    with pd.option_context("display.max_colwidth", 60, "display.width", 200):
        lines += [table.to_string(index=False, float_format=lambda x: f"{x:.2f}"),
                  f"identical to target greedy: {identical}/{len(table)} prompts; median speedup "
                  f"{table['speedup'].median():.2f}x, acceptance rate {table['acceptance'].mean():.0%}"]
    print("\n".join(lines[-2:]))
    if args.sweep:
        lines.append(_demo_sweep(args, run))
        print(lines[-1])
    page = figures.write_page(Path(args.out) / "demo.md", f"Demo: {run.pair or 'custom'} on {run.device}",
                              args.command_line, "\n".join(lines), image="bench.png" if args.sweep else None)
    print(f"wrote {page}")
    # In fp32 anything but identical output is a bug; in fp16/bf16 a near-tie can flip (the note says where).
    return 0 if identical == len(table) or decoder.target_model.dtype != torch.float32 else 1


def _demo_sweep(args: argparse.Namespace, run: Run) -> str:
    """A small k sweep on the first prompts, every method, one repeat: the plot for this machine; a line on it."""
    from .bench import benchmark as bench

    k_values = [int(k) for k in args.sweep.split(",")]
    check_k(k_values)
    prompts = [replace(p, max_new_tokens=min(p.max_new_tokens, 32)) for p in run.prompts[:3]]
    document = bench.compare(run.classes, run.target, run.draft, prompts, k_values, pair=run.pair, repeats=1,
                             device=str(run.device), dtype=run.dtype)
    paths = bench.write_outputs(document, Path(args.out))
    return (f"k sweep ({', '.join(map(str, k_values))}) on {len(prompts)} prompts: plot in {paths['png']}; "
            "specdec-kit bench gives the full comparison")


ROUND_DECODERS = {"greedy": "SpeculativeDecoder", "cached": "CachedSpeculativeDecoder",
                  "sampling": "SpeculativeSampler", "lookup": "PromptLookupDecoder",
                  "adaptive": "AdaptiveSpeculativeDecoder"}


def cmd_rounds(args: argparse.Namespace) -> int:
    import torch

    from .rounds.record import record_rounds

    check_k([args.k])
    name = ROUND_DECODERS[args.decoder]
    run = load_run(args, (name,))
    decoder = run.classes[name](run.target, run.draft, device=str(run.device), dtype=run.dtype)
    prompt = args.prompt or run.prompts[0].text
    generator = torch.Generator(device=run.device).manual_seed(args.seed)
    sampling = {"temperature": args.temperature, "generator": generator} if args.decoder == "sampling" else {}
    rounds = record_rounds(decoder, prompt, args.max_new_tokens or 40, args.k, **sampling)
    path = rounds.save(args.out)
    print(f"{args.decoder} decoder, k={args.k}, prompt {prompt!r}: {len(rounds.rounds)} rounds, "
          f"{len(rounds.result.token_ids)} new tokens; wrote {path}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    import pandas as pd

    from .bench import benchmark as bench
    from .bench import figures
    from .bench.runners import DECODER_METHODS, LOOKUP_METHODS, SAMPLING_METHODS

    k_values = [int(k) for k in args.k.split(",")]
    check_k(k_values)
    temperatures = [float(t) for t in args.temperatures.split(",") if t]
    if any(t <= 0 for t in temperatures):
        raise ValueError(f"--temperatures must be above 0 (greedy is the default methods), got {temperatures}")
    runners = importlib.import_module(args.runners).RUNNERS
    methods = args.methods.split(",") + [m for m in SAMPLING_METHODS if temperatures and m in runners]
    unknown = set(methods) - set(runners)
    if unknown:
        raise ValueError(f"unknown method(s) {', '.join(sorted(unknown))}; choose from {', '.join(runners)}")
    methods = list(dict.fromkeys(methods))
    needed = tuple(dict.fromkeys(DECODER_METHODS[m] for m in methods if m in DECODER_METHODS))
    run = load_run(args, needed)
    document = bench.compare(run.classes, run.target, run.draft, run.prompts, k_values, pair=run.pair,
                             repeats=args.repeats, methods=methods, device=str(run.device), dtype=run.dtype,
                             temperatures=temperatures, runners=runners)
    micro = document["micro"]
    paths = bench.write_outputs(document, Path(args.out), Path(args.json) if args.json else None)
    columns = ["method", "k", "temperature", "tokens_per_s", "speedup", "acceptance_rate", "alpha", "tokens_per_round",
               "predicted_speedup", "forward_bound_speedup", "target_forwards_per_token", "efficiency", "identical_all"]
    summary = pd.DataFrame(document["summary"])[columns]
    # k is whole and absent for the baselines, temperature absent for greedy rows: "-" where absent, not NaN or None
    summary = summary.assign(k=summary.k.map(lambda k: "-" if pd.isna(k) else int(k)),
                             temperature=summary.temperature.astype("float64"))
    lines = [f"{document['pair'] or 'custom'} on {document['device']}, {document['dtype']}, "
             f"{document['threads']} threads, {len(run.prompts)} prompts x {args.repeats} repeats; "
             f"c = draft_1/target_1 = {micro['draft_1'] / micro['target_1']:.3f}; target_verify/target_1 by k: "
             + ", ".join(f"{k}: {v / micro['target_1']:.2f}" for k, v in micro["target_verify"].items())]
    with pd.option_context("display.width", 250):
        lines.append(summary.to_string(index=False, float_format=lambda x: f"{x:.3f}", na_rep="-"))
        if any(m in LOOKUP_METHODS for m in methods):  # where lookup wins depends on what the text repeats
            by_category = pd.DataFrame(document["by_category"]).pivot_table(
                index=["category", "k"], columns="method", values=["speedup", "target_forwards_per_token"])
            lines.append("by prompt category:\n" + by_category.to_string(float_format=lambda x: f"{x:.2f}"))
    print("\n".join(lines))
    paths["md"] = figures.write_page(Path(args.out) / "bench.md", f"Benchmark: {document['pair'] or 'custom'} on "
                                     f"{document['device']}", args.command_line, "\n".join(lines),
                                     image=paths["png"].name)
    print(f"wrote {', '.join(str(p) for p in paths.values())}")
    print(json.dumps({"summary": document["summary"], "micro": micro}))
    return 0 if summary.identical_all.dropna().all() or document["dtype"] != "float32" else 1


def check_k(k_values: list[int]) -> None:
    if not k_values or min(k_values) < 1:
        raise ValueError(f"--k must be at least 1, got {k_values}")


def cmd_zoo(args: argparse.Namespace) -> int:
    from . import zoo

    for pair in args.pairs or ["scripted", "tiny", "synthetic-small"]:
        zoo.materialize(pair)
        print(json.dumps(zoo.pair_info(pair)))
    return 0


def _notebook(path: str | None) -> Path:
    """`path`, else the first of DEFAULT_NOTEBOOKS here."""
    if path:
        if not Path(path).is_file():
            raise FileNotFoundError(f"no notebook at {path}: check --notebook PATH")
        return Path(path)
    notebook = next((p for p in DEFAULT_NOTEBOOKS if p.is_file()), None)
    if notebook is None:
        raise FileNotFoundError(f"no notebook here ({' or '.join(map(str, DEFAULT_NOTEBOOKS))}): run from the "
                                "repository's root or pass --notebook PATH")
    return notebook


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Examples kept as written; every option with a default says "(default: X)" the same way, but a flag, whose
    help says what it turns on or off ("--no-sandbox (default: True)" would read as no sandbox by default)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        flag = action.nargs == 0
        if action.default not in (None, False, argparse.SUPPRESS) and "%(default)" not in help_text \
                and action.option_strings and not flag:
            help_text += " (default: %(default)s)"
        return help_text


WORKFLOW = """\
students' commands: demo, bench, rounds, zoo; instructors' are specdec-course's (release, autograde, selftest, ...).
run specdec-kit COMMAND --help for a command's options and an example."""


def add_command(commands, name: str, help_text: str, example: str, parents=()) -> argparse.ArgumentParser:
    return commands.add_parser(name, parents=list(parents), help=help_text, description=help_text,
                               epilog=f"example:\n  {example}", formatter_class=Formatter)


def common_options() -> argparse.ArgumentParser:
    """The options every command that runs a notebook's decoders shares (`load_run` reads them)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--pair", help="pythia, gpt2 or a zoo pair (default: pythia on a GPU with the hub, "
                                       "else an offline pair)")
    common.add_argument("--target", help="target model name, directory or .gguf file (with --draft)")
    common.add_argument("--draft", help="draft model name, directory or .gguf file (with --target)")
    common.add_argument("--prompts", help="prompts JSON file (default: the kit's data/prompts.json)")
    common.add_argument("--limit", type=int, help="use only the first N prompts")
    common.add_argument("--max-new-tokens", type=int, help="override every prompt's max_new_tokens")
    common.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    common.add_argument("--dtype", choices=["float32", "float16", "bfloat16"],
                        help="model dtype (default: float16 on CUDA, float32 on CPU)")
    common.add_argument("--threads", type=int, help="torch CPU threads, set and recorded (default: torch's own)")
    common.add_argument("--notebook", help="notebook whose decoders to run (default: "
                        f"{' if there, else '.join(map(str, DEFAULT_NOTEBOOKS))})")
    return common


def add_bench_command(commands, runners: str = "specdec_kit.bench.runners",
                      example: str = "specdec-kit bench --pair synthetic-small --k 1,2,4 --repeats 2 --limit 4"
                      ) -> argparse.ArgumentParser:
    """`bench`, timing the methods of the module `runners`' RUNNERS (imported when the command runs)."""
    bench = add_command(commands, "bench", "time the notebook's decoders against target greedy and HF assisted "
                        "generation", example, [common_options()])
    bench.add_argument("--k", default="1,2,4,8", help="comma-separated k values")
    bench.add_argument("--repeats", type=int, default=3, help="timed runs per method, k and prompt")
    bench.add_argument("--methods", default="target_greedy,hf_assisted,no_cache,cached",
                       help="comma-separated methods: target_greedy, hf_assisted, no_cache, cached and the "
                            "model-free hf_prompt_lookup, prompt_lookup (the notebook's PromptLookupDecoder)")
    bench.add_argument("--temperatures", default="",
                       help="also time speculative sampling (target_sampling, hf_assisted_sampling and the notebook's "
                            "SpeculativeSampler) at these comma-separated temperatures, e.g. 0.7,1.0")
    bench.add_argument("--out", default="out/bench", help="directory for bench.csv, bench.json, bench.png")
    bench.add_argument("--json", help="write the JSON here instead of OUT/bench.json")
    bench.set_defaults(func=cmd_bench, runners=runners)
    return bench


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec-kit", description=__doc__.split("\n")[0], epilog=WORKFLOW,
                                     formatter_class=Formatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = add_command(commands, "demo", "decode the kit's prompts with a notebook's decoder against target greedy",
                    "specdec-kit demo --pair tiny --k 3", [common_options()])
    demo.add_argument("--k", type=int, default=4, help="draft tokens per round")
    demo.add_argument("--sweep", default="1,2,4", help="k values of the plot's short sweep ('' for none)")
    demo.add_argument("--out", default="out/demo", help="directory for the sweep's bench.png, .csv and .json")
    demo.set_defaults(func=cmd_demo)

    add_bench_command(commands)

    rounds = add_command(commands, "rounds", "draw every round of one decode (drafts accepted and rejected, the "
                         "target's tokens, caches) into a self-contained HTML page",
                         "specdec-kit rounds --pair tiny --decoder cached --k 4 --prompt 'The future of'",
                         [common_options()])
    rounds.add_argument("--decoder", choices=list(ROUND_DECODERS), default="cached", help="which of the notebook's "
                        "decoders")
    rounds.add_argument("--prompt", help="the text to continue (default: the first of the kit's prompts)")
    rounds.add_argument("--k", type=int, default=4, help="draft tokens per round (adaptive k: its first)")
    rounds.add_argument("--temperature", type=float, default=1.0, help="the sampling decoder's temperature")
    rounds.add_argument("--seed", type=int, default=0, help="the sampling decoder's seed")
    rounds.add_argument("--out", default="out/rounds.html", help="the HTML page to write")
    rounds.set_defaults(func=cmd_rounds)

    zoo_cmd = add_command(commands, "zoo", "build offline model pairs into the cache and print their records",
                       "specdec-kit zoo scripted tiny")
    zoo_cmd.add_argument("pairs", nargs="*", help="pairs to build (default: scripted tiny synthetic-small)")
    zoo_cmd.set_defaults(func=cmd_zoo)

    return parser


def run_command(parser: argparse.ArgumentParser, argv: list[str] | None, program: str) -> int:
    """Parse `argv` (default: the process's) and run the command, which finds its own command line in
    `args.command_line`; bad input or a failed tool ends in one clear line and exit status 2."""
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    args.command_line = shlex.join([program, *argv])
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        return args.func(args)
    except (ValueError, OSError, subprocess.SubprocessError) as e:
        print(f"{program} {args.command}: error: {e}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser(), argv, "specdec-kit")


if __name__ == "__main__":
    sys.exit(main())
