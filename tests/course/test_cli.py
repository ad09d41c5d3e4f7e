"""The `specdec-course` command (the instructors'): the notebook-build check, clear errors (the grading options'
checks, commands/options.py), a quick help."""

import shutil

import pytest

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
    script, docs = tmp_path / "nb.py", ["--docs", str(tmp_path / "students.md")]
    shutil.copy(REPO / "solutions" / "speculative_decoding.py", script)
    shutil.copy(REPO / "docs" / "students.md", tmp_path / "students.md")
    assert main(["build-notebook", str(script), *docs]) == 0, "build-notebook should build the notebook and exit with 0"
    assert main(["build-notebook", "--check", str(script), *docs]) == 0, (
        "build-notebook --check on a freshly built notebook should exit with 0"
    )
    first = script.with_suffix(".ipynb").read_text()
    assert main(["build-notebook", str(script), *docs]) == 0, "rebuilding the notebook should exit with 0"
    assert script.with_suffix(".ipynb").read_text() == first, "rebuilding must give the same bytes"
    script.write_text(script.read_text() + "\n# %%\nx = 1\n")
    assert main(["build-notebook", "--check", str(script), *docs]) == 1, (
        "build-notebook --check after the script changed should exit with 1"
    )
    assert "is stale" in capsys.readouterr().err, "build-notebook --check should report the stale notebook on stderr"


def test_top_level_help_gives_the_instructors_order():
    top = cli.build_parser().format_help()
    assert "build-notebook -> release -> catalogue -> selftest -> autograde" in top, f"the instructor's order: {top}"


def test_the_readme_lists_every_subcommand_of_both_commands():
    from specdec_kit import cli as kit_cli

    readme = (REPO / "README.md").read_text()
    for parser in (kit_cli.build_parser(), cli.build_parser()):
        commands = next(a for a in parser._actions if a.dest == "command").choices
        missing = [name for name in commands if f"`{name}`" not in readme]
        assert not missing, f"README.md's table of {parser.prog}'s subcommands lacks {missing}"


def test_no_flag_reads_as_its_opposite_in_help():
    """A flag's help says what it does, never "(default: True)": `--no-sandbox` read as "no sandbox by default"."""
    commands = next(a for a in cli.build_parser()._actions if a.dest == "command").choices
    for name, parser in commands.items():
        text = " ".join(parser.format_help().split())
        assert "(default: True)" not in text and "(default: False)" not in text, f"{name}'s help: {text}"
    autograde = " ".join(commands["autograde"].format_help().split())
    assert "Without this flag (the default) every submission runs in the strongest sandbox" in autograde, autograde
