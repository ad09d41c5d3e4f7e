"""Behaviour counted from outside the decoder: forward calls and the input length of each."""

import pytest

from specdec_kit import zoo
from specdec_kit.core.timing import ForwardRecorder

from conftest import target_greedy

PROMPT = "The future of Artificial Intelligence is"
MAX_NEW, K = 30, 4


def decode_recorded(decoder, prompt=PROMPT, max_tokens=MAX_NEW, k=K):
    with ForwardRecorder(decoder.target_model) as target_calls, ForwardRecorder(decoder.draft_model) as draft_calls:
        result = decoder.speculative_decode(prompt, max_tokens, k)
    return result, target_calls, draft_calls


def test_one_target_forward_per_round(tiny_decoder):
    result, target_calls, _ = decode_recorded(tiny_decoder)
    assert len(target_calls) == result.rounds, (
        f"{len(target_calls)} target forwards for {result.rounds} rounds: verification must score all drafts, "
        "the correction and the bonus token in one target pass"
    )


def test_cached_decoder_never_resends_the_prefix(solution_classes, tiny_dirs):
    decoder = solution_classes["CachedSpeculativeDecoder"](*tiny_dirs, device="cpu")
    result, target_calls, draft_calls = decode_recorded(decoder)
    prompt_len = len(decoder.target_tokenizer(PROMPT).input_ids)
    assert result.token_ids == target_greedy(decoder, PROMPT, MAX_NEW), (
        "the cached decoder's tokens should equal the target's own greedy output"
    )
    # Target: a prefill, then per round the last round's target token plus this round's drafts, on a
    # cache cropped to everything before that token (so rejected drafts are gone).
    length = prompt_len
    for i, (call, k) in enumerate(zip(target_calls, result.proposed)):
        if i == 0:
            assert call.cached_tokens == 0 and call.new_tokens == prompt_len + k, (
                f"round 0: the target should prefill the {prompt_len}-token prompt plus {k} drafts on an empty cache, "
                f"got {call.new_tokens} new tokens on {call.cached_tokens} cached positions"
            )
        else:
            assert call.cached_tokens == length - 1, (
                f"round {i}: the target cache holds {call.cached_tokens} positions, expected {length - 1}; "
                "crop it after a rejection and never re-send the prefix"
            )
            assert call.new_tokens == k + 1, (
                f"round {i}: the target should be fed the last round's token plus {k} drafts ({k + 1} tokens), "
                f"got {call.new_tokens}"
            )
        length += result.accepted[i] + 1
    # Draft: one prefill, then one token per step, two right after a fully accepted round.
    assert draft_calls[0].cached_tokens == 0, (
        f"the draft's first forward should prefill on an empty cache, got {draft_calls[0].cached_tokens} cached"
    )
    assert all(call.new_tokens <= 2 for call in draft_calls[1:]), [c.new_tokens for c in draft_calls]
    assert any(0 < a < k for a, k in zip(result.accepted, result.proposed)), "the run should include rejections"


def test_uncached_decoder_feeds_whole_sequences(solution_classes, tiny_dirs):
    """The uncached class re-encodes by design: every call sees the full sequence and no cache."""
    decoder = solution_classes["SpeculativeDecoder"](*tiny_dirs, device="cpu")
    result, target_calls, draft_calls = decode_recorded(decoder)
    assert all(call.cached_tokens == 0 for call in [*target_calls, *draft_calls]), (
        "every forward of the uncached decoder should run without a cache; cached positions per forward: "
        f"{[call.cached_tokens for call in [*target_calls, *draft_calls]]}"
    )
    assert len(draft_calls) == sum(result.proposed), (
        f"the uncached draft should run one forward per proposed token ({sum(result.proposed)}), got {len(draft_calls)}"
    )


