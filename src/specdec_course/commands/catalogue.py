"""`specdec-course catalogue`: the catalogue's table for docs/instructors.md, or which tests entries lose by the
checks alone (selftest/losses.py), to write an entry's `fails` before the selftest grades it, and with --record to
keep what they lose in autograder/losses.json, which CI checks every entry's `fails` against (selftest/record.py).
--losses takes minutes an entry: a bar on stderr counts the entries, another the tests of the one under way; what
each loses goes to stdout as it is known."""

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
    parser.add_argument("--losses", nargs="*", metavar="NAME", help="entries to run every check on (visible and "
                        "hidden, the speed test's gate; every entry if none is named): prints the tests each loses "
                        "against its `fails`")
    parser.add_argument("--record", action="store_true", help="with --losses: keep what the entries lose, and "
                        "digests of what decided it, in autograder/losses.json (commit it: CI checks the catalogue "
                        "against it)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..selftest.catalogue import catalogue_table, load_catalogue
    from ..selftest.record import agreement, measured_record, read_record, timed_only, write_record

    autograder, solution = Path(args.autograder), Path(args.solution)
    entries = {e.name: e for e in load_catalogue(autograder)}
    if args.losses is None:
        if args.record:
            raise ValueError("--record keeps what --losses finds: add --losses (every entry) or --losses NAME ...")
        print(catalogue_table(list(entries.values())), end="")
        return 0
    names = args.losses or list(entries)
    check_names("--losses", names, entries)
    if args.record:
        refuse_partial_record(names, list(entries.values()), solution, autograder)
    from tqdm.auto import tqdm

    from ..selftest.losses import losses

    agree, found_all = True, {}
    with tempfile.TemporaryDirectory() as work, tqdm(names, desc="catalogue --losses", unit="entry") as bar:
        for name in bar:
            bar.set_postfix_str(name)
            entry = entries[name]
            with contextlib.redirect_stdout(sys.stderr):  # the notebook's prints as it loads, the entry's own
                found = losses(entry, autograder, solution, Path(work), progress=True)
            found_all[name] = set(found)
            timed = timed_only(entry, set(found))
            lost = sorted(found)
            lines = [f"{name} ({entry.kind}) loses {', '.join(lost) or 'nothing'}"
                     + (f", and by timing alone {', '.join(sorted(timed))}" if timed else ""),
                     *(f"  {test}: {found[test].splitlines()[0][:200]}" for test in lost)]
            if agreement(entry, set(lost)) is not None:
                agree = False
                lines.append(f"  its fails say {', '.join(sorted(entry.fails)) or 'nothing'}: make them "
                             f"{lost + sorted(timed)}")
            bar.write("\n".join(lines), file=sys.stdout)  # above the bars, which stay on stderr
    if args.record:
        path = write_record(autograder, measured_record(found_all, entries, solution, autograder,
                                                        read_record(autograder)))
        print(f"recorded in {path}: commit it", file=sys.stderr)
    return 0 if agree else 1


def refuse_partial_record(names: list[str], entries: list, solution: Path, autograder: Path) -> None:
    """Refuse to record some entries where the checks' inputs changed since the record: the rest would stand on the
    old ones. Before any entry runs."""
    from ..selftest.record import COMMAND, check_record

    stale = check_record(entries, solution, autograder).stale_inputs
    if stale and set(names) != {entry.name for entry in entries}:
        raise ValueError(f"the checks' inputs changed since the record ({', '.join(stale[:5])}"
                         f"{', ...' if len(stale) > 5 else ''}): record every entry, `{COMMAND}`")


def check_names(option: str, names: list[str], entries: Iterable[str]) -> None:
    """Refuse `names` that are no catalogue entry (selftest --only too): a misspelt one would be left out unseen."""
    entries = list(entries)
    unknown = [name for name in names if name not in entries]
    if unknown:
        raise ValueError(f"{option}: no catalogue entry {', '.join(unknown)}; the entries: {', '.join(entries)}")
