"""Bad arguments to the decoders fail at once with a message that says what to do."""

import shutil

import pytest
import torch
from transformers import AutoTokenizer


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
