"""The `specdec-course` command (the instructors'): the notebook-build check, clear errors, a quick help."""

import argparse
import shutil
import subprocess
import sys

import pytest
import tomllib

from specdec_course import cli
from specdec_course.cli import main

from conftest import REPO


@pytest.mark.parametrize("argv,message", [
    (["autograde", "submissions", "--jobs", "0"], "--jobs must be at least 1"),
    (["autograde", "submissions", "--timeout", "0"], "--timeout must be a positive number of seconds"),
    (["autograde", "submissions", "--timeout", "-3"], "--timeout must be a positive number of seconds"),
    (["autograde", "submissions", "--id-regex", "(unclosed"], "is not a regular expression"),
    (["autograde", "submissions", "--autograder", "nowhere"], "--autograder: nowhere/hidden.py does not exist"),
    (["autograde", "submissions", "--roster", "nobody.txt"], "--roster: nobody.txt does not exist"),
    (["autograde", "no-such-folder"], "no-such-folder does not exist"),
    (["autograde", "data"], "no notebooks under data"),
    (["autograde", "submissions", "--roster-column", "x"], "--roster-column needs --roster"),
    (["export", "no-such-folder"], "holds no grades.csv"),
    (["feedback", "no-such-folder"], "holds no graded course"),
])
def test_bad_arguments_give_one_clear_line(capsys, monkeypatch, argv, message):
    monkeypatch.chdir(REPO)
    assert main(argv) == 2, f"{argv} must fail with exit status 2"
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, f"one line naming {message!r}; got {err!r}"


def test_build_notebook_check_detects_a_stale_notebook(tmp_path, capsys):
    script = tmp_path / "nb.py"
    shutil.copy(REPO / "solutions" / "speculative_decoding.py", script)
    assert main(["build-notebook", str(script)]) == 0, "build-notebook should build the notebook and exit with 0"
    assert main(["build-notebook", "--check", str(script)]) == 0, (
        "build-notebook --check on a freshly built notebook should exit with 0"
    )
    first = script.with_suffix(".ipynb").read_text()
    assert main(["build-notebook", str(script)]) == 0, "rebuilding the notebook should exit with 0"
    assert script.with_suffix(".ipynb").read_text() == first, "rebuilding must give the same bytes"
    script.write_text(script.read_text() + "\n# %%\nx = 1\n")
    assert main(["build-notebook", "--check", str(script)]) == 1, (
        "build-notebook --check after the script changed should exit with 1"
    )
    assert "is stale" in capsys.readouterr().err, "build-notebook --check should report the stale notebook on stderr"


def test_help_and_version_import_no_heavy_library():
    """--help and --version answer at once: torch, transformers and nbgrader load only in the commands."""
    probe = ("import sys; from specdec_course import cli\n"
             "for argv in (['--help'], ['--version'], ['autograde', '--help']):\n"
             "    try:\n        cli.main(argv)\n    except SystemExit:\n        pass\n"
             "print('HEAVY', sorted(m for m in ('torch', 'transformers', 'nbgrader', 'nbformat') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out, f"--help and --version should import none of torch, transformers, nbgrader: {out[-300:]}"
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert f"specdec-course {version}" in out, f"--version should print the project's version {version}"


def test_every_command_has_an_example_and_the_top_level_lists_the_workflow():
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    lacking = [name for name, sub in commands.items() if f"specdec-course {name}" not in (sub.epilog or "")]
    assert not lacking, f"every command's --help should end with an example of it; lacking: {lacking}"
    top = parser.format_help()
    assert "build-notebook -> release -> selftest -> autograde" in top and "`" not in top, \
        f"the top-level help should give the instructor's order, without markdown backticks: {top}"
