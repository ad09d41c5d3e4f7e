"""`specdec_kit.checks` passes the reference solution and names each known bug.

Bugs are made by patching one piece of the solution notebook's module (the seam's namespace), the way
a student's submission would differ from the reference in one place.
"""

import pytest
import torch

from specdec_kit import checks
from specdec_kit.adapters import load_notebook
from specdec_kit.result import DecodeResult
from specdec_kit.timing import ForwardCall

from conftest import REPO, SOLUTION

UNCACHED_CHECKS = [checks.check_loading, checks.check_draft_tokens, checks.check_verify_alignment,
                   checks.check_correction_and_bonus, checks.check_exact, checks.check_eos_and_budget,
                   checks.check_counts]
CACHED_CHECKS = [checks.check_exact, checks.check_cache_use, checks.check_counts, checks.check_verify_alignment]


@pytest.fixture
def notebook():
    """A fresh copy of the solution's module, so patches never leak between tests."""
    return load_notebook(SOLUTION)


@pytest.mark.parametrize("check", UNCACHED_CHECKS, ids=lambda c: c.__name__)
def test_solution_passes(notebook, check):
    check(notebook.SpeculativeDecoder)


@pytest.mark.parametrize("check", CACHED_CHECKS, ids=lambda c: c.__name__)
def test_cached_solution_passes(notebook, check):
    check(notebook.CachedSpeculativeDecoder)


def off_by_one(notebook):
    original = notebook.accept_drafts
    notebook.accept_drafts = lambda logits, drafts: original(logits[:, 1:], drafts[:, : logits.shape[1] - 1])


def no_bonus(notebook):
    original = notebook.accept_drafts

    def accept(logits, drafts):
        accepted, n, next_token = original(logits, drafts)
        return accepted, n, next_token[:, :0] if n == drafts.shape[1] else next_token
    notebook.accept_drafts = accept


def keeps_tokens_after_eos(notebook):
    notebook.truncate_at_eos = lambda tokens, eos_ids: tokens


def cache_not_cropped(notebook):
    notebook.crop_to = lambda cache, length: None


def prefix_reencoded(notebook):
    notebook.common_prefix_length = lambda a, b: 0


def sampled_draft(notebook):
    def generate(self, input_ids, attention_mask, num_speculative_tokens=4):
        generator = torch.Generator().manual_seed(0)
        ids = input_ids
        with torch.inference_mode():
            for _ in range(num_speculative_tokens):
                probs = self.draft_model(ids).logits[:, -1].softmax(-1)
                ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], dim=1)
        return ids[:, input_ids.shape[1]:]
    notebook.SpeculativeDecoder.generate_draft_tokens = generate


def draft_with_random_first_token(notebook):
    """Wrong on a sharp position, differently on every call: how an unseeded sampler usually shows."""
    original = notebook.SpeculativeDecoder.generate_draft_tokens

    def generate(self, input_ids, attention_mask, num_speculative_tokens=4):
        drafts = original(self, input_ids, attention_mask, num_speculative_tokens).clone()
        drafts[0, 0] = (drafts[0, 0] + torch.randint(1, 300, ())) % 300
        return drafts
    notebook.SpeculativeDecoder.generate_draft_tokens = generate


