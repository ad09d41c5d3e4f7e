"""`specdec-course gradescope`: Gradescope's autograder zip (gradescope.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from specdec_kit.cli import add_command


def register(commands) -> None:
    parser = add_command(commands, "gradescope", "build Gradescope's autograder zip (setup.sh, run_autograder "
                         "and the kit)", "specdec-course gradescope --out autograder.zip")
    parser.add_argument("--out", default="autograder.zip", help="the zip to write")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..platforms.gradescope import build_bundle

    print(f"wrote {build_bundle(Path('.'), Path(args.out))}: upload it as the assignment's autograder (Gradescope "
          "builds its image with setup.sh, then runs run_autograder on each submission)")
    return 0
