"""Adaptive k: the check's predictions rest on what the scripted draft really does, its cases meet every rule of
the schedule, and the judgement of `specdec-course adaptive` prices forwards as it says.

Example run: python -m pytest tests/course/bench/test_adaptive.py -q
"""

import json

import pytest
import torch

from specdec_course.bench import adaptive as adaptive_bench
from specdec_course.cli import main
from specdec_course.core.oracle import predict_adaptive_rounds, record_round, round_rates, schedule_k
from specdec_kit import zoo
from specdec_kit.checks import adaptive
from specdec_kit.core.timing import ForwardCosts
from specdec_kit.models.baseline import zoo_model

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


FLAT = ForwardCosts(draft=0.05, verify=(1.0,) * 17)


def test_counting_a_round():
    reached, rejected = [0] * 4, [0] * 4
    record_round(reached, rejected, drafted=3, n_accepted=1)  # draft 2 rejected: drafts 1 and 2 checked
    record_round(reached, rejected, drafted=2, n_accepted=2)  # all accepted: nothing rejected
    assert (reached, rejected) == ([2, 2, 0, 0], [0, 1, 0, 0])


def test_expected_tokens_per_second_follow_the_formula():
    reached, rejected = [4, 2, 1], [2, 1, 0]
    alpha = (7 - 3 + 3 * 0.75) / (7 + 3)
    h = [(rejected[j] + 3 * (1 - alpha)) / (reached[j] + 3) for j in range(3)]
    tokens = [1 + (1 - h[0]), 1 + (1 - h[0]) + (1 - h[0]) * (1 - h[1])]
    costs = ForwardCosts(draft=0.2, verify=(0.5, 1.0, 1.1, 1.2))
    rates = round_rates(reached, rejected, costs, max_k=3)
    assert rates[:2] == pytest.approx([tokens[0] / (0.2 + 1.0), tokens[1] / (0.4 + 1.1)])


@pytest.mark.parametrize("draft", [0.05, 0.2, 0.5])
def test_without_counts_the_schedule_is_leviathans_optimal_k(draft):
    """With nothing counted every draft survives with the prior's 0.75: the k maximising Leviathan et al.'s
    (1 - alpha^(k + 1)) / (1 - alpha) tokens per round over k c + 1."""
    costs = ForwardCosts(draft=draft, verify=(1.0,) * 17)
    leviathan = [(1 - 0.75 ** (k + 1)) / 0.25 / (k * draft + 1) for k in range(1, 17)]
    assert schedule_k([0] * 16, [0] * 16, costs, 16) == leviathan.index(max(leviathan)) + 1


@pytest.mark.parametrize("reached,rejected,expected", [
    ([10] + [0] * 15, [10] + [0] * 15, 1),  # every first draft rejected: one draft
    ([20] * 4 + [20] + [0] * 11, [0] * 4 + [20] + [0] * 11, 4),  # runs of exactly 4 accepted drafts
])
def test_schedule_follows_the_counts(reached, rejected, expected):
    assert schedule_k(reached, rejected, FLAT, 16) == expected


@pytest.mark.parametrize("costs,cases", [(adaptive.COSTS, adaptive.CASES),
                                         (FLAT, ((90, 2, 36), (120, 5, 30)))])  # the hidden check's
def test_cases_meet_every_rule_without_near_ties(costs, cases):
    """Across the cases k grows and shrinks after counted rounds, stays after uncounted ones, and some round stops
    at an unsure draft; no choice of k is within 1e-6 of a tie, so a decoder summing in another order agrees."""
    cycle, changes, stops = zoo.scripted_script().cycle, set(), 0
    for start, k, max_tokens in cases:
        rounds = predict_adaptive_rounds(cycle[start], k, max_tokens, costs)
        for i, counted in enumerate(rounds.counted[:-1]):
            step = rounds.k[i + 1] - rounds.k[i]
            changes.add((counted, (step > 0) - (step < 0)))
            if counted:
                rates = sorted(round_rates(*map(list, rounds.counts[i]), costs, 16))
                assert rates[-1] > rates[-2] * (1 + 1e-6), (start, i)
        stops += sum(p < planned and a == p for p, planned, a in
                     zip(rounds.result.proposed, rounds.planned, rounds.result.accepted))
    assert {(True, 1), (True, -1), (False, 0)} <= changes and (False, 1) not in changes, changes
    assert stops, "some round stops at an unsure draft"


def test_forwards_are_priced_by_input_length():
    micro = {"target_1": 1.0, "draft_1": 0.1, "target_verify": {"1": 1.5, "3": 2.5}}
    row = {"target_input_lengths": [20, 1, 2, 3, 4], "draft_forwards": 5}
    # 20 tokens: the longest price (k = 3 -> 4 tokens); 3 tokens: halfway between 2 and 4 tokens.
    assert adaptive_bench.forward_seconds(row, micro) == pytest.approx(2.5 + 1.0 + 1.5 + 2.0 + 2.5 + 0.5)


@pytest.mark.slow
@pytest.mark.release
def test_adaptive_command_judges_each_pair(tmp_path, capsys):
    code = main(["adaptive", "--pairs", "tiny", "--k", "1,4", "--repeats", "1", "--limit", "2",
                 "--max-new-tokens", "16", "--threads", "2", "--out", str(tmp_path),
                 "--notebook", str(REPO / "solutions" / "speculative_decoding.ipynb")])
    out = capsys.readouterr().out
    [verdict] = json.loads((tmp_path / "adaptive.json").read_text())["verdicts"]
    assert code == (0 if adaptive_bench.bar_met([verdict]) else 1), out
    assert verdict["best_fixed_k"] in (1, 4) and "adaptive / best fixed (cost)" in out, out
    assert (tmp_path / "tiny" / "bench.json").is_file(), "each pair's bench files are written"
