"""`specdec-course catalogue`: the catalogue's table for docs/instructors.md, or which tests entries lose by the
checks alone (selftest/losses.py), to write an entry's `fails` before the selftest grades it."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from specdec_kit.cli import add_command

from . import options


def register(commands) -> None:
    parser = add_command(commands, "catalogue", "print the catalogue's table, or which tests entries lose by the "
                         "checks alone (minutes an entry, no nbgrader, no timing)",
                         "specdec-course catalogue --losses off_by_one_late",
                         [options.solution, options.autograder])
    parser.add_argument("--losses", nargs="+", metavar="NAME", help="entries to run every check on (visible and "
                        "hidden, the speed test's gate): prints the tests each loses against its `fails`")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..selftest.catalogue import catalogue_table, load_catalogue

    entries = {e.name: e for e in load_catalogue(Path(args.autograder))}
    if not args.losses:
        print(catalogue_table(list(entries.values())), end="")
        return 0
    unknown = [name for name in args.losses if name not in entries]
    if unknown:
        raise ValueError(f"--losses: no catalogue entry {', '.join(unknown)}; the entries: {', '.join(entries)}")
    from ..selftest.losses import losses, timed_only

    agree = True
    with tempfile.TemporaryDirectory() as work:
        for name in args.losses:
            entry = entries[name]
            found = losses(entry, Path(args.autograder), Path(args.solution), Path(work))
            timed = timed_only(entry, found)
            lost = sorted(found)
            print(f"{name} ({entry.kind}) loses {', '.join(lost) or 'nothing'}"
                  + (f", and by timing alone {', '.join(sorted(timed))}" if timed else ""))
            for test in lost:
                print(f"  {test}: {found[test].splitlines()[0][:200]}")
            if set(lost) | timed != set(entry.fails):
                agree = False
                print(f"  its fails say {', '.join(sorted(entry.fails)) or 'nothing'}: make them "
                      f"{lost + sorted(timed)}")
    return 0 if agree else 1
