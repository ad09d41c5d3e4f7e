"""Both solution decoders equal the target's own greedy output, token for token, in fp32 on `tiny`."""

import pytest

from specdec_kit.core.prompts import load_prompts

from conftest import target_greedy

PROMPTS = load_prompts()[:6]
K_VALUES = [1, 2, 3, 5, 8]
MAX_NEW = 40


@pytest.mark.parametrize("prompt", PROMPTS, ids=[p.id for p in PROMPTS])
def test_greedy_matches_target(tiny_decoder, prompt):
    expected = target_greedy(tiny_decoder, prompt.text, MAX_NEW)
    for k in K_VALUES:
        got = tiny_decoder.speculative_decode(prompt.text, max_tokens=MAX_NEW, num_speculative_tokens=k)
        mismatch = next((i for i, (a, b) in enumerate(zip(got.token_ids, expected)) if a != b), None)
        assert got.token_ids == expected, (
            f"{type(tiny_decoder).__name__}, k={k}: speculative output must equal target greedy; "
            f"first mismatch at position {mismatch} of {len(got.token_ids)} tokens (expected {len(expected)})"
        )
        assert got.text == tiny_decoder.target_tokenizer.decode(expected, skip_special_tokens=True), (
            f"{type(tiny_decoder).__name__}, k={k}: the result's text should be the target greedy tokens decoded "
            f"without special tokens, got {got.text!r}"
        )
        assert str(got) == got.text, f"str() of a result should be its text {got.text!r}, got {str(got)!r}"


def test_tiny_pair_acceptance_is_in_its_documented_range(tiny_decoder):
    """`tiny` must exercise both acceptance and rejection: roughly 50-90% of drafts accepted."""
    results = [tiny_decoder.speculative_decode(p.text, max_tokens=MAX_NEW, num_speculative_tokens=1) for p in PROMPTS]
    rate = sum(sum(r.accepted) for r in results) / sum(sum(r.proposed) for r in results)
    assert 0.5 <= rate <= 0.9, f"tiny pair acceptance at k=1 is {rate:.0%}, outside 50-90%"
