"""Bad arguments to the decoders fail at once with a message that says what to do; a round that emits no token is
told by its cause (the verifier's slice one position late, or the target's token dropped), as the rounds show it.

Example run: python -m pytest tests/kit/test_errors.py -q
"""

import shutil

import pytest
import torch
from transformers import AutoTokenizer

from specdec_kit.core.no_progress import (
    CAUSE_WORDS,
    DROPPED,
    LATE,
    UNTOLD,
    KeptTokens,
    VerifyCall,
    dropped_verdict,
    fitted_slice,
    forwards_verdict,
    no_token_verdict,
)


def test_k_below_one(tiny_decoder):
    with pytest.raises(ValueError, match="num_speculative_tokens must be at least 1"):
        tiny_decoder.speculative_decode("Hello", 5, 0)
    ids = torch.tensor([[1, 2]])
    with pytest.raises(ValueError, match="num_speculative_tokens must be at least 1"):
        tiny_decoder.generate_draft_tokens(ids, torch.ones_like(ids), 0)


def test_empty_prompt(tiny_decoder):
    with pytest.raises(ValueError, match="prompt is empty"):
        tiny_decoder.speculative_decode("", 5, 2)


def test_max_tokens_below_one(tiny_decoder):
    with pytest.raises(ValueError, match="max_tokens must be at least 1"):
        tiny_decoder.speculative_decode("Hello", 0, 2)


def test_mismatched_tokenizers_are_refused(solution_classes, tiny_dirs, tmp_path):
    """A draft whose tokenizer has one extra token is refused, and the error names both models."""
    draft_copy = tmp_path / "draft"
    shutil.copytree(tiny_dirs[1], draft_copy)
    other = AutoTokenizer.from_pretrained(draft_copy)
    other.add_tokens(["<extra-token>"])
    other.save_pretrained(draft_copy)
    with pytest.raises(ValueError, match="tokenizers differ") as info:
        solution_classes["SpeculativeDecoder"](tiny_dirs[0], str(draft_copy), device="cpu")
    assert str(draft_copy) in str(info.value) and tiny_dirs[0] in str(info.value), (
        f"the mismatch error should name the target ({tiny_dirs[0]}) and the draft ({draft_copy}), got: {info.value}"
    )


def target_forwards(*rounds: tuple[int, list[int]]) -> KeptTokens:
    """The forwards of an uncached decode on a target whose argmax after token t is t + 1, each round's
    (draft forwards, text and drafts fed)."""
    kept = KeptTokens()
    for drafts, ids in rounds:
        kept.drafted(drafts)
        kept.target(0, ids, [t + 1 for t in ids])
    return kept


def told(said: str) -> set[str]:
    return {cause for cause, words in CAUSE_WORDS.items() if words in said}


def test_forwards_of_a_loop_that_drops_the_token_after_a_full_acceptance_name_that_cause_alone():
    """The rounds kept the target's own tokens (its argmax one position back), then a round with no drafts repeats."""
    prompt = [10, 11, 12]
    kept = target_forwards((2, [*prompt, 13, 14]), (1, [*prompt, 13, 14, 15]), (0, [*prompt, 13, 14, 15]),
                           (0, [*prompt, 13, 14, 15]))
    said = forwards_verdict(kept)
    assert kept.cause() == DROPPED and told(said) == {DROPPED} and UNTOLD not in said, said


def test_forwards_of_a_slice_one_position_late_name_that_cause_alone():
    """Each round kept the target's token one position on: the correction read from row L+n, not L-1+n."""
    prompt = [10, 11, 12]
    kept = target_forwards((2, [*prompt, 13, 14]), (1, [*prompt, 14, 15]), (0, [*prompt, 15]), (0, [*prompt, 15]))
    said = forwards_verdict(kept)
    assert kept.cause() == LATE and told(said) == {LATE} and UNTOLD not in said, said


def test_a_full_acceptance_that_repeats_is_told_by_its_own_drafts():
    """A repeated round whose drafts are all the target's own: a right slice accepts them all, so the bonus is what
    is missing."""
    kept = target_forwards((2, [10, 11, 12]), (2, [10, 11, 12]))
    assert kept.cause() == DROPPED and "round's 2 drafts are all the target's own" in forwards_verdict(kept)


def test_forwards_that_show_neither_cause_name_both_and_say_so():
    """A first round with no drafts shows nothing; sampled tokens fit neither slice."""
    for kept in (target_forwards((0, [10, 11]), (0, [10, 11])),
                 target_forwards((1, [10, 11, 30]), (0, [10, 11, 30, 40]), (0, [10, 11, 30, 40]))):
        said = forwards_verdict(kept)
        assert told(said) == set(CAUSE_WORDS) and UNTOLD in said, said


def verify_call(text: int, drafts: list[int], accepted: int, next_ids: list[int], rows: list[int]) -> VerifyCall:
    """A verification of `drafts` after a text of `text` tokens, judged against a target forward on the whole text
    whose argmax rows from position text-1 are `rows`."""
    ids = torch.tensor([[0] * text + drafts])
    logits = torch.zeros(1, text + len(drafts), 64)
    for row, token in enumerate(rows):
        logits[0, text - 1 + row, token] = 1.0
    returned = (torch.tensor([drafts[:accepted]]), accepted, torch.tensor([next_ids], dtype=torch.long).view(1, -1))
    return VerifyCall.of((torch.zeros(1, text, dtype=torch.long), torch.tensor([drafts])), {}, returned,
                         (0, ids, logits))


def test_a_verification_is_judged_by_the_slice_its_tokens_fit():
    rows = [5, 6, 7]  # the target's token after the text, after draft 0, after draft 1
    assert verify_call(4, [5, 9], 1, [6], rows).slice == "L-1", "draft 0 accepted, then row 1: the right slice"
    assert verify_call(4, [6, 9], 1, [7], rows).slice == "L", "draft 0 equals row 1, then row 2: one late"
    assert verify_call(4, [9, 9], 0, [8], rows).slice == "neither", "a sampled token fits neither"
    assert fitted_slice(4, (5, 9), 1, (6,), None) is None, "no forward at hand: not judged"


def test_a_verifier_that_returns_no_token_is_told_the_cause_its_rounds_show():
    stuck = verify_call(4, [5, 6], 2, [], [5, 6, 7])
    assert told(no_token_verdict(stuck, ["L-1", "L-1"])) == {DROPPED}
    late = no_token_verdict(verify_call(4, [], 0, [], [5]), ["L", "both"])
    assert told(late) == {LATE} and "none at all when k = 0" in late, late
    either = no_token_verdict(verify_call(4, [], 0, [], [5]), ["both"])
    assert told(either) == set(CAUSE_WORDS) and UNTOLD in either, either


def test_a_token_the_verifier_returned_but_the_loop_dropped_is_the_loops():
    said = dropped_verdict(verify_call(4, [], 0, [5], [5]))
    assert told(said) == {DROPPED} and "the loop" in said and "k = 0" in said, said
    assert dropped_verdict(verify_call(4, [], 0, [], [5])) == "", "a verifier that returned none is not the loop's"
