"""Both commands, the students' specdec-kit and the instructors' specdec-course: a help that answers at once, and an
example in every subcommand's help.

Example run: python -m pytest tests/test_commands.py -q
"""

import argparse
import importlib
import subprocess
import sys

import pytest
import tomllib

from conftest import REPO

COMMANDS = [("specdec_kit.cli", "specdec-kit", "bench"), ("specdec_course.cli", "specdec-course", "autograde")]


@pytest.mark.parametrize("module,program,subcommand", COMMANDS)
def test_help_and_version_import_no_heavy_library(module, program, subcommand):
    """--help and --version answer at once: torch, transformers and nbgrader load only in the commands."""
    probe = (f"import sys, {module} as cli\n"
             f"for argv in (['--help'], ['--version'], ['{subcommand}', '--help']):\n"
             "    try:\n        cli.main(argv)\n    except SystemExit:\n        pass\n"
             "print('HEAVY', sorted(m for m in ('torch', 'transformers', 'nbgrader', 'nbformat') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out, f"--help and --version should import none of torch, transformers, nbgrader: {out[-300:]}"
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert f"{program} {version}" in out, f"--version should print the project's version {version}"


@pytest.mark.parametrize("module,program,subcommand", COMMANDS)
def test_every_subcommand_has_an_example(module, program, subcommand):
    parser = importlib.import_module(module).build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    lacking = [name for name, sub in commands.items() if f"{program} {name}" not in (sub.epilog or "")]
    assert not lacking, f"every command's --help should end with an example of it; lacking: {lacking}"
    assert "`" not in parser.format_help(), "the top-level help is plain text, without markdown backticks"
