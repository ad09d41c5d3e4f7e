"""`specdec_kit.checks` passes the reference solution and names each known bug.

Bugs are made by patching one piece of the solution notebook's module (the seam's namespace), the way
a student's submission would differ from the reference in one place.
"""

import pytest
import torch

from specdec_kit import checks
from specdec_kit.adapters import load_notebook
from specdec_kit.result import DecodeResult

from conftest import SOLUTION

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


BUGS = [
    (off_by_one, "SpeculativeDecoder", checks.check_verify_alignment, "position L-1\\+i"),
    (no_bonus, "SpeculativeDecoder", checks.check_correction_and_bonus, "bonus token"),
    (keeps_tokens_after_eos, "SpeculativeDecoder", checks.check_eos_and_budget, "nothing after it"),
    (sampled_draft, "SpeculativeDecoder", checks.check_draft_tokens, "nearly flat"),
    (bonus_counted_as_accepted, "SpeculativeDecoder", checks.check_counts, "Count accepted drafts only"),
    (no_eval, "SpeculativeDecoder", checks.check_loading, "training mode"),
    (cache_not_cropped, "CachedSpeculativeDecoder", checks.check_cache_use, "crop the cache"),
    (prefix_reencoded, "CachedSpeculativeDecoder", checks.check_cache_use, "after the prefill"),
]


@pytest.mark.parametrize("bug,class_name,check,message", BUGS, ids=[b[0].__name__ for b in BUGS])
def test_bug_is_named_by_its_check(notebook, bug, class_name, check, message):
    bug(notebook)
    with pytest.raises(checks.CheckFailed, match=message):
        check(getattr(notebook, class_name))
