"""HF's own methods for the instructor's benchmark: each decode's rounds read off the target's forwards, k checked.

Example run: python -m pytest tests/course/bench/test_hf_methods.py -q
"""

import pytest

from specdec_course.bench import hf_methods
from specdec_course.bench.hf_methods import rounds_from_target_calls
from specdec_kit.bench import benchmark as bench
from specdec_kit.bench import runners
from specdec_kit.core.prompts import load_prompts
from specdec_kit.core.timing import ForwardCall

from conftest import REPO


def test_rounds_read_off_a_cached_target():
    """Prompt of 5; round 0 proposes 3 and accepts 1; round 1 proposes 3 and accepts 3; round 2 proposes 2."""
    calls = [ForwardCall(8, 0, 0.0), ForwardCall(4, 6, 0.0), ForwardCall(3, 10, 0.0)]
    proposed, accepted = rounds_from_target_calls(calls, prompt_len=5, new_tokens=7)
    assert proposed == [3, 3, 2] and accepted == [1, 3, 0], (
        f"drafts per round should be proposed [3, 3, 2] and accepted [1, 3, 0], got {proposed} and {accepted}"
    )


def test_hf_assisted_k_is_verified(tiny_dirs, monkeypatch):
    """If HF ignored the pinned k (as generate() arguments are in transformers 5), the bench says so."""
    import torch

    from specdec_kit.models.loading import load_model

    target, tokenizer = load_model(tiny_dirs[0])
    draft, _ = load_model(tiny_dirs[1])
    setup = runners.Setup(target, draft, tokenizer, {}, torch.device("cpu"))
    outcome = hf_methods.RUNNERS["hf_assisted"](setup, "The capital of France is", 16, 3)
    assert max(outcome.proposed) == 3, (
        f"HF assisted generation pinned to k=3 should propose at most 3 drafts a round, reaching 3; "
        f"got per round {outcome.proposed}"
    )
    monkeypatch.setattr(runners, "pin_assistant_k", lambda draft, k: None)
    draft.generation_config.num_assistant_tokens = 5
    with pytest.raises(hf_methods.HFKMismatchError, match="asked for k=3"):
        hf_methods.RUNNERS["hf_assisted"](setup, "The capital of France is", 16, 3)


@pytest.mark.slow
@pytest.mark.release
def test_lookup_rows_use_no_draft_model_and_give_the_targets_tokens(tiny_dirs):
    """Prompt lookup's rows (the notebook's and HF's): greedy, identical to target greedy, no draft forward, and
    summarised per prompt category beside the model-drafted decoder."""
    from specdec_kit.protocol.adapters import load_decoder_classes

    classes = load_decoder_classes(REPO / "solutions" / "speculative_decoding.ipynb",
                                   ("CachedSpeculativeDecoder", "PromptLookupDecoder"))
    prompts = load_prompts()[:2]
    document = bench.compare(classes, *tiny_dirs, prompts, [3], repeats=1, max_new_tokens=40, progress=False,
                             methods=["target_greedy", "cached", *runners.LOOKUP_METHODS],
                             runners=hf_methods.RUNNERS)
    bench.validate(document)
    lookup_rows = [r for r in document["rows"] if r["method"] in runners.LOOKUP_METHODS]
    assert lookup_rows and all(r["identical_to_target"] for r in lookup_rows), \
        "prompt lookup is verified greedily: its tokens are the target's"
    assert all(r["draft_forwards"] == 0 for r in lookup_rows), "no draft model runs for prompt lookup"
    assert all(r["target_forwards"] < r["new_tokens"] for r in lookup_rows), \
        "the tiny pair's text repeats within 40 tokens, so some drafts are accepted"
    categories = {(e["method"], e["category"]) for e in document["by_category"]}
    assert categories == {(m, p.category) for m in ("cached", *runners.LOOKUP_METHODS) for p in prompts}, categories


