"""`crop_to` keeps an absolute length on transformers 4.x and 5.x alike."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from specdec_kit import common_prefix_length, crop_to


@pytest.fixture(scope="module")
def model(tiny_dirs):
    return AutoModelForCausalLM.from_pretrained(tiny_dirs[0]).eval()


@torch.inference_mode()
def test_cropped_cache_resumes_like_a_full_forward(model):
    ids = torch.randint(0, 300, (1, 12), generator=torch.Generator().manual_seed(0))
    cache = model(ids[:, :10], use_cache=True).past_key_values
    crop_to(cache, 7)
    assert cache.get_seq_length() == 7, f"crop_to(cache, 7) should leave 7 positions, got {cache.get_seq_length()}"
    resumed = model(ids[:, 7:12], past_key_values=cache, use_cache=True).logits
    full = model(ids).logits[:, 7:12]
    torch.testing.assert_close(resumed, full, atol=1e-5, rtol=1e-5)


@torch.inference_mode()
def test_crop_to_current_length_and_zero(model):
    cache = model(torch.tensor([[1, 2, 3]]), use_cache=True).past_key_values
    crop_to(cache, 3)
    assert cache.get_seq_length() == 3, (
        f"cropping a 3-token cache to its own length should keep 3 positions, got {cache.get_seq_length()}"
    )
    crop_to(cache, 0)
    assert cache.get_seq_length() == 0, f"crop_to(cache, 0) should empty the cache, got {cache.get_seq_length()}"


@torch.inference_mode()
def test_crop_to_rejects_lengths_it_cannot_keep(model):
    cache = model(torch.tensor([[1, 2, 3]]), use_cache=True).past_key_values
    for bad in (-1, 4):
        with pytest.raises(ValueError, match="cannot keep"):
            crop_to(cache, bad)


def test_common_prefix_length():
    a = torch.tensor([[1, 2, 3, 4]])
    assert common_prefix_length(a, torch.tensor([[1, 2, 9]])) == 2, (
        f"[1, 2, 3, 4] and [1, 2, 9] share 2 leading tokens, got {common_prefix_length(a, torch.tensor([[1, 2, 9]]))}"
    )
    assert common_prefix_length(a, a) == 4, (
        f"a sequence shares all 4 tokens with itself, got {common_prefix_length(a, a)}"
    )
    assert common_prefix_length(a, torch.tensor([[5]])) == 0, (
        f"[1, 2, 3, 4] and [5] differ at the first token: 0 shared, got {common_prefix_length(a, torch.tensor([[5]]))}"
    )
    assert common_prefix_length(a, a[:, :0]) == 0, (
        f"nothing is shared with an empty sequence: 0 expected, got {common_prefix_length(a, a[:, :0])}"
    )
