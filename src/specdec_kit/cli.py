"""The `specdec-kit` command.

    specdec-kit demo [--pair tiny] [--k 4] [--notebook PATH]   decode the kit's prompts, compare with target greedy
    specdec-kit zoo [PAIR ...]                                 build offline pairs into the cache, print their records
    specdec-kit build-notebook solutions/speculative_decoding.py [--check]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import torch

DEFAULT_NOTEBOOK = Path("solutions") / "speculative_decoding.ipynb"


def cmd_demo(args: argparse.Namespace) -> int:
    import pandas as pd

    from . import zoo
    from .adapters import load_decoder_classes
    from .demo import run_demo
    from .loading import default_pair, resolve_device, resolve_pair
    from .prompts import load_prompts

    if args.k < 1:
        raise ValueError(f"--k must be at least 1, got {args.k}")
    device = resolve_device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.set_num_threads(args.threads)
    if args.target or args.draft:
        if not (args.target and args.draft):
            raise ValueError("--target and --draft go together")
        pair, (target, draft) = None, (args.target, args.draft)
    else:
        pair = args.pair or default_pair(device)
        target, draft = resolve_pair(pair)
    prompts = load_prompts(args.prompts)
    if args.max_new_tokens:
        prompts = [p.__class__(p.id, p.category, p.text, args.max_new_tokens) for p in prompts]
    dtype = getattr(torch, args.dtype) if args.dtype else None
    decoder_cls = load_decoder_classes(_notebook(args.notebook))["CachedSpeculativeDecoder"]
    decoder = decoder_cls(target, draft, device=str(device), dtype=dtype)
    dtype_name = str(decoder.target_model.dtype).removeprefix("torch.")
    print(f"pair: {pair or 'custom'} (target {target}, draft {draft})")
    print(f"device {device}, dtype {dtype_name}, threads {torch.get_num_threads()}, k {args.k}, "
          f"notebook {args.notebook or DEFAULT_NOTEBOOK}")
    if pair in zoo.PAIRS and zoo.pair_info(pair)["agreement"] is not None:
        print(f"zoo build: the draft's argmax equals the target's on {zoo.pair_info(pair)['agreement']:.0%} "
              "of the positions of the kit's prompts")
    table = run_demo(decoder, prompts, args.k)
    with pd.option_context("display.max_colwidth", 60, "display.width", 200):
        print(table.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    identical = (table["identical"] == "yes").sum()
    print(f"identical to target greedy: {identical}/{len(table)} prompts; median speedup "
          f"{table['speedup'].median():.2f}x, acceptance rate {table['acceptance'].mean():.0%}")
    # In fp32 anything but identical output is a bug; in fp16/bf16 a near-tie can flip (the note says where).
    return 0 if identical == len(table) or decoder.target_model.dtype != torch.float32 else 1


def cmd_zoo(args: argparse.Namespace) -> int:
    from . import zoo

    for pair in args.pairs or ["scripted", "tiny", "synthetic-small"]:
        zoo.materialize(pair)
        print(json.dumps(zoo.pair_info(pair)))
    return 0


def cmd_build_notebook(args: argparse.Namespace) -> int:
    from .notebooks import build_notebook, ipynb_path, notebook_is_current

    for script in args.scripts:
        if args.check:
            if not notebook_is_current(script):
                print(f"{ipynb_path(script)} is stale: run specdec-kit build-notebook {script}", file=sys.stderr)
                return 1
            print(f"{ipynb_path(script)} is current")
        else:
            print(f"wrote {build_notebook(script)}")
    return 0


def _notebook(path: str | None) -> Path:
    notebook = Path(path) if path else DEFAULT_NOTEBOOK
    if not notebook.is_file():
        raise FileNotFoundError(f"no notebook at {notebook}: run from the repository root or pass --notebook PATH")
    return notebook


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec-kit", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="decode the kit's prompts with a notebook's cached decoder")
    demo.add_argument("--pair", help="pythia, gpt2 or a zoo pair (default: pythia on a GPU with the hub, "
                                     "else synthetic-small)")
    demo.add_argument("--target", help="target model name, directory or .gguf file (with --draft)")
    demo.add_argument("--draft", help="draft model name, directory or .gguf file (with --target)")
    demo.add_argument("--k", type=int, default=4, help="draft tokens per round (default 4)")
    demo.add_argument("--prompts", help="prompts JSON file (default: the kit's data/prompts.json)")
    demo.add_argument("--max-new-tokens", type=int, help="override every prompt's max_new_tokens")
    demo.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    demo.add_argument("--dtype", choices=["float32", "float16", "bfloat16"],
                      help="model dtype (default: float16 on CUDA, float32 on CPU)")
    demo.add_argument("--threads", type=int, default=torch.get_num_threads(),
                      help="torch CPU threads (default: torch's default on this machine)")
    demo.add_argument("--notebook", help=f"notebook whose decoder to run (default: {DEFAULT_NOTEBOOK})")
    demo.set_defaults(func=cmd_demo)

    zoo_cmd = commands.add_parser("zoo", help="build offline model pairs into the cache and print their records")
    zoo_cmd.add_argument("pairs", nargs="*", help="pairs to build (default: scripted tiny synthetic-small)")
    zoo_cmd.set_defaults(func=cmd_zoo)

    build = commands.add_parser("build-notebook", help="build .ipynb files from their jupytext .py twins")
    build.add_argument("scripts", nargs="+", help="percent-format .py files")
    build.add_argument("--check", action="store_true", help="exit 1 if an .ipynb differs from a rebuild")
    build.set_defaults(func=cmd_build_notebook)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        return args.func(args)
    except (ValueError, OSError) as e:  # bad input: one clear line, no traceback
        print(f"specdec-kit {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
