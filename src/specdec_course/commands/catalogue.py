"""`specdec-course catalogue`: the catalogue's table for docs/instructors.md, or which tests entries lose by the
checks alone (selftest/losses.py), to write an entry's `fails` before the selftest grades it. --losses takes minutes
an entry: a bar on stderr counts the entries, another the tests of the one under way; what each loses goes to stdout
as it is known."""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Iterable
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
    check_names("--losses", args.losses, entries)
    from tqdm.auto import tqdm

    from ..selftest.losses import losses, timed_only

    agree = True
    with tempfile.TemporaryDirectory() as work, tqdm(args.losses, desc="catalogue --losses", unit="entry") as bar:
        for name in bar:
            bar.set_postfix_str(name)
            entry = entries[name]
            with contextlib.redirect_stdout(sys.stderr):  # the notebook's prints as it loads, the entry's own
                found = losses(entry, Path(args.autograder), Path(args.solution), Path(work), progress=True)
            timed = timed_only(entry, found)
            lost = sorted(found)
            lines = [f"{name} ({entry.kind}) loses {', '.join(lost) or 'nothing'}"
                     + (f", and by timing alone {', '.join(sorted(timed))}" if timed else ""),
                     *(f"  {test}: {found[test].splitlines()[0][:200]}" for test in lost)]
            if set(lost) | timed != set(entry.fails):
                agree = False
                lines.append(f"  its fails say {', '.join(sorted(entry.fails)) or 'nothing'}: make them "
                             f"{lost + sorted(timed)}")
            bar.write("\n".join(lines), file=sys.stdout)  # above the bars, which stay on stderr
    return 0 if agree else 1


def check_names(option: str, names: list[str], entries: Iterable[str]) -> None:
    """Refuse `names` that are no catalogue entry (selftest --only too): a misspelt one would be left out unseen."""
    entries = list(entries)
    unknown = [name for name in names if name not in entries]
    if unknown:
        raise ValueError(f"{option}: no catalogue entry {', '.join(unknown)}; the entries: {', '.join(entries)}")
