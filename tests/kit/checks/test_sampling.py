"""Speculative sampling's support: the warping p and q share, the `sampling` pair's set distributions, the
chi-square judging (pooled bins, impossible outcomes, the diagnosis of a known mistake), and the reference
sampler passing the visible and hidden checks. The catalogued sampling bugs are failed in test_catalogue.py.

Example run: python -m pytest tests/kit/checks/test_sampling.py -q
"""

import pytest
import torch

from specdec_kit import zoo
from specdec_kit.checks import sampling
from specdec_kit.core.sampling import warp
from specdec_kit.models.baseline import zoo_model
from specdec_kit.protocol.adapters import load_decoder_classes

from conftest import REPO, SOLUTION


def test_warp_is_temperature_then_top_p():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    assert torch.allclose(warp(logits), logits.softmax(-1)), "temperature 1 and top_p 1 must be a plain softmax"
    scaled = (logits / 0.5).softmax(-1)
    assert torch.allclose(warp(logits, temperature=0.5), scaled), "temperature divides the logits"
    # top_p 0.9 on the tempered distribution (0.865, 0.117, 0.016, 0.002) keeps the two most likely tokens
    kept = warp(logits, temperature=0.5, top_p=0.9)
    expected = torch.zeros_like(scaled)
    expected[0, :2] = scaled[0, :2] / scaled[0, :2].sum()
    assert torch.allclose(kept, expected, atol=1e-6), f"top_p 0.9 should keep tokens 0 and 1 only, got {kept}"
    assert warp(torch.zeros(2, 3, 5)).shape == (2, 3, 5), "warp keeps the logits' shape"


@pytest.mark.parametrize("temperature, top_p, words", [(0.0, 1.0, "speculative_decode"), (-1.0, 1.0, "above 0"),
                                                       (1.0, 0.0, "(0, 1]"), (1.0, 1.5, "(0, 1]")])
def test_warp_refuses_settings_without_a_distribution(temperature, top_p, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace("]", r"\]")):
        warp(torch.zeros(1, 4), temperature, top_p)


def test_sampling_pair_has_its_scripted_distributions():
    script = zoo.sampling_script()
    outside = next(t for t in range(50) if t not in script.first + script.second)
    for role, first, second in [("target", script.target_first, script.target_second),
                                ("draft", script.draft_first, script.draft_second)]:
        model, _ = zoo_model("sampling", role)
        with torch.inference_mode():
            after_outside = model(torch.tensor([[outside]])).logits[0, -1].softmax(-1)
            after_first = model(torch.tensor([[outside, script.first[1]]])).logits[0, -1].softmax(-1)
        assert torch.allclose(after_outside[list(script.first)], torch.tensor(first), atol=1e-4), (
            f"the {role}'s next-token distribution after a token outside the chain should be {first} on "
            f"{script.first}, got {after_outside[list(script.first)].tolist()}")
        assert torch.allclose(after_first[list(script.second)], torch.tensor(second), atol=1e-4), (
            f"the {role}'s distribution after a first-step token should be {second} on {script.second}, got "
            f"{after_first[list(script.second)].tolist()}")


def test_goodness_of_fit_passes_exact_frequencies_and_fails_shifted_ones():
    expected = {"a": 0.4, "b": 0.6}
    p_value, _ = sampling.goodness_of_fit(["a"] * 80 + ["b"] * 120, expected)
    assert p_value > 0.99, f"counts equal to the expected ones should fit, p-value {p_value}"
    p_value, where = sampling.goodness_of_fit(["a"] * 126 + ["b"] * 74, expected)
    assert p_value < sampling.ALPHA and "a came up 126 times where 80 were expected" in where, (p_value, where)


def test_goodness_of_fit_pools_rare_bins_and_refuses_impossible_outcomes():
    expected = {"a": 0.5, "b": 0.48, "c": 0.01, "d": 0.01}  # c and d expect 2 of 200 each: pooled, then joined to b
    p_value, where = sampling.goodness_of_fit(["a"] * 100 + ["b"] * 96 + ["c"] * 2 + ["d"] * 2, expected)
    assert p_value > 0.99 and "over 2 bins" in where, (p_value, where)
    p_value, where = sampling.goodness_of_fit(["a"] * 199 + ["e"], expected)
    assert p_value == 0.0 and "e came up 1 times in 200 samples where its probability is 0" in where, where


def test_correction_from_p_is_the_mistakes_distribution():
    # p = (0.4, 0.6), q = (0.95, 0.05): min(p, q) = (0.4, 0.05) is kept, the rejected 0.55 spread as p
    got = sampling.correction_from_p({"a": 0.4, "b": 0.6}, {"a": 0.95, "b": 0.05})
    assert got == pytest.approx({"a": 0.4 + 0.55 * 0.4, "b": 0.05 + 0.55 * 0.6}), got


def test_exact_distributions_come_from_the_targets_logits():
    script = zoo.sampling_script()
    first, joint = sampling.exact_distributions("target", "Hello", 1.0, 1.0)
    assert first == pytest.approx(dict(zip(script.first, script.target_first)), abs=1e-4), first
    assert sum(joint.values()) == pytest.approx(1.0, abs=1e-4) and len(joint) == 4, joint
    tempered, _ = sampling.exact_distributions("target", "Hello", 0.7, 0.8)
    powered = [p ** (1 / 0.7) for p in script.target_first]
    assert tempered == pytest.approx({t: p / sum(powered) for t, p in zip(script.first, powered)}, abs=1e-4), (
        "temperature 0.7 raises the probabilities to the power 1/0.7; top_p 0.8 keeps both of these tokens")


@pytest.mark.slow
@pytest.mark.release
def test_reference_sampler_passes_visible_and_hidden_checks():
    from specdec_course.core.plan import load_plan

    plan = load_plan(REPO / "autograder")
    sampler = load_decoder_classes(SOLUTION, ("SpeculativeSampler",))["SpeculativeSampler"]
    for check in plan.tests["test_sampling"][1]:
        check(sampler)
