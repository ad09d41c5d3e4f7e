"""The specdec-course command, the instructors': cut the release, grade a class, prove the kit on its catalogue,
and time what students cannot (HF's own methods, adaptive k against them). Students run `specdec-kit`.

Torch, transformers and nbgrader are imported inside the commands that use them, so that `--help` and
`--version` answer at once.
"""

from __future__ import annotations

import argparse
import sys

from specdec_kit import __version__
from specdec_kit.cli import Formatter, run_command

from .commands import (
    adaptive,
    autograde,
    autograde_one,
    bench,
    build_notebook,
    catalogue,
    export,
    feedback,
    gradescope,
    merge,
    release,
    report,
    selftest,
    time_notebook,
)

# The commands in the course's order (each module registers its parser and runs it).
COMMANDS = (bench, adaptive, time_notebook, build_notebook, release, catalogue, selftest, autograde, feedback, export,
            report, autograde_one, merge, gradescope)


WORKFLOW = """\
the course's path through the commands:
  build-notebook -> release -> catalogue -> selftest -> autograde -> feedback -> export, report
  (or, per container: autograde-one -> merge; on Gradescope: gradescope)
  bench and adaptive time HF's own methods beside the notebook's; time-notebook gives the student README's figures
run specdec-course COMMAND --help for a command's options and an example."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec-course", description=__doc__.split("\n")[0], epilog=WORKFLOW,
                                     formatter_class=Formatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser(), argv, "specdec-course")


if __name__ == "__main__":
    sys.exit(main())
