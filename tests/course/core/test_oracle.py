"""On the `scripted` pair every round is known in advance: alignment, acceptance counts, bonus and
correction tokens, EOS and budget edges, all predicted from the script and checked exactly."""

import pytest
import torch

from specdec_course.core.oracle import exact_rounds, predict_rounds
from specdec_kit import zoo
from specdec_kit.checks.decoding import EXACT_QUESTIONS

from conftest import target_greedy

SCRIPT = zoo.scripted_script()


def prompt_ending_in(token: int, decoder) -> str:
    text = decoder.target_tokenizer.decode([token])
    assert decoder.target_tokenizer.encode(text) == [token], "scripted tokens must encode back to themselves"
    return text


def assert_rounds_as_scripted(decoder, last_token: int, k: int, max_tokens: int) -> None:
    expected = predict_rounds(last_token, k, max_tokens)
    got = decoder.speculative_decode(prompt_ending_in(last_token, decoder), max_tokens, k)
    assert got.accepted == expected.accepted and got.proposed == expected.proposed, (
        f"k={k}: accepted draft tokens per round should be {expected.accepted} (of {expected.proposed}), "
        f"got {got.accepted} (of {got.proposed}). The target's prediction for draft token i is the logit "
        "at position L-1+i, where L is the length before the draft."
    )
    assert got.token_ids == expected.token_ids, f"k={k}: tokens differ from the scripted target's"


@pytest.mark.parametrize("k", [1, 2, 3, 4, 7])
def test_acceptance_of_every_round_matches_script(scripted_decoder, k):
    for start in SCRIPT.cycle[:12]:
        assert_rounds_as_scripted(scripted_decoder, start, k, max_tokens=30)


def test_script_has_both_full_and_partial_rounds():
    """The script itself must exercise rejections and full acceptances, or the test above proves little."""
    rounds = [predict_rounds(start, 4, 30) for start in SCRIPT.cycle[:12]]
    accepted = [a for r in rounds for a in r.accepted]
    assert 4 in accepted and 0 in accepted and any(0 < a < 4 for a in accepted), (
        f"at k=4 the script should give rounds with 4, 0 and 1-3 accepted drafts; accepted per round: {accepted}"
    )


def test_correction_token_is_the_targets_own(scripted_decoder):
    x = next(t for t in SCRIPT.cycle if SCRIPT.draft_next[t] != SCRIPT.target_next[t])
    ids = torch.tensor([[x]])
    drafts = torch.tensor([[SCRIPT.draft_next[x]]])
    accepted, position, next_token = scripted_decoder.verify_tokens_vectorized(ids, drafts, torch.ones_like(ids))
    assert position == 0 and accepted.shape == (1, 0), (
        f"a rejected first draft should leave 0 accepted tokens, got position {position} and "
        f"accepted of shape {tuple(accepted.shape)}"
    )
    assert next_token.tolist() == [[SCRIPT.target_next[x]]], "on a rejection the target's token replaces the draft"


def test_bonus_token_after_full_acceptance(scripted_decoder):
    x = SCRIPT.eos_chain[0]
    chain = [SCRIPT.target_next[x]]
    chain.append(SCRIPT.target_next[chain[-1]])
    ids = torch.tensor([[x]])
    accepted, position, next_token = scripted_decoder.verify_tokens_vectorized(
        ids, torch.tensor([chain]), torch.ones_like(ids))
    assert position == 2 and accepted.tolist() == [chain], (
        f"both drafts are the target's own tokens, so both should be accepted ({[chain]}); "
        f"got position {position} and {accepted.tolist()}"
    )
    assert next_token.tolist() == [[SCRIPT.target_next[chain[-1]]]], "all accepted: the bonus token follows"


@pytest.mark.parametrize("k,label", [(5, "inside an accepted draft"), (3, "as the bonus token")])
def test_eos_ends_the_text(scripted_decoder, k, label):
    """EOS is emitted and nothing after it, wherever it falls in the round."""
    c0 = SCRIPT.eos_chain[0]
    expected = [*SCRIPT.eos_chain[1:], SCRIPT.eos_id]
    got = scripted_decoder.speculative_decode(prompt_ending_in(c0, scripted_decoder), 50, k)
    assert got.token_ids == expected, f"EOS {label}: expected {expected}, got {got.token_ids}"
    assert got.token_ids == target_greedy(scripted_decoder, prompt_ending_in(c0, scripted_decoder), 50), (
        f"EOS {label}: the speculative tokens should equal the target's own greedy output, got {got.token_ids}"
    )
    assert_rounds_as_scripted(scripted_decoder, c0, k, 50)


def test_eos_in_the_prompt_does_not_stop_decoding(scripted_decoder):
    prompt = scripted_decoder.target_tokenizer.eos_token + prompt_ending_in(SCRIPT.cycle[0], scripted_decoder)
    got = scripted_decoder.speculative_decode(prompt, 12, 4)
    assert len(got.token_ids) == 12, "an EOS in the prompt must not end generation; only a generated EOS does"


@pytest.mark.parametrize("max_tokens,k", [(6, 4), (3, 8), (1, 4), (2, 1)])
def test_budget_is_exact(scripted_decoder, max_tokens, k):
    """Exactly `max_tokens` new tokens, also when the budget ends mid-draft or k exceeds what is left."""
    start = SCRIPT.cycle[3]
    got = scripted_decoder.speculative_decode(prompt_ending_in(start, scripted_decoder), max_tokens, k)
    assert len(got.token_ids) == max_tokens, f"max_tokens={max_tokens}, k={k}: got {len(got.token_ids)} tokens"
    assert max(got.proposed) <= max_tokens - 1, "drafts beyond what the budget leaves room for are not proposed"
    assert_rounds_as_scripted(scripted_decoder, start, k, max_tokens)


@pytest.mark.parametrize("question", EXACT_QUESTIONS[::3], ids=lambda q: f"k{q[2]}-{q[1][:12]}")
def test_exact_rounds_on_another_pair_are_the_solutions(solution_classes, tiny_dirs, question):
    """check_exact's own cases on `tiny`, whose rounds a test cell draws: the oracle's are the solution's, round for
    round."""
    pair, prompt, k, max_tokens = question
    got = solution_classes["SpeculativeDecoder"](*tiny_dirs, device="cpu").speculative_decode(prompt, max_tokens, k)
    expected = exact_rounds(pair, prompt, k, max_tokens).result
    assert (got.token_ids, got.proposed, got.accepted) == (expected.token_ids, expected.proposed, expected.accepted)
