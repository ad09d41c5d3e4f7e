"""Both commands, the students' specdec-kit and the instructors' specdec-course: a help that answers at once, an
example in every subcommand's help, and long commands' progress on stderr with stdout kept for their results (here
catalogue --losses and export, their heavy parts replaced; release and selftest in their own tests).

Example run: python -m pytest tests/test_commands.py -q
"""

import argparse
import importlib
import subprocess
import sys
import tomllib

import pytest

from specdec_course.cli import main

from conftest import REPO

AUTOGRADER = str(REPO / "autograder")

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


def test_catalogue_losses_counts_its_entries_on_stderr_and_prints_each_ones_losses_on_stdout(capsys, monkeypatch):
    from specdec_course.selftest import losses

    def entry_losses(entry, autograder, solution, work, progress):
        print("device cpu, pair tiny")  # what the notebook prints as it loads: not a result
        return {test: f"CheckFailed: {test} failed" for test in entry.fails}  # each loses what its entry says

    monkeypatch.setattr(losses, "losses", entry_losses)
    names = ["no_bonus_token", "cache_not_cropped"]
    code = main(["catalogue", "--losses", *names, "--autograder", AUTOGRADER,
                 "--solution", str(REPO / "solutions" / "speculative_decoding.ipynb")])
    printed = capsys.readouterr()
    assert code == 0, f"entries that lose what their fails say agree: {printed}"
    assert "catalogue --losses" in printed.err and "2/2" in printed.err, f"the bar counts the entries: {printed.err!r}"
    heads = [line for line in printed.out.splitlines() if not line.startswith("  ")]
    assert [line.split()[0] for line in heads] == names and "%|" not in printed.out, (
        f"stdout holds each entry's losses, in order, and no bar: {printed.out!r}")
    assert "device cpu" in printed.err, f"what loading the notebook prints goes to stderr: {printed.err!r}"


def test_export_counts_its_steps_on_stderr_and_says_what_it_wrote_on_stdout(tmp_path, capsys, monkeypatch):
    from specdec_course.platforms import lms

    monkeypatch.setattr(lms, "class_grades", lambda graded, deadline, roster: [
        lms.ClassGrade("ann01", "graded", 90.0, 10.0, 100.0, None, None)])  # as nbgrader's gradebook gives it
    (tmp_path / "graded").mkdir()
    (tmp_path / "graded" / "grades.csv").write_text("student,status,score\n")  # export refuses a folder without one
    out = tmp_path / "export.csv"
    assert main(["export", str(tmp_path / "graded"), "--autograder", AUTOGRADER, "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "export" in printed.err and "2/2" in printed.err, f"the bar counts the steps: {printed.err!r}"
    lines = printed.out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"wrote {out}: 1 students"), (
        f"stdout is the one line saying what was written: {printed.out!r}")
    assert "ann01" in out.read_text(), "the export holds the class's grades"
