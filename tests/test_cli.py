"""The `specdec-kit` command: the demo's table, the notebook-build check and clear errors."""

import shutil

import pytest

from specdec_kit.cli import main

from conftest import REPO


def test_demo_prints_identical_rows_on_tiny(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code = main(["demo", "--pair", "tiny", "--k", "3", "--max-new-tokens", "12", "--threads", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "identical to target greedy: 13/13 prompts" in out, (
        f"the demo should report all 13 prompts identical to target greedy; it printed:\n{out}"
    )
    assert "pair: tiny" in out and "device cpu, dtype float32, threads 2, k 3" in out, (
        f"the demo should name the pair tiny and device cpu, dtype float32, threads 2, k 3; it printed:\n{out}"
    )


@pytest.mark.parametrize("argv,message", [
    (["demo", "--pair", "tiny", "--k", "0"], "--k must be at least 1"),
    (["demo", "--pair", "nope"], "unknown pair 'nope'"),
    (["demo", "--pair", "tiny", "--notebook", "missing.ipynb"], "no notebook at missing.ipynb"),
    (["demo", "--target", "zoo:tiny/target"], "--target and --draft go together"),
    (["autograde", "submissions", "--jobs", "0"], "--jobs must be at least 1"),
    (["autograde", "submissions", "--timeout", "0"], "--timeout must be a positive number of seconds"),
    (["autograde", "submissions", "--timeout", "-3"], "--timeout must be a positive number of seconds"),
    (["autograde", "submissions", "--id-regex", "(unclosed"], "is not a regular expression"),
    (["autograde", "submissions", "--autograder", "nowhere"], "--autograder: nowhere/hidden.py does not exist"),
    (["autograde", "submissions", "--roster", "nobody.txt"], "--roster: nobody.txt does not exist"),
    (["autograde", "no-such-folder"], "no notebooks under no-such-folder"),
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
