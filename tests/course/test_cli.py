"""The `specdec-course` command (the instructors'): the notebook-build check, clear errors, a quick help."""

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


def test_top_level_help_gives_the_instructors_order():
    top = cli.build_parser().format_help()
    assert "build-notebook -> release -> selftest -> autograde" in top, f"the instructor's order: {top}"
