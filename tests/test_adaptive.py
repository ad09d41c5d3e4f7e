"""Adaptive k: the check's predictions rest on what the scripted draft really does, its cases meet every rule of
the schedule, and the judgement of `specdec-kit adaptive` prices forwards as it says.

Example run: python -m pytest tests/test_adaptive.py -q
"""

import json

import pytest
import torch

from specdec_kit import adaptive_bench, zoo
from specdec_kit.checks import adaptive
from specdec_kit.cli import main
from specdec_kit.reference import predict_adaptive_rounds, schedule_k, zoo_model

from conftest import REPO


def test_the_scripted_draft_is_unsure_exactly_after_flat_tokens():
    """The prediction stops drafting after a flat token's proposal: the draft's own probabilities say so."""
    script = zoo.scripted_script()
    model, _ = zoo_model("scripted", "draft")
    tokens = list(script.cycle[:60])
    with torch.inference_mode():
        top = model(torch.tensor([tokens])).logits[0].float().softmax(-1).max(-1).values.tolist()
    unsure = [p for t, p in zip(tokens, top) if t in script.flat]
    sure = [p for t, p in zip(tokens, top) if t not in script.flat]
    assert unsure and max(unsure) < adaptive.THRESHOLD - 0.1, f"after flat tokens the draft is unsure: {unsure}"
    assert min(sure) > 0.9, f"elsewhere it is sure: {min(sure)}"


@pytest.mark.parametrize("k,planned,drafted,n_accepted,expected", [
    (4, 4, 4, 4, 6), (15, 15, 15, 15, 16), (4, 4, 4, 2, 3), (1, 1, 1, 0, 1), (4, 4, 2, 2, 4), (4, 2, 2, 2, 6),
])
def test_schedule(k, planned, drafted, n_accepted, expected):
    assert schedule_k(k, planned, drafted, n_accepted, max_k=16) == expected


def test_visible_cases_meet_every_rule():
    """Across the visible cases some round grows k, some shrinks it, and some stops at an unsure draft with every
    draft accepted (k kept): a decoder that gets any rule wrong fails a visible case."""
    cycle, seen = zoo.scripted_script().cycle, set()
    for start, k, max_tokens in adaptive.CASES:
        rounds = predict_adaptive_rounds(cycle[start], k, max_tokens)
        for i in range(len(rounds.k) - 1):
            seen.add(adaptive.schedule_step(rounds, i).split(", so ")[1].split(" ")[1])
    assert seen == {"grows", "shrinks", "stays"}, seen


def test_forwards_are_priced_by_input_length():
    micro = {"target_1": 1.0, "draft_1": 0.1, "target_verify": {"1": 1.5, "3": 2.5}}
    row = {"target_input_lengths": [20, 1, 2, 3, 4], "draft_forwards": 5}
    # 20 tokens: the longest price (k = 3 -> 4 tokens); 3 tokens: halfway between 2 and 4 tokens.
    assert adaptive_bench.forward_seconds(row, micro) == pytest.approx(2.5 + 1.0 + 1.5 + 2.0 + 2.5 + 0.5)


def test_adaptive_command_judges_each_pair(tmp_path, capsys):
    code = main(["adaptive", "--pairs", "tiny", "--k", "1,4", "--repeats", "1", "--limit", "2",
                 "--max-new-tokens", "16", "--threads", "2", "--out", str(tmp_path),
                 "--notebook", str(REPO / "solutions" / "speculative_decoding.ipynb")])
    out = capsys.readouterr().out
    [verdict] = json.loads((tmp_path / "adaptive.json").read_text())["verdicts"]
    assert code == (0 if adaptive_bench.passed(verdict) else 1), out
    assert verdict["best_fixed_k"] in (1, 4) and "adaptive / best fixed (cost)" in out, out
    assert (tmp_path / "tiny" / "bench.json").is_file(), "each pair's bench files are written"
