"""The `specdec-kit` command.

    specdec-kit demo [--pair tiny] [--k 4] [--notebook PATH]   decode the kit's prompts, compare with target greedy
    specdec-kit bench [--pair synthetic-small] [--k 1,2,4,8]   time the decoders against their peers; CSV, JSON, plot
    specdec-kit zoo [PAIR ...]                                 build offline pairs into the cache, print their records
    specdec-kit build-notebook solutions/speculative_decoding.py [--check]
    specdec-kit release [--check] [--student-repo DIR]        cut assignment/ from the solution with nbgrader
    specdec-kit time-notebook [--finished] [--fresh-cache]    run the student notebook as a student would, timed
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from .adapters import load_decoder_classes

DEFAULT_NOTEBOOK = Path("solutions") / "speculative_decoding.ipynb"


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


def _common(args: argparse.Namespace, class_names: tuple[str, ...]) -> Run:
    from .loading import default_pair, resolve_device, resolve_pair
    from .prompts import load_prompts

    device = resolve_device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
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
    classes = load_decoder_classes(_notebook(args.notebook), class_names)
    return Run(device, pair, target, draft, prompts, dtype, classes)


def cmd_demo(args: argparse.Namespace) -> int:
    import pandas as pd

    from . import zoo
    from .demo import run_demo

    _check_k([args.k])
    run = _common(args, ("CachedSpeculativeDecoder",))
    decoder = run.classes["CachedSpeculativeDecoder"](run.target, run.draft, device=str(run.device), dtype=run.dtype)
    dtype_name = str(decoder.target_model.dtype).removeprefix("torch.")
    print(f"pair: {run.pair or 'custom'} (target {run.target}, draft {run.draft})")
    print(f"device {run.device}, dtype {dtype_name}, threads {torch.get_num_threads()}, k {args.k}, "
          f"notebook {args.notebook or DEFAULT_NOTEBOOK}")
    if run.pair in zoo.PAIRS and zoo.pair_info(run.pair)["agreement"] is not None:
        print(f"zoo build: the draft's argmax equals the target's on {zoo.pair_info(run.pair)['agreement']:.0%} "
              "of the positions of the kit's prompts")
    table = run_demo(decoder, run.prompts, args.k)
    with pd.option_context("display.max_colwidth", 60, "display.width", 200):
        print(table.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    identical = (table["identical"] == "yes").sum()
    print(f"identical to target greedy: {identical}/{len(table)} prompts; median speedup "
          f"{table['speedup'].median():.2f}x, acceptance rate {table['acceptance'].mean():.0%}")
    if args.sweep:
        _demo_sweep(args, run)
    # In fp32 anything but identical output is a bug; in fp16/bf16 a near-tie can flip (the note says where).
    return 0 if identical == len(table) or decoder.target_model.dtype != torch.float32 else 1


def _demo_sweep(args: argparse.Namespace, run: Run) -> None:
    """A small k sweep on the first prompts, every method, one repeat: the plot for this machine."""
    from . import bench

    k_values = [int(k) for k in args.sweep.split(",")]
    _check_k(k_values)
    classes = {**run.classes, **load_decoder_classes(_notebook(args.notebook), ("SpeculativeDecoder",))}
    prompts = [replace(p, max_new_tokens=min(p.max_new_tokens, 32)) for p in run.prompts[:3]]
    document = bench.compare(classes, run.target, run.draft, prompts, k_values, pair=run.pair, repeats=1,
                             device=str(run.device), dtype=run.dtype)
    paths = bench.write_outputs(document, Path(args.out))
    print(f"k sweep ({', '.join(map(str, k_values))}) on {len(prompts)} prompts: plot in {paths['png']}; "
          "specdec-kit bench gives the full comparison")


def cmd_bench(args: argparse.Namespace) -> int:
    import pandas as pd

    from . import bench

    k_values = [int(k) for k in args.k.split(",")]
    _check_k(k_values)
    methods = args.methods.split(",")
    unknown = set(methods) - set(bench.METHODS)
    if unknown:
        raise ValueError(f"unknown method(s) {', '.join(sorted(unknown))}; choose from {', '.join(bench.METHODS)}")
    needed = tuple(bench.DECODER_METHODS[m] for m in methods if m in bench.DECODER_METHODS)
    run = _common(args, needed)
    document = bench.compare(run.classes, run.target, run.draft, run.prompts, k_values, pair=run.pair,
                             repeats=args.repeats, methods=methods, device=str(run.device), dtype=run.dtype)
    micro = document["micro"]
    paths = bench.write_outputs(document, Path(args.out), Path(args.json) if args.json else None)
    columns = ["method", "k", "tokens_per_s", "speedup", "acceptance_rate", "alpha", "tokens_per_round",
               "predicted_speedup", "forward_bound_speedup", "efficiency", "identical_all"]
    summary = pd.DataFrame(document["summary"])[columns]
    print(f"{document['pair'] or 'custom'} on {document['device']}, {document['dtype']}, "
          f"{document['threads']} threads, {len(run.prompts)} prompts x {args.repeats} repeats; "
          f"c = draft_1/target_1 = {micro['draft_1'] / micro['target_1']:.3f}; target_verify/target_1 by k: "
          + ", ".join(f"{k}: {v / micro['target_1']:.2f}" for k, v in micro["target_verify"].items()))
    with pd.option_context("display.width", 200):
        print(summary.to_string(index=False, float_format=lambda x: f"{x:.3f}", na_rep="-"))
    print(f"wrote {', '.join(str(p) for p in paths.values())}")
    print(json.dumps({"summary": document["summary"], "micro": micro}))
    return 0 if summary.identical_all.all() or document["dtype"] != "float32" else 1


def _check_k(k_values: list[int]) -> None:
    if not k_values or min(k_values) < 1:
        raise ValueError(f"--k must be at least 1, got {k_values}")


def cmd_zoo(args: argparse.Namespace) -> int:
    from . import zoo

    for pair in args.pairs or ["scripted", "tiny", "synthetic-small"]:
        zoo.materialize(pair)
        print(json.dumps(zoo.pair_info(pair)))
    return 0


def cmd_build_notebook(args: argparse.Namespace) -> int:
    from .course.notebooks import build_notebook, ipynb_path, notebook_is_current

    for script in args.scripts:
        if args.check:
            if not notebook_is_current(script):
                print(f"{ipynb_path(script)} is stale: run specdec-kit build-notebook {script}", file=sys.stderr)
                return 1
            print(f"{ipynb_path(script)} is current")
        else:
            print(f"wrote {build_notebook(script)}")
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    from .course import release

    solution, out_dir = Path(args.solution), Path(args.out)
    if args.check:
        if not release.is_current(solution, out_dir):
            print(f"{out_dir / release.NOTEBOOK} is stale: run specdec-kit release", file=sys.stderr)
            return 1
        print(f"{out_dir / release.NOTEBOOK} is current")
    else:
        print(f"wrote {release.release(solution, out_dir)}")
    if args.student_repo:
        tree = release.export_student_tree(Path("."), out_dir / release.NOTEBOOK, Path(args.student_repo),
                                           release.student_readme())
        print(f"exported the student repository to {tree} (checked: no solution, hidden test or autograder file)")
    return 0


def cmd_time_notebook(args: argparse.Namespace) -> int:
    import tempfile

    import nbformat

    from .course.student_run import finished_notebook, time_cells

    notebook = finished_notebook(Path(args.solution)) if args.finished else nbformat.read(args.release, as_version=4)
    with tempfile.TemporaryDirectory() as workdir:
        rows = time_cells(notebook, Path(workdir), fresh_cache=args.fresh_cache,
                          progress=lambda row: print(f"{row.seconds:7.1f} s  {row.cell}  {row.error}", flush=True))
    failed = sum(bool(row.error) for row in rows)
    print(f"{'finished' if args.finished else 'blank'} notebook, {'fresh' if args.fresh_cache else 'warm'} zoo "
          f"cache, {os.cpu_count()} cores: {sum(r.seconds for r in rows):.0f} s in {len(rows)} code "
          f"cells, {failed} ended in an error")
    return 0


def cmd_selftest(args: argparse.Namespace) -> int:
    import pandas as pd

    from .course.selftest import run_selftest

    _check_grading_options(args)
    outcomes = run_selftest(Path(args.solution), Path(args.release), Path(args.autograder), Path(args.workdir),
                            timeout=args.timeout, only=args.only, jobs=args.jobs)
    table = pd.DataFrame([vars(o) for o in outcomes])
    with pd.option_context("display.max_colwidth", 80, "display.width", 250):
        print(table.rename(columns={"name": "submission", "named_by": "tests that named it"})
              .to_string(index=False, float_format=lambda x: f"{x:.0f}"))
    print(f"{int(table.ok.sum())}/{len(table)} submissions graded as expected; "
          f"median {table.seconds.median():.0f} s per submission")
    return 0 if table.ok.all() else 1


def cmd_autograde(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from .course import grading

    _check_grading_options(args)
    roster = Path(args.roster).read_text().split() if args.roster else None
    submissions = grading.collect(Path(args.submissions), args.id_regex, roster)
    if not submissions:
        raise ValueError(f"no notebooks under {args.submissions}: expected submitted/<student>/"
                         f"speculative_decoding/*.ipynb or a folder of <student>.ipynb files")
    out = Path(args.out).resolve()
    course = out / "course"
    settings = grading.setup_batch(course, Path(args.solution).resolve(), Path(args.autograder).resolve(),
                                   args.jobs, args.timeout)
    with tqdm(total=len(submissions), desc="autograde") as bar:
        grades = grading.grade_all(course, submissions, settings, out / "feedback", progress=lambda _: bar.update())
    grading.write_csv(grades, out / "grades.csv", grading.graded_cells(course))
    counts = {status: sum(g.status == status for g in grades) for status in grading.STATUSES}
    print(f"wrote {out / 'grades.csv'} and feedback/<student>.html: "
          + ", ".join(f"{n} {status}" for status, n in counts.items() if n))
    return 0


def _check_grading_options(args: argparse.Namespace) -> None:
    """Every option of a grading run, checked before anything is set up: one line on what is wrong."""
    import re

    if args.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {args.jobs}")
    if args.timeout is not None and args.timeout <= 0:
        raise ValueError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if getattr(args, "id_regex", None) is not None:
        try:
            re.compile(args.id_regex)
        except re.error as e:
            raise ValueError(f"--id-regex {args.id_regex!r} is not a regular expression: {e}") from None
    for option, path in (("--solution", Path(args.solution)), ("--autograder", Path(args.autograder) / "hidden.py")):
        if not path.is_file():
            raise ValueError(f"{option}: {path} does not exist (run from the repository root or pass {option})")
    if getattr(args, "roster", None) and not Path(args.roster).is_file():
        raise ValueError(f"--roster: {args.roster} does not exist")


def cmd_feedback(args: argparse.Namespace) -> int:
    from .course import feedback

    graded = Path(args.graded)
    course = graded / "course"
    if not (course / "gradebook.db").is_file():
        raise ValueError(f"{graded} holds no graded course (no course/gradebook.db): run specdec-kit autograde first")
    results = feedback.generate_feedback(course, graded / "feedback", args.student)
    for student, reason in sorted(results.items()):
        print(f"{student}: " + (f"withheld: {reason}" if reason else f"wrote {graded / 'feedback' / student}.html"))
    return 0 if not any(results.values()) else 1


def _notebook(path: str | None) -> Path:
    notebook = Path(path) if path else DEFAULT_NOTEBOOK
    if not notebook.is_file():
        raise FileNotFoundError(f"no notebook at {notebook}: run from the repository root or pass --notebook PATH")
    return notebook


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec-kit", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

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
    common.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help="torch CPU threads, set and recorded (default: torch's default here)")
    common.add_argument("--notebook", help=f"notebook whose decoders to run (default: {DEFAULT_NOTEBOOK})")

    demo = commands.add_parser("demo", parents=[common], help="decode the kit's prompts with a notebook's decoder")
    demo.add_argument("--k", type=int, default=4, help="draft tokens per round (default 4)")
    demo.add_argument("--sweep", default="1,2,4", help="k values of the plot's short sweep ('' for none)")
    demo.add_argument("--out", default="out/demo", help="directory for the sweep's bench.png, .csv and .json")
    demo.set_defaults(func=cmd_demo)

    bench = commands.add_parser("bench", parents=[common],
                                help="time the notebook's decoders against target greedy and HF assisted generation")
    bench.add_argument("--k", default="1,2,4,8", help="comma-separated k values (default 1,2,4,8)")
    bench.add_argument("--repeats", type=int, default=3, help="timed runs per method, k and prompt (default 3)")
    bench.add_argument("--methods", default="target_greedy,hf_assisted,no_cache,cached",
                       help="comma-separated subset of target_greedy,hf_assisted,no_cache,cached")
    bench.add_argument("--out", default="out/bench", help="directory for bench.csv, bench.json, bench.png")
    bench.add_argument("--json", help="write the JSON here instead of OUT/bench.json")
    bench.set_defaults(func=cmd_bench)

    zoo_cmd = commands.add_parser("zoo", help="build offline model pairs into the cache and print their records")
    zoo_cmd.add_argument("pairs", nargs="*", help="pairs to build (default: scripted tiny synthetic-small)")
    zoo_cmd.set_defaults(func=cmd_zoo)

    rel = commands.add_parser("release", help="generate the student notebook from the solution with nbgrader")
    rel.add_argument("--solution", default=str(DEFAULT_NOTEBOOK), help=f"nbgrader source (default {DEFAULT_NOTEBOOK})")
    rel.add_argument("--out", default="assignment", help="directory of the student notebook (default assignment)")
    rel.add_argument("--check", action="store_true", help="exit 1 if the committed release differs from a new one")
    rel.add_argument("--student-repo", help="also export the student-facing tree into this directory")
    rel.set_defaults(func=cmd_release)

    selftest = commands.add_parser("selftest", help="autograde the solution, the blank release and the catalogue")
    selftest.add_argument("--solution", default=str(DEFAULT_NOTEBOOK), help="nbgrader source notebook")
    selftest.add_argument("--release", default="assignment/speculative_decoding.ipynb", help="the student notebook")
    selftest.add_argument("--autograder", default="autograder", help="the instructor's autograder/ directory")
    selftest.add_argument("--workdir", default="out/selftest", help="scratch directory (replaced)")
    selftest.add_argument("--timeout", type=int, help="seconds each notebook's own run may take (default: "
                                                      "autograder/config.toml)")
    selftest.add_argument("--only", nargs="*", help="grade only these catalogue entries (and solution, blank)")
    selftest.add_argument("--jobs", type=int, default=1, help="submissions graded at once (default 1)")
    selftest.set_defaults(func=cmd_selftest)

    timing = commands.add_parser("time-notebook", help="run the student notebook as a student would, timing each "
                                                       "cell (the student README's figures)")
    timing.add_argument("--finished", action="store_true", help="the solution as handed in, not the blank release")
    timing.add_argument("--fresh-cache", action="store_true", help="build the offline models anew, as a first run")
    timing.add_argument("--solution", default=str(DEFAULT_NOTEBOOK), help="nbgrader source notebook")
    timing.add_argument("--release", default="assignment/speculative_decoding.ipynb", help="the student notebook")
    timing.set_defaults(func=cmd_time_notebook)

    autograde = commands.add_parser("autograde", help="grade a class's notebooks with nbgrader into grades.csv")
    autograde.add_argument("submissions", help="submitted/<student>/speculative_decoding/ tree or a folder of "
                                               "<student>.ipynb files")
    autograde.add_argument("--out", default="graded", help="output directory (default graded/)")
    autograde.add_argument("--roster", help="file of student ids, one per line: missing students get a row")
    autograde.add_argument("--id-regex", help="regex whose first group is the student id in a file name")
    autograde.add_argument("--timeout", type=int, help="seconds each notebook's own run may take before it is "
                                                       "stopped (default: autograder/config.toml)")
    autograde.add_argument("--jobs", type=int, default=1,
                           help="notebooks graded at once (default 1; timed tests still run one at a time)")
    autograde.add_argument("--solution", default=str(DEFAULT_NOTEBOOK), help="nbgrader source notebook")
    autograde.add_argument("--autograder", default="autograder", help="the instructor's autograder/ directory")
    autograde.set_defaults(func=cmd_autograde)

    fb = commands.add_parser("feedback", help="render the cleaned feedback pages again (after grading by hand)")
    fb.add_argument("graded", help="the --out folder of specdec-kit autograde")
    fb.add_argument("--student", nargs="*", help="only these students (default: everyone graded)")
    fb.set_defaults(func=cmd_feedback)

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
    except (ValueError, OSError, subprocess.SubprocessError) as e:  # bad input or a failed tool: one clear line
        print(f"specdec-kit {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
