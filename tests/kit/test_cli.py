"""The `specdec-kit` command (the students'): the demo's table, clear errors, a help that answers at once."""

import argparse

import pytest

from specdec_kit import cli
from specdec_kit.cli import main
from specdec_kit.core.prompts import load_prompts

from conftest import REPO


@pytest.mark.slow
@pytest.mark.release
def test_demo_prints_identical_rows_on_tiny(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code = main(["demo", "--pair", "tiny", "--k", "3", "--max-new-tokens", "12", "--threads", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    n = len(load_prompts())
    assert f"identical to target greedy: {n}/{n} prompts" in out, (
        f"the demo should report all {n} prompts identical to target greedy; it printed:\n{out}"
    )
    assert "pair: tiny" in out and "device cpu, dtype float32, threads 2, k 3" in out, (
        f"the demo should name the pair tiny and device cpu, dtype float32, threads 2, k 3; it printed:\n{out}"
    )
    assert out.count("pair:") == 1 and "device cpu, pair" not in out and "k sweep (1, 2, 4)" in out, \
        f"the pair is named once (the notebook's own prints stay quiet), then the sweep's line; it printed:\n{out}"


@pytest.mark.parametrize("argv,message", [
    (["demo", "--pair", "tiny", "--k", "0"], "--k must be at least 1"),
    (["demo", "--pair", "nope"], "unknown pair 'nope'"),
    (["demo", "--pair", "tiny", "--notebook", "missing.ipynb"], "no notebook at missing.ipynb"),
    (["demo", "--target", "zoo:tiny/target"], "--target and --draft go together"),
    (["bench", "--pair", "tiny", "--methods", "fastest"], "unknown method(s) fastest"),
])
def test_bad_arguments_give_one_clear_line(capsys, monkeypatch, argv, message):
    monkeypatch.chdir(REPO)
    assert main(argv) == 2, f"{argv} must fail with exit status 2"
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, f"one line naming {message!r}; got {err!r}"


def test_students_command_has_their_subcommands_and_points_instructors_elsewhere():
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(commands) == {"demo", "bench", "rounds", "zoo"}, f"students' commands only: {sorted(commands)}"
    assert "specdec-course" in parser.format_help(), "the top-level help points instructors to specdec-course"
