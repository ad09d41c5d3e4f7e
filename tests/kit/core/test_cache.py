"""The cache helpers: `crop_to` keeps an absolute length, and `cache_kwargs` / `cache_of` pass and read a forward's
cache under the installed transformers' name (`past_key_values` on 4.x and 5.x before 5.24, `cache` from 5.24),
without the warnings 5.24 gives for the old one.

Example run: python -m pytest tests/kit/core/test_cache.py -q
"""

import inspect
import warnings

import pytest
import torch
from transformers import AutoModelForCausalLM

from specdec_kit import cache_kwargs, cache_of, common_prefix_length, crop_to
from specdec_kit.core.cache import cache_keyword, passed_cache
from specdec_kit.core.timing import ForwardCosts, ForwardRecorder, median_forward_seconds
from specdec_kit.protocol.adapters import load_decoder_classes

from conftest import SOLUTION, nothing_warned, target_greedy

PROMPT = "The quick brown fox"


@pytest.fixture(scope="module")
def model(tiny_dirs):
    return AutoModelForCausalLM.from_pretrained(tiny_dirs[0]).eval()


def test_cache_keyword_is_the_name_the_installed_forward_takes(model):
    parameters = inspect.signature(type(model).forward).parameters
    assert cache_keyword() in parameters, (
        f"cache_keyword() gave {cache_keyword()!r}, which {type(model).__name__}.forward does not take: "
        f"{list(parameters)}"
    )
    assert cache_keyword() == ("cache" if "cache" in parameters else "past_key_values"), (
        f"a forward that takes `cache` is passed it under that name, else as past_key_values; got {cache_keyword()!r}"
    )
    assert cache_kwargs(None) == {cache_keyword(): None}, cache_kwargs(None)


@torch.inference_mode()
def test_cached_forward_through_the_helpers_warns_nothing(model):
    ids = torch.randint(0, 300, (1, 8), generator=torch.Generator().manual_seed(1))
    with nothing_warned():
        cache = cache_of(model(ids[:, :5], **cache_kwargs(None), use_cache=True))
        out = model(ids[:, 5:], **cache_kwargs(cache), use_cache=True)
        assert cache_of(out) is cache, "a forward given a DynamicCache extends it and returns it"
        assert cache.get_seq_length() == 8, f"the cache should hold 5 + 3 positions, got {cache.get_seq_length()}"
        assert cache_of(model(ids, use_cache=False)) is None, "a forward with use_cache=False returns no cache"


@torch.inference_mode()
def test_cropped_cache_resumes_like_a_full_forward(model):
    ids = torch.randint(0, 300, (1, 12), generator=torch.Generator().manual_seed(0))
    cache = cache_of(model(ids[:, :10], use_cache=True))
    crop_to(cache, 7)
    assert cache.get_seq_length() == 7, f"crop_to(cache, 7) should leave 7 positions, got {cache.get_seq_length()}"
    resumed = model(ids[:, 7:12], **cache_kwargs(cache), use_cache=True).logits
    full = model(ids).logits[:, 7:12]
    torch.testing.assert_close(resumed, full, atol=1e-5, rtol=1e-5)


@torch.inference_mode()
def test_crop_to_current_length_and_zero(model):
    cache = cache_of(model(torch.tensor([[1, 2, 3]]), use_cache=True))
    crop_to(cache, 3)
    assert cache.get_seq_length() == 3, (
        f"cropping a 3-token cache to its own length should keep 3 positions, got {cache.get_seq_length()}"
    )
    crop_to(cache, 0)
    assert cache.get_seq_length() == 0, f"crop_to(cache, 0) should empty the cache, got {cache.get_seq_length()}"


@torch.inference_mode()
def test_crop_to_rejects_lengths_it_cannot_keep(model):
    cache = cache_of(model(torch.tensor([[1, 2, 3]]), use_cache=True))
    for bad in (-1, 4):
        with pytest.raises(ValueError, match="cannot keep"):
            crop_to(cache, bad)


@torch.inference_mode()
def test_recorder_reads_the_cache_under_each_name_the_forward_takes(model):
    """The forward counters see the cache a call passed under the installed name, and under `past_key_values` where
    that still works (5.24 renames it); `cache=` on an older version is not a cache to its model, nor to them."""
    cache = cache_of(model(torch.tensor([[1, 2, 3]]), use_cache=True))
    with ForwardRecorder(model) as calls, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # 5.24 on the old name, which this call makes on purpose
        for name in ("cache", "past_key_values"):
            model(torch.tensor([[4]]), **{name: cache}, use_cache=True)
            crop_to(cache, 3)
    taken = {"cache", "past_key_values"} if cache_keyword() == "cache" else {"past_key_values"}
    got = {name: call.cached_tokens for name, call in zip(("cache", "past_key_values"), calls)}
    assert got == {name: 3 if name in taken else 0 for name in got}, (
        f"cached tokens seen per keyword {got}; this transformers' forward takes the cache as {sorted(taken)}"
    )
    assert passed_cache({}) is None and passed_cache({"past_key_values": None}) is None


def test_the_kits_forward_timing_warns_nothing(model):
    context = torch.randint(0, 300, (1, 16), generator=torch.Generator().manual_seed(2))
    with nothing_warned():
        seconds = median_forward_seconds(model, context, 3, 1, torch.Generator().manual_seed(0))
    assert seconds > 0, f"a timed forward takes some time, got {seconds}"


@pytest.fixture(scope="module")
def cached_classes():
    return load_decoder_classes(SOLUTION, ("CachedSpeculativeDecoder", "SpeculativeSampler",
                                           "AdaptiveSpeculativeDecoder"))


def greedy_decoder(classes, name, dirs):
    if name == "AdaptiveSpeculativeDecoder":  # given its costs, so that it measures none
        return classes[name](*dirs, device="cpu", forward_costs=ForwardCosts(1.0, (2.0,) * 18))
    return classes[name](*dirs, device="cpu")


@pytest.mark.parametrize("name", ["CachedSpeculativeDecoder", "AdaptiveSpeculativeDecoder"])
def test_solutions_cached_decoding_is_exact_and_warns_nothing(cached_classes, tiny_dirs, name):
    decoder = greedy_decoder(cached_classes, name, tiny_dirs)
    expected = target_greedy(decoder, PROMPT, 24)
    with nothing_warned():
        got = decoder.speculative_decode(PROMPT, max_tokens=24, num_speculative_tokens=3)
    assert got.token_ids == expected, (
        f"{name} with its caches must equal target greedy: got {got.token_ids}, expected {expected}"
    )


def test_solutions_cached_sampling_warns_nothing(cached_classes, tiny_dirs):
    sampler = cached_classes["SpeculativeSampler"](*tiny_dirs, device="cpu")
    with nothing_warned():
        got = sampler.speculative_sample(PROMPT, max_tokens=24, num_speculative_tokens=3, temperature=0.8,
                                         generator=torch.Generator().manual_seed(0))
    assert 0 < len(got.token_ids) <= 24, f"a sample of at most 24 tokens, got {len(got.token_ids)}"


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
