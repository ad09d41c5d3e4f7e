"""The specdec-kit command: run and time the decoders, cut the student release, grade a class.

Torch, transformers and nbgrader are imported inside the commands that use them, so that `--help` and
`--version` answer at once.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__

if TYPE_CHECKING:
    import torch

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
    import torch

    from .adapters import load_decoder_classes
    from .loading import default_pair, resolve_device, resolve_pair
    from .prompts import load_prompts

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
    from .demo import run_demo

    _check_k([args.k])
    run = _common(args, ("SpeculativeDecoder", "CachedSpeculativeDecoder"))
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
    prompts = [replace(p, max_new_tokens=min(p.max_new_tokens, 32)) for p in run.prompts[:3]]
    document = bench.compare(run.classes, run.target, run.draft, prompts, k_values, pair=run.pair, repeats=1,
                             device=str(run.device), dtype=run.dtype)
    paths = bench.write_outputs(document, Path(args.out))
    print(f"k sweep ({', '.join(map(str, k_values))}) on {len(prompts)} prompts: plot in {paths['png']}; "
          "specdec-kit bench gives the full comparison")


def cmd_bench(args: argparse.Namespace) -> int:
    import pandas as pd

    from . import bench

    k_values = [int(k) for k in args.k.split(",")]
    _check_k(k_values)
    temperatures = [float(t) for t in args.temperatures.split(",") if t]
    if any(t <= 0 for t in temperatures):
        raise ValueError(f"--temperatures must be above 0 (greedy is the default methods), got {temperatures}")
    methods = args.methods.split(",") + (list(bench.SAMPLING_METHODS) if temperatures else [])
    known = bench.METHODS + bench.LOOKUP_METHODS + bench.ADAPTIVE_METHODS + bench.SAMPLING_METHODS
    unknown = set(methods) - set(known)
    if unknown:
        raise ValueError(f"unknown method(s) {', '.join(sorted(unknown))}; choose from {', '.join(known)}")
    methods = list(dict.fromkeys(methods))
    needed = tuple(dict.fromkeys(bench.DECODER_METHODS[m] for m in methods if m in bench.DECODER_METHODS))
    run = _common(args, needed)
    document = bench.compare(run.classes, run.target, run.draft, run.prompts, k_values, pair=run.pair,
                             repeats=args.repeats, methods=methods, device=str(run.device), dtype=run.dtype,
                             temperatures=temperatures)
    micro = document["micro"]
    paths = bench.write_outputs(document, Path(args.out), Path(args.json) if args.json else None)
    columns = ["method", "k", "temperature", "tokens_per_s", "speedup", "acceptance_rate", "alpha", "tokens_per_round",
               "predicted_speedup", "forward_bound_speedup", "target_forwards_per_token", "efficiency", "identical_all"]
    summary = pd.DataFrame(document["summary"])[columns]
    print(f"{document['pair'] or 'custom'} on {document['device']}, {document['dtype']}, "
          f"{document['threads']} threads, {len(run.prompts)} prompts x {args.repeats} repeats; "
          f"c = draft_1/target_1 = {micro['draft_1'] / micro['target_1']:.3f}; target_verify/target_1 by k: "
          + ", ".join(f"{k}: {v / micro['target_1']:.2f}" for k, v in micro["target_verify"].items()))
    with pd.option_context("display.width", 200):
        print(summary.to_string(index=False, float_format=lambda x: f"{x:.3f}", na_rep="-"))
        if any(m in bench.LOOKUP_METHODS for m in methods):  # where lookup wins depends on what the text repeats
            by_category = pd.DataFrame(document["by_category"]).pivot_table(
                index=["category", "k"], columns="method", values=["speedup", "target_forwards_per_token"])
            print("by prompt category:\n" + by_category.to_string(float_format=lambda x: f"{x:.2f}"))
    print(f"wrote {', '.join(str(p) for p in paths.values())}")
    print(json.dumps({"summary": document["summary"], "micro": micro}))
    return 0 if summary.identical_all.dropna().all() or document["dtype"] != "float32" else 1


def cmd_adaptive(args: argparse.Namespace) -> int:
    from . import adaptive_bench, bench

    k_values = [int(k) for k in args.k.split(",")]
    _check_k(k_values)
    if adaptive_bench.FIRST_K not in k_values:
        raise ValueError(f"--k must include {adaptive_bench.FIRST_K}, the adaptive methods' first k")
    verdicts = []
    for pair in args.pairs.split(","):
        args.pair = pair
        run = _common(args, ("CachedSpeculativeDecoder", "AdaptiveSpeculativeDecoder"))
        print(f"{pair}: {len(run.prompts)} prompts x {args.repeats} repeats, k in {k_values}")
        document = bench.compare(run.classes, run.target, run.draft, run.prompts, k_values, pair=pair,
                                 repeats=args.repeats, methods=adaptive_bench.METHODS, device=str(run.device),
                                 dtype=run.dtype, micro_k_values=list(range(1, adaptive_bench.MAX_K + 1)),
                                 adaptive_k=[adaptive_bench.FIRST_K])
        bench.write_outputs(document, Path(args.out) / pair)
        verdicts.append(adaptive_bench.judge(document))
    print(adaptive_bench.verdict_table(verdicts))
    print(f"wrote {adaptive_bench.write(verdicts, Path(args.out))} and each pair's bench files under {args.out}")
    met = adaptive_bench.bar_met(verdicts)
    print(f"bar ({adaptive_bench.TOLERANCE:.0%} of the best fixed k and at least HF's schedule, on two pairs whose "
          f"best fixed k differ): {'met' if met else 'not met'}")
    return 0 if met else 1


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
    from .course import publish, release

    solution, out_dir = Path(args.solution), Path(args.out)
    config = publish.load_config(Path(args.autograder))
    problems = publish.placeholder_problems(config)
    if args.student_repo and problems:  # assignment/ alone may keep them: CI and maintainers release it
        raise ValueError(f"{config.path} still holds placeholders, so students could not install the kit: "
                         f"{'; '.join(problems)}. Set them there before --student-repo")
    if args.student_repo:
        release.previous_export(Path(args.student_repo))  # refuses a directory it may not write, before nbgrader runs
    if args.check:
        if not release.is_current(solution, out_dir, config):
            print(f"{out_dir / release.NOTEBOOK} is stale: run specdec-kit release", file=sys.stderr)
            return 1
        print(f"{out_dir / release.NOTEBOOK} is current")
    else:
        print(f"wrote {release.release(solution, out_dir, config)}")
    if args.student_repo:
        tree = release.export_student_tree(Path("."), out_dir / release.NOTEBOOK, Path(args.student_repo),
                                           release.student_readme(config))
        print(f"exported the student repository to {tree}, updated in place (checked: no solution, hidden test "
              "or autograder file)")
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
        print(table.rename(columns={"name": "submission", "named_by": "tests that named it",
                                    "vs_hf_assisted": "speed"})
              .to_string(index=False, na_rep="-", formatters={"seconds": "{:.0f}".format, "speed": "{:.2f}x".format}))
    print(f"{int(table.ok.sum())}/{len(table)} submissions graded as expected; "
          f"median {table.seconds.median():.0f} s per submission")
    return 0 if table.ok.all() else 1


def cmd_autograde(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from .course import grading, results
    from .course.collect import collect, read_roster

    _check_grading_options(args)
    out = Path(args.out).resolve()
    roster = read_roster(Path(args.roster), args.roster_column) if args.roster else None
    submissions = collect(Path(args.submissions), args.id_regex, roster, unpack_dir=out / "unpacked")
    if not submissions:
        raise ValueError(f"no notebooks under {args.submissions}: expected <student>.ipynb files, one folder per "
                         "student, or nbgrader's submitted/<student>/speculative_decoding/ (or a zip of these)")
    if args.student:
        submissions = _only(submissions, args.student)
    settings = grading.setup_batch(out / "course", Path(args.solution).resolve(), Path(args.autograder).resolve(),
                                   args.jobs, args.timeout)
    with tqdm(total=len(submissions), desc="autograde") as bar:
        grades, replaced = results.grade_class(out, submissions, settings, resume=args.resume,
                                               progress=lambda _: bar.update())
    counts = {status: sum(g.status == status for g in grades) for status in grading.STATUSES}
    print(f"wrote {out / 'grades.csv'} and feedback/<student>.html: "
          + ", ".join(f"{n} {status}" for status, n in counts.items() if n))
    if replaced:
        print(f"replaced the earlier rows of {len(replaced)} student(s), kept in {out / 'regrades.csv'}: "
              + ", ".join(replaced))
    off_roster = [s.name for s in submissions if s.on_roster is False]
    if off_roster:
        print(f"not on the roster ({len(off_roster)}): {', '.join(off_roster)}")
    return 0


def cmd_autograde_one(args: argparse.Namespace) -> int:
    from .course import grading, results
    from .course.collect import Submission, file_time, nbgrader_id, student_name

    _check_grading_options(args)
    path = Path(args.notebook)
    if not path.is_file():
        raise ValueError(f"{path} is not a file: pass the student's notebook")
    name = args.student or student_name(path.stem, args.id_regex)
    out = Path(args.out).resolve()
    settings = grading.setup_batch(out / "course", Path(args.solution).resolve(), Path(args.autograder).resolve(),
                                   1, args.timeout)
    submission = Submission(nbgrader_id(name), path, name=name, submitted_at=file_time(path))
    [grade], _ = results.grade_class(out, [submission], settings)
    print(f"{name}: {grade.status}, {grade.score:g} / {grade.max_score:g} auto-graded points; "
          f"result in {out / 'done' / grade.student}.json (specdec-kit merge gathers such folders)")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from .course import export, report, results, verdict
    from .course.publish import load_config

    graded, autograder = Path(args.out).resolve(), Path(args.autograder).resolve()
    replaced = results.merge_results([Path(p).resolve() for p in args.parts], graded,
                                     Path(args.solution).resolve(), autograder)
    grades = export.class_grades(graded, load_config(autograder).deadline)
    export.write_gradescope(grades, graded / "grades_export.csv")
    page = report.build_report(graded, verdict.load_plan(autograder).min_ratio)
    (graded / "report.html").write_text(page, encoding="utf-8")
    print(f"merged {len(args.parts)} folder(s) into {graded}: grades.csv ({len(grades)} students), "
          f"grades_export.csv, report.html, feedback/"
          + (f"; replaced the earlier rows of {', '.join(replaced)} (kept in regrades.csv)" if replaced else ""))
    return 0


def cmd_gradescope(args: argparse.Namespace) -> int:
    from .course.gradescope import build_bundle

    print(f"wrote {build_bundle(Path('.'), Path(args.out))}: upload it as the assignment's autograder (Gradescope "
          "builds its image with setup.sh, then runs run_autograder on each submission)")
    return 0


def _only(submissions: list, wanted: list[str]) -> list:
    """The submissions of the students named (by the id in the files or nbgrader's), all of them found."""
    chosen = [s for s in submissions if {s.student.casefold(), s.name.casefold()} & {w.casefold() for w in wanted}]
    found = {n.casefold() for s in chosen for n in (s.student, s.name)}
    unknown = [w for w in wanted if w.casefold() not in found]
    if unknown:
        raise ValueError(f"--student: no submission of {', '.join(unknown)} under the submissions given")
    return chosen


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
    if getattr(args, "roster_column", None) and not getattr(args, "roster", None):
        raise ValueError("--roster-column needs --roster (the CSV whose column it names)")


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


def cmd_export(args: argparse.Namespace) -> int:
    from .course import export
    from .course.collect import read_roster
    from .course.publish import load_config

    graded = Path(args.graded)
    deadline = load_config(Path(args.autograder)).deadline
    roster = read_roster(Path(args.roster), args.roster_column) if args.roster else None
    grades = export.class_grades(graded, deadline, roster)
    out = Path(args.out)
    if args.template:
        unlisted = export.fill_canvas(Path(args.template), grades, out, args.column)
        if unlisted:
            print(f"not in the Canvas template, so not exported ({len(unlisted)}): {', '.join(unlisted)}")
    else:
        export.write_gradescope(grades, out)
    pending = [g.student for g in grades if g.manual is None]
    late = [g.student for g in grades if g.late_by]
    print(f"wrote {out}: {len(grades)} students, {len(late)} late (due {deadline.due.isoformat()}, "
          f"{deadline.grace_minutes} min grace), {len(pending)} with a hand-graded part pending"
          + (f" ({', '.join(pending)}: their totals hold the auto-graded points only)" if pending else ""))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from .course import report, verdict

    graded = Path(args.graded)
    autograder = Path(args.autograder)
    min_ratio = verdict.load_plan(autograder).min_ratio if (autograder / "hidden.py").is_file() else None
    out = Path(args.out) if args.out else graded / "report.html"
    out.write_text(report.build_report(graded, min_ratio), encoding="utf-8")
    print(f"wrote {out}")
    return 0


def _notebook(path: str | None) -> Path:
    notebook = Path(path) if path else DEFAULT_NOTEBOOK
    if not notebook.is_file():
        raise FileNotFoundError(f"no notebook at {notebook}: run from the repository root or pass --notebook PATH")
    return notebook


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Examples kept as written; every option with a default says "(default: X)" the same way."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "%(default)" not in help_text \
                and action.option_strings:
            help_text += " (default: %(default)s)"
        return help_text


WORKFLOW = """\
the course's path through the commands:
  students and maintainers   demo, bench, adaptive, zoo, time-notebook
  instructors                build-notebook -> release -> selftest -> autograde -> feedback -> export,
                             report (or, per container: autograde-one -> merge; on Gradescope: gradescope)
run `specdec-kit COMMAND --help` for a command's options and an example."""


def _command(commands, name: str, help_text: str, example: str, parents=()) -> argparse.ArgumentParser:
    return commands.add_parser(name, parents=list(parents), help=help_text, description=help_text,
                               epilog=f"example:\n  {example}", formatter_class=_Formatter)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec-kit", description=__doc__.split("\n")[0], epilog=WORKFLOW,
                                     formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
    common.add_argument("--notebook", help=f"notebook whose decoders to run (default: {DEFAULT_NOTEBOOK})")

    demo = _command(commands, "demo", "decode the kit's prompts with a notebook's decoder against target greedy",
                    "specdec-kit demo --pair tiny --k 3", [common])
    demo.add_argument("--k", type=int, default=4, help="draft tokens per round")
    demo.add_argument("--sweep", default="1,2,4", help="k values of the plot's short sweep ('' for none)")
    demo.add_argument("--out", default="out/demo", help="directory for the sweep's bench.png, .csv and .json")
    demo.set_defaults(func=cmd_demo)

    bench = _command(commands, "bench", "time the notebook's decoders against target greedy and HF assisted "
                     "generation", "specdec-kit bench --pair synthetic-small --k 1,2,4 --repeats 2 --limit 4",
                     [common])
    bench.add_argument("--k", default="1,2,4,8", help="comma-separated k values")
    bench.add_argument("--repeats", type=int, default=3, help="timed runs per method, k and prompt")
    bench.add_argument("--methods", default="target_greedy,hf_assisted,no_cache,cached",
                       help="comma-separated subset of target_greedy,hf_assisted,no_cache,cached and the "
                            "model-free hf_prompt_lookup,prompt_lookup (the notebook's PromptLookupDecoder)")
    bench.add_argument("--temperatures", default="",
                       help="also time speculative sampling (target_sampling, hf_assisted_sampling and the notebook's "
                            "SpeculativeSampler) at these comma-separated temperatures, e.g. 0.7,1.0")
    bench.add_argument("--out", default="out/bench", help="directory for bench.csv, bench.json, bench.png")
    bench.add_argument("--json", help="write the JSON here instead of OUT/bench.json")
    bench.set_defaults(func=cmd_bench)

    adaptive = _command(commands, "adaptive", "judge the notebook's adaptive k against every fixed k and HF's "
                        "heuristic schedule, on several pairs in one run",
                        "specdec-kit adaptive --pairs tiny,tiny-b,synthetic-small --k 1,2,3,4,6,8 --repeats 2",
                        [common])
    adaptive.add_argument("--pairs", default="tiny,tiny-b,synthetic-small", help="comma-separated pairs to judge on")
    adaptive.add_argument("--k", default="1,2,3,4,6,8", help="the fixed k values (must include 4, the first k)")
    adaptive.add_argument("--repeats", type=int, default=3, help="timed runs per method, k and prompt")
    adaptive.add_argument("--out", default="out/adaptive", help="directory for adaptive.json and each pair's files")
    adaptive.set_defaults(func=cmd_adaptive)

    zoo_cmd = _command(commands, "zoo", "build offline model pairs into the cache and print their records",
                       "specdec-kit zoo scripted tiny")
    zoo_cmd.add_argument("pairs", nargs="*", help="pairs to build (default: scripted tiny synthetic-small)")
    zoo_cmd.set_defaults(func=cmd_zoo)

    timing = _command(commands, "time-notebook", "run the student notebook as a student would, timing each cell "
                      "(the student README's figures)", "specdec-kit time-notebook --finished --fresh-cache")
    timing.add_argument("--finished", action="store_true", help="the solution as handed in, not the blank release")
    timing.add_argument("--fresh-cache", action="store_true", help="build the offline models anew, as a first run")
    timing.add_argument("--solution", default=str(DEFAULT_NOTEBOOK), help="nbgrader source notebook")
    timing.add_argument("--release", default="assignment/speculative_decoding.ipynb", help="the student notebook")
    timing.set_defaults(func=cmd_time_notebook)

    build = _command(commands, "build-notebook", "build .ipynb files from their jupytext .py twins",
                     "specdec-kit build-notebook solutions/speculative_decoding.py")
    build.add_argument("scripts", nargs="+", help="percent-format .py files")
    build.add_argument("--check", action="store_true", help="exit 1 if an .ipynb differs from a rebuild")
    build.set_defaults(func=cmd_build_notebook)

    rel = _command(commands, "release", "generate the student notebook from the solution with nbgrader",
                   "specdec-kit release --student-repo ../specdec-assignment")
    rel.add_argument("--solution", default=str(DEFAULT_NOTEBOOK), help="nbgrader source")
    rel.add_argument("--out", default="assignment", help="directory of the student notebook")
    rel.add_argument("--check", action="store_true", help="exit 1 if the committed release differs from a new one")
    rel.add_argument("--student-repo", help="also export the student-facing tree into this directory: new, empty or "
                                            "a previous export, updated in place (.git and your own files kept)")
    rel.add_argument("--autograder", default="autograder",
                     help="the instructor's autograder/ directory; its config.toml's [publish] names the student "
                          "repository and tag")
    rel.set_defaults(func=cmd_release)

    selftest = _command(commands, "selftest", "autograde the solution, the blank release and the known-bug "
                        "catalogue; exit 1 unless each scores as expected", "specdec-kit selftest --jobs 2")
    selftest.add_argument("--solution", default=str(DEFAULT_NOTEBOOK), help="nbgrader source notebook")
    selftest.add_argument("--release", default="assignment/speculative_decoding.ipynb", help="the student notebook")
    selftest.add_argument("--autograder", default="autograder", help="the instructor's autograder/ directory")
    selftest.add_argument("--workdir", default="out/selftest", help="scratch directory (replaced)")
    selftest.add_argument("--timeout", type=int, help="seconds each notebook's own run may take (default: "
                                                      "autograder/config.toml)")
    selftest.add_argument("--only", nargs="*", help="grade only these catalogue entries (and solution, blank)")
    selftest.add_argument("--jobs", type=int, default=1, help="submissions graded at once")
    selftest.set_defaults(func=cmd_selftest)

    autograde = _command(commands, "autograde", "grade a class's notebooks with nbgrader into grades.csv",
                         "specdec-kit autograde downloads/ --out graded --roster roster.txt --jobs 2")
    autograde.add_argument("submissions", help="a folder (or a zip) of <student>.ipynb files, one folder per student, "
                                               "or nbgrader's submitted/ tree")
    autograde.add_argument("--out", default="graded", help="output directory; a second run merges into its "
                                                           "grades.csv")
    autograde.add_argument("--roster", help="the class list: a CSV with a header (an LMS's export) or one id per "
                                            "line; students without a submission get a row")
    autograde.add_argument("--roster-column", help="the roster CSV's id column (default: the first of "
                                                   "student_id, id, sid, login_id, SIS User ID, username, email)")
    autograde.add_argument("--student", nargs="+", help="grade only these students; every other row of "
                                                         "OUT/grades.csv stays as it was")
    autograde.add_argument("--resume", action="store_true", help="continue an interrupted batch: students already "
                                                                 "graded from the same file are not graded again")
    autograde.add_argument("--id-regex", help="regex whose first group is the student id in a file name")
    autograde.add_argument("--timeout", type=int, help="seconds each notebook's own run may take before it is "
                                                       "stopped (default: autograder/config.toml)")
    autograde.add_argument("--jobs", type=int, default=1,
                           help="notebooks graded at once; timed tests still run one at a time")
    autograde.add_argument("--solution", default=str(DEFAULT_NOTEBOOK), help="nbgrader source notebook")
    autograde.add_argument("--autograder", default="autograder", help="the instructor's autograder/ directory")
    autograde.set_defaults(func=cmd_autograde)

    fb = _command(commands, "feedback", "render the cleaned feedback pages again (after grading by hand)",
                  "specdec-kit feedback graded --student alice bob")
    fb.add_argument("graded", help="the --out folder of specdec-kit autograde")
    fb.add_argument("--student", nargs="*", help="only these students (default: everyone graded)")
    fb.set_defaults(func=cmd_feedback)

    exp = _command(commands, "export", "write the class's grades for the LMS: Gradescope's score import, or the "
                   "course's Canvas gradebook export filled in",
                   "specdec-kit export graded --template canvas_export.csv --out canvas_import.csv")
    exp.add_argument("graded", help="the --out folder of specdec-kit autograde")
    exp.add_argument("--out", default="grades_export.csv", help="the CSV to write")
    exp.add_argument("--template", help="the course's Canvas gradebook export (Grades > Export): its assignment "
                                        "column is filled in; without it, Gradescope's import format")
    exp.add_argument("--column", help="the Canvas column to fill (default: the one header naming 'speculative')")
    exp.add_argument("--roster", help="the class list (as for autograde): every student on it is exported")
    exp.add_argument("--roster-column", help="the roster CSV's id column")
    exp.add_argument("--autograder", default="autograder", help="the folder whose config.toml holds the deadline")
    exp.set_defaults(func=cmd_export)

    rep = _command(commands, "report", "write a self-contained HTML page on the class: scores, pass rates, common "
                   "failures, speed, flags, near-identical code", "specdec-kit report graded")
    rep.add_argument("graded", help="the --out folder of specdec-kit autograde")
    rep.add_argument("--out", help="the page to write (default: GRADED/report.html)")
    rep.add_argument("--autograder", default="autograder", help="the folder whose config.toml holds the speed bar")
    rep.set_defaults(func=cmd_report)

    one = _command(commands, "autograde-one", "grade one notebook into one folder (a container's share of a class; "
                   "specdec-kit merge gathers the folders)",
                   "specdec-kit autograde-one downloads/alice.ipynb --out results/alice")
    one.add_argument("notebook", help="the student's notebook")
    one.add_argument("--out", required=True, help="the folder for its result (done/<id>.json), course and feedback")
    one.add_argument("--student", help="the student's id (default: from the file name)")
    one.add_argument("--id-regex", help="regex whose first group is the student id in the file name")
    one.add_argument("--timeout", type=int, help="seconds the notebook's own run may take (default: "
                                                 "autograder/config.toml)")
    one.add_argument("--solution", default=str(DEFAULT_NOTEBOOK), help="nbgrader source notebook")
    one.add_argument("--autograder", default="autograder", help="the instructor's autograder/ directory")
    one.set_defaults(func=cmd_autograde_one, jobs=1)

    merge = _command(commands, "merge", "gather autograde-one folders into one graded class: grades.csv, the "
                     "gradebook, feedback, grades_export.csv and report.html",
                     "specdec-kit merge results/* --out graded")
    merge.add_argument("parts", nargs="+", help="folders written by specdec-kit autograde-one")
    merge.add_argument("--out", default="graded", help="the class's folder; rows of students not in PARTS stay")
    merge.add_argument("--solution", default=str(DEFAULT_NOTEBOOK), help="nbgrader source notebook")
    merge.add_argument("--autograder", default="autograder", help="the instructor's autograder/ directory")
    merge.set_defaults(func=cmd_merge)

    gradescope = _command(commands, "gradescope", "build Gradescope's autograder zip (setup.sh, run_autograder "
                          "and the kit)", "specdec-kit gradescope --out autograder.zip")
    gradescope.add_argument("--out", default="autograder.zip", help="the zip to write")
    gradescope.set_defaults(func=cmd_gradescope)
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