def test_cache_is_used_as_a_prefix_rolled_back_or_not_at_all(solution_classes, scripted_dirs):
    """The cached verifier continues from a cache that holds a prefix of its input (after `rollback`), and
    starts afresh on one that does not (a different sequence, or a rejection never rolled back)."""
    import torch

    decoder = solution_classes["CachedSpeculativeDecoder"](*scripted_dirs, device="cpu")
    script = zoo.scripted_script()
    ids = torch.tensor([list(script.cycle[:6])])
    drafts = torch.tensor([[script.cycle[6], script.cycle[7]]])
    longer = torch.tensor([list(script.cycle[:7])])  # the first draft accepted, a correction after it
    with ForwardRecorder(decoder.target_model) as calls:
        decoder.verify_tokens_vectorized(ids, drafts, torch.ones_like(ids))  # holds 6 + 2 positions
        decoder.rollback(6)  # step 4 after no draft was accepted: keep the 6 positions of the text
        decoder.verify_tokens_vectorized(longer, drafts, torch.ones_like(longer))  # feeds 1 + 2
        decoder.verify_tokens_vectorized(ids[:, :4], drafts, torch.ones_like(ids[:, :4]))  # not rolled back to 4
        held = torch.cat([ids[:, :4], drafts], dim=1)  # all the cache holds: its last position is fed again
        decoder.verify_tokens_vectorized(held, drafts, torch.ones_like(held))
    got = [(c.cached_tokens, c.new_tokens) for c in calls]
    assert got == [(0, 8), (6, 3), (0, 6), (5, 3)], (
        "target forwards as (cached, new) tokens should be [(0, 8), (6, 3), (0, 6), (5, 3)]: a prefill, a "
        "continuation of the rolled-back cache, a fresh start where the cache is not a prefix of the input, "
        f"and a cache holding the whole input cropped by one; got {got}")


@pytest.mark.slow
@pytest.mark.release
def test_the_counters_do_not_make_a_compiled_model_recompile(tiny_dirs):
    """A notebook that compiles its models (torch.compile) is counted by fresh hooks at every check: the hooks run
    as they are, so their state never becomes a guard that recompiles the model at every call."""
    import torch
    from transformers import AutoModelForCausalLM

    from specdec_kit.core.timing import Observer

    model = AutoModelForCausalLM.from_pretrained(tiny_dirs[0]).eval()
    model.compile(backend="eager")  # dynamo's tracing and guards, without code generation

    class Decoder:
        target_model, draft_model = model, None

    ids = torch.tensor([[3, 5, 7]])
    events = []
    torch._dynamo.reset()
    with torch.no_grad():
        model(ids)  # the first compilation
        with torch._dynamo.config.patch(error_on_recompile=True):
            for max_tokens in (4, 8, 16):  # a new observer, with new state, per check
                with Observer(Decoder(), events.append) as observer:
                    observer.expect_tokens(max_tokens)
                    model(ids)
                    model(ids)
                with ForwardRecorder(model) as calls:
                    model(ids)
                assert len(calls) == 1, "the recorder still counts the compiled model's forward"
    assert sum(e["event"] == "forward" for e in events) == 6, "every forward of the compiled model is seen"


def test_the_observer_keeps_the_last_verifications_only_while_it_observes(solution_classes, scripted_dirs):
    """What NoProgress says of the last rounds comes from a wrapper on the decoder's verify_tokens_vectorized, which
    the observer removes again."""
    from specdec_kit.core.no_progress import describe_rounds
    from specdec_kit.core.timing import Observer

    decoder = solution_classes["SpeculativeDecoder"](*scripted_dirs, device="cpu")
    with Observer(decoder, lambda event: None) as observer:
        observer.expect_tokens(12)
        decoder.speculative_decode("a b c", 12, 3)
        said = describe_rounds(observer._rounds)
    assert "verify_tokens_vectorized" not in vars(decoder), "the wrapper is gone after the block"
    assert len(observer._rounds) == Observer.KEPT_ROUNDS and "next_token of shape (1, 1) in a round with" in said, \
        said