def bonus_counted_as_accepted(notebook):
    original = notebook.SpeculativeDecoder.speculative_decode

    def decode(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        return DecodeResult(result.text, result.token_ids, result.proposed, [a + 1 for a in result.accepted])
    notebook.SpeculativeDecoder.speculative_decode = decode


def no_eval(notebook):
    original = notebook.SpeculativeDecoder.initialize_target_model

    def initialize(self, name):
        model, tokenizer = original(self, name)
        return model.train(), tokenizer
    notebook.SpeculativeDecoder.initialize_target_model = initialize


def extra_target_forward(notebook):
    original = notebook.CachedSpeculativeDecoder.verify_tokens_vectorized

    def verify(self, input_ids, draft_tokens, attention_mask):
        self.target_model(input_ids=input_ids[:, -1:])  # a second forward per round, on a throwaway cache
        return original(self, input_ids, draft_tokens, attention_mask)
    notebook.CachedSpeculativeDecoder.verify_tokens_vectorized = verify


def last_token_dropped(notebook):
    original = notebook.CachedSpeculativeDecoder.speculative_decode

    def decode(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        return DecodeResult(result.text, result.token_ids[:-1], result.proposed, result.accepted)
    notebook.CachedSpeculativeDecoder.speculative_decode = decode


BUGS = [
    (off_by_one, "SpeculativeDecoder", checks.check_verify_alignment, "position L-1\\+i"),
    (no_bonus, "SpeculativeDecoder", checks.check_correction_and_bonus, "bonus token"),
    (keeps_tokens_after_eos, "SpeculativeDecoder", checks.check_eos_and_budget, "nothing after it"),
    (sampled_draft, "SpeculativeDecoder", checks.check_draft_tokens, "nearly flat"),
    (draft_with_random_first_token, "SpeculativeDecoder", checks.check_draft_tokens, "changed between calls"),
    (bonus_counted_as_accepted, "SpeculativeDecoder", checks.check_counts, "Count accepted drafts only"),
    (no_eval, "SpeculativeDecoder", checks.check_loading, "training mode"),
    (cache_not_cropped, "CachedSpeculativeDecoder", checks.check_cache_use, "crop the cache"),
    (prefix_reencoded, "CachedSpeculativeDecoder", checks.check_cache_use, "after the prefill"),
    # test_speedup's gates fail before anything is timed
    (extra_target_forward, "CachedSpeculativeDecoder", checks.check_speedup, "one target forward per round"),
    (last_token_dropped, "CachedSpeculativeDecoder", checks.check_speedup, "target's greedy tokens"),
]


@pytest.mark.parametrize("bug,class_name,check,message", BUGS, ids=[b[0].__name__ for b in BUGS])
def test_bug_is_named_by_its_check(notebook, bug, class_name, check, message):
    bug(notebook)
    with pytest.raises(checks.CheckFailed, match=message):
        check(getattr(notebook, class_name))


@pytest.fixture
def hidden(monkeypatch):
    """The instructor's hidden checks, importable as grading makes them (the repository on the path)."""
    monkeypatch.syspath_prepend(str(REPO))
    from autograder import hidden

    return hidden


@pytest.mark.parametrize("check", [checks.check_correction_and_bonus, checks.check_eos_and_budget])
def test_hidden_cases_differ_from_the_visible_ones(notebook, hidden, check):
    """The hidden siblings run other cases, and the solution passes them too."""
    assert checks.eos_and_budget_cases(chain_start=1, cycle_start=80) != checks.eos_and_budget_cases()
    getattr(hidden, check.__name__)(notebook.SpeculativeDecoder)


def test_hidden_speedup_ratio_comes_from_the_config(hidden):
    assert 0 < hidden.SPEEDUP_MIN_RATIO == hidden.CONFIG["speedup"]["min_ratio"]


def call(new_tokens, cached, ids, started=0.0):
    return ForwardCall(new_tokens, cached, 0.0, started, tuple(ids))


def test_stale_cache_position_finds_an_uncropped_rejected_draft():
    text = [5, 6, 7, 9]  # prompt 5; draft 6, 8 proposed, 8 rejected, 7 the correction; then 9
    cropped = [call(3, 0, [5, 6, 8]), call(2, 2, [7, 9])]
    uncropped = [call(3, 0, [5, 6, 8]), call(2, 3, [7, 9])]
    assert checks.stale_cache_position(cropped, text) is None
    assert checks.stale_cache_position(uncropped, text) == (1, 2)
    assert checks.stale_cache_position(uncropped, text, judged={0}) is None


def test_first_after_marks_the_first_draft_call_of_each_round():
    drafts = [call(1, 0, [1], started=t) for t in (0.0, 1.0, 2.0, 4.0, 5.0)]
    targets = [call(3, 0, [1], started=t) for t in (3.0, 6.0)]
    assert checks.first_after(drafts, targets) == {3}
