"""`specdec-course time-notebook`: the notebook run as a student would, each cell timed (student_run.py)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from specdec_kit.cli import add_command

from . import options


def register(commands) -> None:
    parser = add_command(commands, "time-notebook", "run the student notebook as a student would, timing each cell "
                         "(the student README's figures)", "specdec-course time-notebook --finished --fresh-cache",
                         [options.solution, options.release])
    parser.add_argument("--finished", action="store_true", help="the solution as handed in, not the blank release")
    parser.add_argument("--fresh-cache", action="store_true", help="build the offline models anew, as a first run")
    parser.add_argument("--record", help="also record the total in this JSON file (the student README's figures are "
                                         "docs/figures/notebook-times.json's)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import tempfile

    import nbformat

    from ..selftest.student_run import finished_notebook, time_cells

    notebook = finished_notebook(Path(args.solution)) if args.finished else nbformat.read(args.release, as_version=4)
    with tempfile.TemporaryDirectory() as workdir:
        rows = time_cells(notebook, Path(workdir), fresh_cache=args.fresh_cache,
                          progress=lambda row: print(f"{row.seconds:7.1f} s  {row.cell}  {row.error}", flush=True))
    failed = sum(bool(row.error) for row in rows)
    which, cache, seconds = "finished" if args.finished else "blank", "fresh" if args.fresh_cache else "warm", \
        sum(r.seconds for r in rows)
    print(f"{which} notebook, {cache} zoo cache, {os.cpu_count()} cores: {seconds:.0f} s in {len(rows)} code "
          f"cells, {failed} ended in an error")
    if args.record:
        record_time(Path(args.record), which, cache, seconds, args.command_line)
        print(f"recorded in {args.record}")
    return 0


def record_time(path: Path, which: str, cache: str, seconds: float, command: str) -> None:
    """Set one of the four totals (blank or finished, fresh or warm cache) in `path`, with how it was measured."""
    import datetime
    import json

    from specdec_kit.bench.figures import machine

    data = json.loads(path.read_text()) if path.is_file() else {}
    data.setdefault(which, {})[cache] = {"seconds": round(seconds), "measured": datetime.date.today().isoformat(),
                                         "machine": machine(), "command": command}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
