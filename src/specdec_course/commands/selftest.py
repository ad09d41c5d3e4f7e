"""`specdec-course selftest`: the solution, the blank release and the catalogue graded (selftest.py): its progress on
stderr, a bar over the submissions with a line for each as it finishes; the table and the verdict on stdout."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from specdec_kit.cli import add_command

from ..core.waits import quiet_waits
from . import options


def register(commands) -> None:
    parser = add_command(commands, "selftest", "autograde the solution, the blank release and the known-bug "
                         "catalogue; exit 1 unless each scores as expected", "specdec-course selftest --jobs 2",
                         [options.solution, options.autograder, options.release, options.timeout, options.jobs,
                          options.no_sandbox])
    parser.add_argument("--workdir", default="out/selftest", help="scratch folder, emptied first: a new or empty "
                        "one, or one a previous selftest made (any other is refused)")
    parser.add_argument("--only", nargs="*", metavar="NAME", help="grade only these catalogue entries (and "
                        "solution, blank); an unknown name is refused")
    parser.add_argument("--load", type=int, default=0, metavar="N",
                        help="grade with N other autograde runs of the solved release going on the same machine, to "
                             "show that a loaded machine changes no row (docs/benchmarks.md)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    quiet_waits()  # before torch is imported
    import pandas as pd

    from ..selftest.catalogue import load_catalogue
    from ..selftest.load import loaded
    from ..selftest.selftest import check_workdir, run_selftest
    from .catalogue import check_names

    options.check_grading(args)
    check_names("--only", args.only or [], (e.name for e in load_catalogue(Path(args.autograder))))
    workdir = Path(args.workdir).resolve()  # `.` has no name to give the load's folder
    check_workdir(workdir)  # before the load's batches start
    with loaded(args.load, Path(args.solution).resolve(), Path(args.autograder).resolve(), workdir.parent /
                f"{workdir.name}-load"):
        outcomes = run_selftest(Path(args.solution), Path(args.release), Path(args.autograder), workdir,
                                timeout=args.timeout, only=args.only, jobs=args.jobs, sandboxed=args.sandboxed)
        load = os.getloadavg()[0]
    table = pd.DataFrame([vars(o) for o in outcomes])
    with pd.option_context("display.max_colwidth", 80, "display.width", 250):
        print(table.drop(columns="problems")
              .rename(columns={"name": "submission", "lost": "tests lost", "vs_hf_assisted": "speed"})
              .to_string(index=False, na_rep="-", formatters={"seconds": "{:.0f}".format, "speed": "{:.2f}x".format}))
    for outcome in outcomes:
        if outcome.problems:
            print(f"{outcome.name} is not as expected: {'; '.join(outcome.problems)}")
    print(f"{int(table.ok.sum())}/{len(table)} submissions graded as expected; "
          f"median {table.seconds.median():.0f} s per submission; the machine's load at the end {load:.1f} "
          f"({os.cpu_count()} cores{f', {args.load} other batches' if args.load else ''})")
    return 0 if table.ok.all() else 1
