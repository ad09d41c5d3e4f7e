# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Speculative decoding
#
# A small *draft* model proposes k tokens; the large *target* model checks all of them in one forward
# pass. Every draft token the target would have produced itself is kept, and the first one it would
# not have produced is replaced by the target's own choice. The output is exactly the target's greedy
# output, produced with fewer target forward passes.
#
# You will build it in two steps:
# 1. `SpeculativeDecoder`: drafting, vectorised verification and the decoding loop, without caches.
# 2. `CachedSpeculativeDecoder`: the same with a KV cache on both models, cropped after a rejection.
#
# Throughout, `k` is the number of draft tokens proposed per round, `L` the length of the sequence
# before the draft, and the target's prediction for draft token `i` (0-based) is the logit at
# position `L - 1 + i`:
#
# | position | `L-1` | `L` | ... | `L+k-2` | `L+k-1` |
# |---|---|---|---|---|---|
# | token at that position | last prompt token | draft 0 | ... | draft k-2 | draft k-1 |
# | target's argmax there predicts | draft 0 | draft 1 | ... | draft k-1 | bonus token |
#
# Fill in every `# YOUR CODE HERE`. The test cells below each part tell you where you stand; graded
# copies of them also run hidden cases on other prompts and models. Grading runs your classes outside
# this notebook and keeps only the imports, functions, classes and constants of your cells: any other
# code at the top level of a cell (a print, a tensor computed once) does not run there, so keep what your
# methods need inside them. The points:
#
# <!-- points -->
# | part | what you write | tests (points) |
# |---|---|---|
# | 1. speculative decoding without caches | `SpeculativeDecoder`: loading, drafting, verification, the loop | `test_loading` (6), `test_draft_tokens` (8), `test_verify_alignment` (10), `test_correction_and_bonus` (8), `test_exact` (12), `test_eos_and_budget` (8), `test_counts` (8) |
# | 2. KV caches | `CachedSpeculativeDecoder` | `test_cached_exact` (8), `test_cache_use` (12), `test_speedup` (10) |
# | report | at most 400 words on the measured speedup against k, graded by hand against its rubric | 10 |
# | bonus: speculative sampling | `SpeculativeSampler` | `test_sampling` (+5 extra credit) |
# | bonus: prompt lookup | `PromptLookupDecoder` | `test_lookup` (+3 extra credit) |
# | bonus: adaptive k | `AdaptiveSpeculativeDecoder` | `test_adaptive` (+3 extra credit) |
#
# 100 points: part 1 60, part 2 30, the report 10; extra credit up to 11 more.
# <!-- /points -->
#
# The uncached part and the cached part are graded separately: a correct decoder without caches loses only the
# cached part. The bonus parts, after the report, earn extra credit and cost nothing if left as they are.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
# Set-up (locked): on Colab, install the kit's support package at the course's pinned version.
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import urllib.request

KIT = "{{KIT_INSTALL}}"  # the course's support package, at the tag this notebook was published with
PINS = "{{KIT_PINS}}"  # constraints.txt at the same tag: the versions the course tested


def distribution_name(name: str) -> str:
    """A package's name as pip compares names: lower case, each run of -, _ and . as one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


if os.environ.get("SPECDEC_GRADING") != "1" and importlib.util.find_spec("specdec_kit") is None:
    # Pins only what pip adds. What the runtime has stays: Colab's torch is built for its GPU, its transformers
    # is one the kit supports (4.x or 5.x), and its numpy and pandas are what its own packages need.
    installed = {distribution_name(d.metadata["Name"] or "") for d in importlib.metadata.distributions()}
    pins = [line for line in urllib.request.urlopen(PINS).read().decode().splitlines()
            if "==" in line and not line.startswith("#") and distribution_name(line.split("==")[0]) not in installed]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as constraints:
        constraints.write("".join(f"{pin}\n" for pin in pins))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-c", constraints.name, KIT], check=True)

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from specdec_kit import DecodeResult, cache_kwargs, cache_of, common_prefix_length, crop_to, zoo
from specdec_kit.bench import benchmark_decoder
from specdec_kit.bench.readiness import checked_decoder
from specdec_kit.core.sampling import check_sampling_settings, warp
from specdec_kit.core.timing import ForwardCosts, measure_forward_costs
from specdec_kit.models.loading import (
    check_same_vocab,
    default_dtype,
    default_pair,
    dtype_kwargs,
    model_source,
    resolve_device,
    resolve_pair,
)
from specdec_kit.rounds import record_rounds

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
PAIR = default_pair(DEVICE)  # Pythia on a GPU with the hub; an offline zoo pair otherwise and when grading
TARGET, DRAFT = resolve_pair(PAIR)
print(f"device {DEVICE}, pair {PAIR}: target {TARGET}, draft {DRAFT}")
zoo.materialize_all([*zoo.CHECK_PAIRS, PAIR])  # the offline models, built once per machine: says so, and how long

# %% [markdown]
# ## Part 1: speculative decoding without caches
#
# `speculative_decode` runs rounds of five steps until `max_tokens` new tokens exist or the target
# emits EOS:
# 1. draft up to k tokens with the draft model (never more than the budget leaves room for);
# 2. score them with one target forward pass;
# 3. accept the longest prefix of drafts that matches the target's argmax, and take the target's own
#    token at the first mismatch (the correction) or after the last draft (the bonus token);
# 4. append the accepted drafts and the target's token, and roll back what the models computed for the
#    rejected drafts (`rollback`: nothing to do without caches; Part 2 crops its caches there);
# 5. stop at EOS (nothing after it is emitted) or at the budget.
#
# `verify_tokens_vectorized` returns `n_accepted`, the number of drafts accepted: the index of the first
# rejected draft, or k when every draft is accepted.


# %% nbgrader={"grade": false, "grade_id": "speculative_decoder", "locked": false, "schema_version": 3, "solution": true}
class SpeculativeDecoder:
    """Greedy speculative decoding (Leviathan et al., 2023) for batch size 1, without KV caches."""

    def __init__(self, target_model_name: str, draft_model_name: str, device: str = "cuda",
                 dtype: torch.dtype | None = None) -> None:
        """Load both models through the two initialisers; refuse tokenizers that differ."""
        self.device = resolve_device(device)
        self.dtype = dtype or default_dtype(self.device)  # fp16 on CUDA, fp32 on the CPU
        # Set self.target_model, self.target_tokenizer, self.draft_model, self.draft_tokenizer through the two
        # initialisers, then refuse a pair whose vocabularies differ (specdec_kit.models.loading.check_same_vocab).
        ### BEGIN SOLUTION
        self.target_model, self.target_tokenizer = self.initialize_target_model(target_model_name)
        self.draft_model, self.draft_tokenizer = self.initialize_draft_model(draft_model_name)
        check_same_vocab(self.target_tokenizer, self.draft_tokenizer, target_model_name, draft_model_name)
        ### END SOLUTION

    def initialize_target_model(self, model_name: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        """Load the target for inference: (model in eval mode on self.device in self.dtype, tokenizer with a
        pad token). `model_source(model_name)` turns any name the kit accepts into from_pretrained arguments."""
        # from_pretrained the tokenizer and the model, set a pad token if there is none, move the model to
        # self.device in self.dtype (dtype_kwargs(self.dtype)) and put it in eval mode.
        ### BEGIN SOLUTION
        source, kwargs = model_source(model_name)  # hub id, local directory, .gguf file or zoo:<pair>/<role>
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs, **dtype_kwargs(self.dtype))
        return model.to(self.device).eval(), tokenizer
        ### END SOLUTION

    def initialize_draft_model(self, model_name: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        """Load the draft like the target, in the same dtype (mixing dtypes would only add casts)."""
        ### BEGIN SOLUTION
        return self.initialize_target_model(model_name)
        ### END SOLUTION

    @torch.inference_mode()
    def generate_draft_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                              num_speculative_tokens: int = 4) -> torch.Tensor:
        """The draft model's next `num_speculative_tokens` greedy tokens after `input_ids`: shape (1, k)."""
        check_k(num_speculative_tokens)
        # k times: run the draft on the sequence so far, take the argmax of the last position (greedy, never
        # sampled), append it. Return only the k new tokens. Keep everything on the device: no .item() here.
        ### BEGIN SOLUTION
        ids, mask = input_ids, attention_mask
        for _ in range(num_speculative_tokens):
            logits = self.draft_model(input_ids=ids, attention_mask=mask, use_cache=False).logits  # (1, n, V)
            next_token = logits[:, -1, :].argmax(dim=-1, keepdim=True)  # (1, 1), stays on the device
            ids = torch.cat([ids, next_token], dim=1)
            mask = torch.cat([mask, torch.ones_like(next_token)], dim=1)
        return ids[:, input_ids.shape[1]:]
        ### END SOLUTION

    @torch.inference_mode()
    def verify_tokens_vectorized(self, input_ids: torch.Tensor, draft_tokens: torch.Tensor,
                                 attention_mask: torch.Tensor) -> tuple[torch.Tensor, int, torch.Tensor]:
        """Check all drafts with one target forward: input_ids (1, L), draft_tokens (1, k).

        Returns (accepted_tokens (1, n_accepted), n_accepted = index of the first rejected draft (k if none),
        next_token (1, 1): the target's own token after the accepted drafts, i.e. the correction or the bonus).
        """
        # One target forward over input_ids + draft_tokens. The prediction for draft i is the logit at
        # position L-1+i (L = input_ids.shape[1]); accept_drafts does the comparison.
        ### BEGIN SOLUTION
        sequence = torch.cat([input_ids, draft_tokens], dim=1)
        mask = torch.cat([attention_mask, torch.ones_like(draft_tokens)], dim=1)
        logits = self.target_model(input_ids=sequence, attention_mask=mask, use_cache=False).logits
        return accept_drafts(logits[:, input_ids.shape[1] - 1:, :], draft_tokens)
        ### END SOLUTION

    @torch.inference_mode()
    def speculative_decode(self, prompt: str, max_tokens: int = 100,
                           num_speculative_tokens: int = 4) -> DecodeResult:
        """Greedy speculative decoding of `prompt`: at most `max_tokens` new tokens, none after EOS."""
        check_k(num_speculative_tokens)
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        if not prompt:
            raise ValueError("the prompt is empty: give the model some text to continue")
        encoded = self.target_tokenizer(prompt, return_tensors="pt").to(self.device)
        input_ids, attention_mask = encoded.input_ids, encoded.attention_mask
        eos_ids = eos_token_ids(self.target_model, self.target_tokenizer)
        new_tokens, proposed, accepted = [], [], []
        # Until max_tokens new tokens or EOS, per round:
        # 1. draft k = min(num_speculative_tokens, tokens left - 1) tokens (none if k is 0);
        # 2-3. verify them in one target pass: accepted drafts, and the target's own next token;
        # 4. append them (truncate_at_eos), record the counts (proposed: the drafts the round checked), and roll
        #    back: self.rollback(L + n_accepted), L the length before the round, keeps what the text holds for certain;
        # 5. stop after an EOS.
        # Every round appends at least the target's own token, a round with no room for drafts too (it
        # proposes 0 and counts as a round). accepted counts the accepted drafts that are kept: when an EOS
        # is among them, those up to and including it.
        ### BEGIN SOLUTION
        while len(new_tokens) < max_tokens:
            # 1. Draft, leaving room in the budget for the target's own token.
            k = min(num_speculative_tokens, max_tokens - len(new_tokens) - 1)
            if k > 0:
                draft_tokens = self.generate_draft_tokens(input_ids, attention_mask, k)
            else:
                draft_tokens = input_ids.new_empty((1, 0))
            # 2-3. Verify in one target pass; accept a prefix and take the target's next token.
            accepted_tokens, n_accepted, next_token = self.verify_tokens_vectorized(
                input_ids, draft_tokens, attention_mask)
            # 4. Append, and roll back what was computed for the rejected drafts.
            round_tokens = torch.cat([accepted_tokens, next_token], dim=1)
            emitted = truncate_at_eos(round_tokens[0].tolist(), eos_ids)
            new_tokens += emitted
            proposed.append(draft_tokens.shape[1])  # k, or fewer where a subclass drafts fewer
            accepted.append(min(n_accepted, len(emitted)))
            self.rollback(input_ids.shape[1] + n_accepted)
            input_ids = torch.cat([input_ids, round_tokens], dim=1)
            attention_mask = torch.ones_like(input_ids)
            # 5. Stop at EOS (keeping it, as generate does) or at the budget.
            if emitted[-1] in eos_ids:
                break
        ### END SOLUTION
        text = self.target_tokenizer.decode(new_tokens, skip_special_tokens=True)
        return DecodeResult(text=text, token_ids=new_tokens, proposed=proposed, accepted=accepted)

    def rollback(self, length: int) -> None:
        """Step 4 of a round: keep what the models computed for the text's first `length` positions only.
        Without caches nothing was kept; Part 2's cached decoder crops its caches here."""

    def benchmark(self, prompt: str, max_tokens: int = 100, num_runs: int = 3, compare_baseline: bool = True,
                  num_speculative_tokens: int = 4) -> dict:
        """Time this decoder (and the target's own greedy decoding) with the kit's harness: warm-up,
        synchronisation, interleaved runs, the kit's clock and forward counters."""
        return benchmark_decoder(self, prompt, max_tokens, num_runs, compare_baseline, num_speculative_tokens)


def accept_drafts(logits: torch.Tensor, draft_tokens: torch.Tensor) -> tuple[torch.Tensor, int, torch.Tensor]:
    """Greedy acceptance, step 3 of a round, shared by both verifiers.

    logits: (1, k+1, V), the target's logits from position L-1 on; draft_tokens: (1, k).
    Returns (accepted draft tokens (1, n_accepted), n_accepted, the target's token after them (1, 1)).
    """
    # The target's argmax at each of the k+1 positions; n_accepted = length of the prefix where it equals the
    # drafts; the target's token at index n_accepted is the correction (n_accepted < k) or the bonus token.
    ### BEGIN SOLUTION
    k = draft_tokens.shape[1]
    predicted = logits.argmax(dim=-1)  # (1, k+1): the target's token after each prefix
    matches = predicted[:, :k] == draft_tokens
    n_accepted = int(matches.cumprod(dim=1).sum())  # a host sync: what is appended depends on it
    return draft_tokens[:, :n_accepted], n_accepted, predicted[:, n_accepted:n_accepted + 1]
    ### END SOLUTION


def truncate_at_eos(tokens: list[int], eos_ids: set[int]) -> list[int]:
    """`tokens` up to and including the first EOS (all of them if there is none)."""
    ### BEGIN SOLUTION
    for i, token in enumerate(tokens):
        if token in eos_ids:
            return tokens[:i + 1]
    return tokens
    ### END SOLUTION


def check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"num_speculative_tokens must be at least 1, got {k}")


def eos_token_ids(model, tokenizer) -> set[int]:
    """The ids that end generation: the model's generation config, as `generate` uses, else the tokenizer's."""
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    return set(eos) if isinstance(eos, list) else ({eos} if eos is not None else set())


# %% [markdown]
# ### Tests of part 1
#
# Each test cell builds your class on the kit's offline models (`specdec_kit.zoo`) on the CPU, and
# judges it by what it returns and by the forward calls counted on its models. The graded versions also
# run hidden cases. A test that passes prints one line saying what it checked. One that fails shows the
# lines of your code it went through (the kit's, torch's and transformers' frames folded away) and its
# message; where your decode's tokens or counts differ from correct decoding's, it first draws your rounds,
# each above the correct one, the first difference marked.

# %% nbgrader={"grade": true, "grade_id": "test_loading", "locked": true, "points": 6, "schema_version": 3, "solution": false}
"""Loading: eval mode, a pad token, fp32 on the CPU, and a refusal of mismatched tokenizers."""
from specdec_kit import checks

checks.run_test("test_loading", checks.check_loading, SpeculativeDecoder)
### BEGIN HIDDEN TESTS
from autograder import hidden

hidden.check_loading(SpeculativeDecoder)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_draft_tokens", "locked": true, "points": 8, "schema_version": 3, "solution": false}
"""Drafting: the draft model's k greedy tokens, new tokens only, shape [1, k]."""
from specdec_kit import checks

checks.run_test("test_draft_tokens", checks.check_draft_tokens, SpeculativeDecoder)
### BEGIN HIDDEN TESTS
from autograder import hidden

hidden.check_draft_tokens(SpeculativeDecoder)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_verify_alignment", "locked": true, "points": 10, "schema_version": 3, "solution": false}
"""Verification: the target's prediction for draft i is the logit at position L-1+i, in one forward."""
from specdec_kit import checks

checks.run_test("test_verify_alignment", checks.check_verify_alignment, SpeculativeDecoder)
### BEGIN HIDDEN TESTS
from autograder import hidden

hidden.check_verify_alignment(SpeculativeDecoder)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_correction_and_bonus", "locked": true, "points": 8, "schema_version": 3, "solution": false}
"""Verification: the correction token after a rejection and the bonus token after a full acceptance."""
from specdec_kit import checks

checks.run_test("test_correction_and_bonus", checks.check_correction_and_bonus, SpeculativeDecoder)
### BEGIN HIDDEN TESTS
from autograder import hidden

hidden.check_correction_and_bonus(SpeculativeDecoder)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_exact", "locked": true, "points": 12, "schema_version": 3, "solution": false}
"""The loop: tokens identical to the target's own greedy decoding, for several prompts and k."""
from specdec_kit import checks

checks.run_test("test_exact", checks.check_exact, SpeculativeDecoder)
### BEGIN HIDDEN TESTS
from autograder import hidden

hidden.check_exact(SpeculativeDecoder)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_eos_and_budget", "locked": true, "points": 8, "schema_version": 3, "solution": false}
"""The loop: EOS ends the text wherever it falls; exactly max_tokens new tokens otherwise."""
from specdec_kit import checks

checks.run_test("test_eos_and_budget", checks.check_eos_and_budget, SpeculativeDecoder)
### BEGIN HIDDEN TESTS
from autograder import hidden

hidden.check_eos_and_budget(SpeculativeDecoder)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_counts", "locked": true, "points": 8, "schema_version": 3, "solution": false}
"""The loop: one target forward per round; proposed and accepted counts as the kit measures them."""
from specdec_kit import checks

checks.run_test("test_counts", checks.check_counts, SpeculativeDecoder)
### BEGIN HIDDEN TESTS
from autograder import hidden

hidden.check_counts(SpeculativeDecoder)
### END HIDDEN TESTS

# %% [markdown]
# ## Part 2: KV caches
#
# Without caches every draft step and every verification re-encodes the whole sequence. With a
# `DynamicCache` per model, kept across rounds, a round costs k one-token draft steps and one target
# forward over the new positions only. `self.caches[role]` (`role` is `"target"` or `"draft"`) holds each
# model's cache and the token ids, shape (1, n), whose keys and values it holds:
#
# | after | the draft's cache holds | the target's cache holds |
# |---|---|---|
# | `generate_draft_tokens(input_ids, mask, k)` | input_ids and drafts 0..k-2 (the last draft is never fed) | as before |
# | `verify_tokens_vectorized(input_ids, drafts, mask)` | as before | input_ids and all k drafts |
# | `rollback(L + n_accepted)`, step 4 of the round | at most the text's first L + n_accepted positions | the text's first L + n_accepted positions |
#
# Pass a model its cache with `**cache_kwargs(cache)` and take the cache a forward returns with `cache_of(out)`:
# `out = model(input_ids=ids, **cache_kwargs(cache), use_cache=True)`, then `cache = cache_of(out)` (with
# `cache` None the forward starts a new one; given one, it extends it in place). transformers 5.24 renamed the
# keyword and the output's field from `past_key_values` to `cache` and warns about the old name; earlier
# versions silently ignore `cache=`. The two helpers use the name of the installed version.
#
# After a rejection both caches hold drafts that are no longer part of the text: `rollback` crops them
# with `crop_to(cache, length)` (it works on transformers 4.x and 5.x), so that the next round feeds only
# what the caches lack: the target, the round's first token and the new drafts; the draft, one token, or
# two after a round that accepted every draft.
#
# Each method still takes the whole sequence and asks `cached_prefix` how much of it its model's cache
# holds. A cache is used only if the ids it holds are the first ones of `input_ids`; one that holds all
# of them is cropped by one position, because the logits at the last position are needed, so that
# position must be fed. Any other cache (another prompt, a different prefix) is not used: the method
# starts afresh and feeds `input_ids` whole.


# %% nbgrader={"grade": false, "grade_id": "cached_speculative_decoder", "locked": false, "schema_version": 3, "solution": true}
class CachedSpeculativeDecoder(SpeculativeDecoder):
    """Speculative decoding with a KV cache per model, kept across rounds and rolled back after a rejection."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reset_caches()

    def reset_caches(self) -> None:
        """Forget both caches. self.caches[role] = (its DynamicCache or None, the ids (1, n) it holds or None)."""
        self.caches = {"target": (None, None), "draft": (None, None)}

    def cached_prefix(self, role: str, input_ids: torch.Tensor) -> tuple[DynamicCache | None, int]:
        """`role`'s cache and how many positions of input_ids (1, L) it holds, if it holds only input_ids'
        first tokens; else (None, 0): start afresh. A cache holding all L is first cropped to L - 1 (with
        self.caches[role] to match): the last position is fed again for its logits. The caller then feeds
        input_ids[:, cached:] on that cache, which the forward extends in place."""
        # The ids the cache holds must equal the first ones of input_ids (common_prefix_length helps).
        ### BEGIN SOLUTION
        cache, held = self.caches[role]
        if cache is None or common_prefix_length(held, input_ids) < held.shape[1]:
            return None, 0
        if held.shape[1] == input_ids.shape[1]:
            crop_to(cache, held.shape[1] - 1)
            held = held[:, :-1]
            self.caches[role] = (cache, held)
        return cache, held.shape[1]
        ### END SOLUTION

    @torch.inference_mode()
    def generate_draft_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                              num_speculative_tokens: int = 4) -> torch.Tensor:
        """As in Part 1 (the k new tokens, shape (1, k)), feeding the draft only what its cache lacks, then
        one token per step. Leaves self.caches["draft"] holding input_ids and the first k-1 drafts."""
        check_k(num_speculative_tokens)
        ### BEGIN SOLUTION
        cache, cached = self.cached_prefix("draft", input_ids)
        feed, drafts = input_ids[:, cached:], []
        for _ in range(num_speculative_tokens):
            out = self.draft_model(input_ids=feed, **cache_kwargs(cache), use_cache=True)
            cache = cache_of(out)
            feed = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)  # (1, 1)
            drafts.append(feed)
        draft_tokens = torch.cat(drafts, dim=1)  # (1, k)
        self.caches["draft"] = (cache, torch.cat([input_ids, draft_tokens[:, :-1]], dim=1))
        return draft_tokens
        ### END SOLUTION

    @torch.inference_mode()
    def verify_tokens_vectorized(self, input_ids: torch.Tensor, draft_tokens: torch.Tensor,
                                 attention_mask: torch.Tensor) -> tuple[torch.Tensor, int, torch.Tensor]:
        """As in Part 1, from one target forward over what the target's cache lacks: the rest of input_ids
        and all k drafts. Leaves self.caches["target"] holding input_ids and every draft."""
        ### BEGIN SOLUTION
        cache, cached = self.cached_prefix("target", input_ids)
        sequence = torch.cat([input_ids, draft_tokens], dim=1)
        out = self.target_model(input_ids=sequence[:, cached:], **cache_kwargs(cache), use_cache=True)
        self.caches["target"] = (cache_of(out), sequence)
        # The logits start at position `cached`; the prediction for draft 0 sits at L-1.
        first = input_ids.shape[1] - 1 - cached
        return accept_drafts(out.logits[:, first:, :], draft_tokens)
        ### END SOLUTION

    def rollback(self, length: int) -> None:
        """Step 4 of a round: crop each cache to at most the text's first `length` positions (crop_to), so
        that neither holds a rejected draft, and shorten the ids it holds to match."""
        ### BEGIN SOLUTION
        for role, (cache, held) in self.caches.items():
            if cache is not None and held.shape[1] > length:
                crop_to(cache, length)
                self.caches[role] = (cache, held[:, :length])
        ### END SOLUTION

    def speculative_decode(self, prompt: str, max_tokens: int = 100,
                           num_speculative_tokens: int = 4) -> DecodeResult:
        self.reset_caches()  # a new prompt shares nothing with the last one
        return super().speculative_decode(prompt, max_tokens, num_speculative_tokens)


# %% [markdown]
# ### Tests of part 2

# %% nbgrader={"grade": true, "grade_id": "test_cached_exact", "locked": true, "points": 8, "schema_version": 3, "solution": false}
"""Cached decoder: still identical to the target's greedy decoding (a stale cache changes the output)."""
from specdec_kit import checks

checks.run_test("test_cached_exact", checks.check_exact, CachedSpeculativeDecoder)
### BEGIN HIDDEN TESTS
from autograder import hidden

hidden.check_exact(CachedSpeculativeDecoder)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_cache_use", "locked": true, "points": 12, "schema_version": 3, "solution": false}
"""Cached decoder: no forward re-sends the prefix after the prefill; caches cropped after a rejection;
a cache that holds another text is not used."""
from specdec_kit import checks

checks.run_test("test_cache_use", checks.check_cache_use, CachedSpeculativeDecoder)
### BEGIN HIDDEN TESTS
from autograder import hidden

hidden.check_cache_use(CachedSpeculativeDecoder)
### END HIDDEN TESTS

# %% [markdown]
# ## Try it
#
# On a GPU with internet this uses the course's Pythia pair; offline it uses one of the kit's own pairs,
# small models with hand-set weights whose tokens follow a table, not language: their text is gibberish,
# as expected. What matters there is that the tokens equal the target's own greedy ones, and the
# acceptance rate. `record_rounds` runs your decoder with the kit's recorders on both models and draws each
# round from what they saw (hover over a token for its id); `specdec-kit rounds` writes the same view to a file.

# %% tags=["demo"]
from IPython.display import display

# Checked on the tiny pair first (seconds); while the class is unfinished, `decoder` says what to finish.
decoder = checked_decoder(CachedSpeculativeDecoder, TARGET, DRAFT, device=DEVICE)
rounds = record_rounds(decoder, "The future of Artificial Intelligence is", max_tokens=40, num_speculative_tokens=4)
result = rounds.result
print(repr(result.text))
print(f"{result.rounds} rounds, acceptance rate {result.acceptance_rate:.0%}, "
      f"{result.tokens_per_round:.2f} tokens per round")
display(rounds)  # one line per round: kept drafts, the first rejected one, the target's own token, the caches after

# %% [markdown]
# ## Benchmark
#
# Timing is the kit's job, not the decoder's: `decoder.benchmark(...)` and `bench.compare(...)` use the
# kit's harness (warm-up, synchronisation, interleaved runs, forward calls counted on the models). The
# plot shows speedup and acceptance rate against k beside two theory curves, and the table with it the
# figures behind them, per method and k over the prompts and repeats:
#
# - **speedup**: the median over prompts and repeats of the method's tokens/s over target greedy's, for
#   the same prompt and repeat.
# - **acceptance rate**: accepted draft tokens / proposed draft tokens (the correction and the bonus
#   token are not drafts).
# - **alpha** (Leviathan et al.'s per-token acceptance probability): accepted / (accepted + rejections),
#   a rejection being a round that accepted fewer drafts than it proposed (one that ended at EOS is not).
# - **c**: the time of one draft forward over one target forward, each over one new token.
# - **Leviathan's prediction**: (1 - alpha^(k+1)) / ((1 - alpha)(k c + 1)), the expected speedup if a
#   verify pass over k+1 tokens cost what one target step costs.
# - **forward-bound speedup**: tokens per round x target greedy's seconds per token / (k draft steps +
#   one verify pass over k+1 tokens), all measured: the speedup with no overhead outside the forwards.
#
# Each point is a median over prompts and repeats; its bars (and the table's `speedup_q1`, `speedup_q3`)
# span the middle half of the paired speedups behind it, as the caption under the plot says. Differences
# smaller than those bars are noise. The benchmark warns when other programs keep the machine's cores busy:
# its figures are then slower and noisier than your decoder is. The second plot shows, for each k, how
# often draft position i is accepted, beside alpha^i: the two agree when each draft is accepted
# independently with the same probability alpha, which Leviathan's prediction assumes.

# %% tags=["demo"]
print(decoder.benchmark("The future of Artificial Intelligence is", max_tokens=24, num_runs=3))

# %% tags=["demo"]
import pandas as pd

from specdec_kit import bench
from specdec_kit.bench import runners, sweeps
from specdec_kit.bench.plot import plot_acceptance_by_position, plot_bench
from specdec_kit.core.prompts import load_prompts

classes = {"SpeculativeDecoder": SpeculativeDecoder, "CachedSpeculativeDecoder": CachedSpeculativeDecoder}
COLUMNS = ["method", "k", "speedup", "speedup_q1", "speedup_q3", "acceptance_rate", "alpha", "c", "tokens_per_round",
           "predicted_speedup", "forward_bound_speedup"]
sweep = sweeps.notebook_sweep(DEVICE)  # under a minute on a 2-core CPU; more k and tokens on a GPU
BONUS_SWEEPS = DEVICE == "cuda"  # the bonus parts' demos time them on this sweep too: a minute or more each on a CPU
print(sweep)
document = bench.compare(classes, TARGET, DRAFT, load_prompts()[:sweep.prompts], list(sweep.k_values), pair=PAIR,
                         repeats=sweep.repeats, max_new_tokens=sweep.max_new_tokens, device=DEVICE)
figure = plot_bench(document)
by_position = plot_acceptance_by_position(document)
pd.DataFrame(document["summary"])[COLUMNS].round(3)  # predicted_speedup: Leviathan's prediction

# %% [markdown]
# ### Test of speed
#
# The kit times your `CachedSpeculativeDecoder` against HF assisted generation at the same k, both
# interleaved in this process, so the bar is a ratio that holds on any device: Pythia in fp16 on a GPU
# with internet, the kit's `synthetic-pythia` on a GPU without, `synthetic-small` on a CPU. It first
# checks, without timing, that you make one target forward per round and produce the target's output.
# Before timing it prints what it times (pair, device, k, prompts, tokens, repeats) and the bar; after,
# the ratio it measured, pass or fail. Grading runs the same test offline on the grader's machine
# (`synthetic-small` on a CPU, `synthetic-pythia` on a GPU), so the graded ratio can differ from yours.

# %% nbgrader={"grade": true, "grade_id": "test_speedup", "locked": true, "points": 10, "schema_version": 3, "solution": false}
"""Cached decoder: at least `min_ratio` times the speed of HF assisted generation, timed by the kit."""
from specdec_kit import checks

min_ratio = checks.SPEEDUP_MIN_RATIO
### BEGIN HIDDEN TESTS
from autograder import hidden

min_ratio = hidden.SPEEDUP_MIN_RATIO
### END HIDDEN TESTS
checks.check_speedup(CachedSpeculativeDecoder, min_ratio=min_ratio)

# %% [markdown] nbgrader={"grade": true, "grade_id": "report", "locked": false, "points": 10, "schema_version": 3, "solution": true}
# ## Report (graded by hand)
#
# In at most 400 words: the speedup and acceptance rate you measured against k (with the plot above),
# judged against their spread, why the measured speedup falls short of Leviathan's prediction and of the
# forward-bound curve, what a rejection costs your cached decoder, and one change that would raise the
# speedup on your hardware.
#
# | points | what earns them |
# |---|---|
# | 3 | your measured speedup and acceptance rate against k, from the table above, with the pair and device, and the k that is best there; which differences between k are larger than the bars (the middle half of the paired speedups), and whether the machine was busy |
# | 3 | why the measured speedup falls short of Leviathan's prediction and of the forward-bound curve: what each assumes that your run does not grant |
# | 2 | what a rejection costs your cached decoder: the forwards spent on rejected drafts, and what rollback keeps |
# | 2 | one change that would raise the speedup on your hardware, and why it would |
#
# ### BEGIN SOLUTION
# A strong report quotes the measured figures with the command that produced them, separates
# acceptance rate from alpha, explains that a verify pass over k+1 tokens costs more than one target
# step on this hardware (which Leviathan's formula ignores), and names the overhead outside the model
# forwards (Python, host syncs, cache cropping) that the forward-bound curve leaves out.
# ### END SOLUTION

# %% [markdown]
# ## Bonus: speculative sampling (extra credit)
#
# Greedy speculative decoding reproduces the target's greedy text. With sampling, the draft samples its k
# tokens from its distribution q, and the target keeps the output distributed exactly as its own p
# (Leviathan et al., 2023; Chen et al., 2023), where p and q are both warped by the same temperature and
# top-p (`warp(logits, temperature, top_p)`, the warping `generate(do_sample=True)` applies):
# 1. draft x_0 .. x_{k-1}, each sampled from q at its position, keeping q's rows: `self.draft_probs`, (1, k, V);
# 2. one target forward gives p at the k+1 positions from L-1 on, as in Part 1: (1, k+1, V);
# 3. accept draft i with probability min(1, p_i(x_i) / q_i(x_i)), in order, until the first rejection;
# 4. at a rejection at position n, sample the target's token from the residual max(0, p_n - q_n), normalised;
#    when all k are accepted, sample the bonus token from p_k, the target's own distribution after the last
#    draft (a round with no room for drafts samples from p_0).
#
# Checking a sampled draft greedily (accept only the target's argmax) throws most drafts away and changes the
# output's distribution; so does sampling the correction from p instead of the residual. `SpeculativeSampler`
# keeps Part 2's loop, caches and rollback: `speculative_sample` sets the sampling settings and calls
# `speculative_decode`, whose rounds call the two methods below. Draw every random number from
# `self.generator` (a `torch.Generator` on the model's device, or None for torch's global one).
#
# `test_sampling` (extra credit: the points table at the top) samples thousands of short continuations on
# the kit's `sampling` pair, whose p and q are set by hand, and compares them with the target's exact
# distribution by a chi-square test.

# %% nbgrader={"grade": false, "grade_id": "speculative_sampler", "locked": false, "schema_version": 3, "solution": true}
class SpeculativeSampler(CachedSpeculativeDecoder):
    """Speculative sampling with a KV cache per model: the output follows the target's warped distribution."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.temperature, self.top_p, self.generator = 1.0, 1.0, None
        self.draft_probs = None  # q at each draft position of the last call to generate_draft_tokens

    def speculative_sample(self, prompt: str, max_tokens: int = 100, num_speculative_tokens: int = 4,
                           temperature: float = 1.0, top_p: float = 1.0,
                           generator: torch.Generator | None = None) -> DecodeResult:
        """Sample a continuation of `prompt` distributed as the target's own sampling with these settings."""
        check_sampling_settings(temperature, top_p)
        self.temperature, self.top_p, self.generator = temperature, top_p, generator
        return self.speculative_decode(prompt, max_tokens, num_speculative_tokens)

    @torch.inference_mode()
    def generate_draft_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                              num_speculative_tokens: int = 4) -> torch.Tensor:
        """Part 2's cached drafting, each token sampled from the draft's warped distribution q; keeps q's rows
        in self.draft_probs, shape (1, k, V)."""
        check_k(num_speculative_tokens)
        ### BEGIN SOLUTION
        draft_cache, held = self.cached_prefix("draft", input_ids)
        step_ids, tokens, rows = input_ids[:, held:], [], []
        for _ in range(num_speculative_tokens):
            step = self.draft_model(input_ids=step_ids, **cache_kwargs(draft_cache), use_cache=True)
            draft_cache = cache_of(step)
            q = warp(step.logits[:, -1, :], self.temperature, self.top_p)  # (1, V)
            step_ids = torch.multinomial(q, 1, generator=self.generator)  # (1, 1), sampled from q
            tokens.append(step_ids)
            rows.append(q)
        draft_tokens = torch.cat(tokens, dim=1)
        self.draft_probs = torch.stack(rows, dim=1)  # (1, k, V)
        self.caches["draft"] = (draft_cache, torch.cat([input_ids, draft_tokens[:, :-1]], dim=1))
        return draft_tokens
        ### END SOLUTION

    @torch.inference_mode()
    def verify_tokens_vectorized(self, input_ids: torch.Tensor, draft_tokens: torch.Tensor,
                                 attention_mask: torch.Tensor) -> tuple[torch.Tensor, int, torch.Tensor]:
        """Part 2's cached verification, judged by accept_sampled on the target's warped distribution p."""
        ### BEGIN SOLUTION
        target_cache, held = self.cached_prefix("target", input_ids)
        scored = torch.cat([input_ids, draft_tokens], dim=1)
        verdict = self.target_model(input_ids=scored[:, held:], **cache_kwargs(target_cache), use_cache=True)
        self.caches["target"] = (cache_of(verdict), scored)
        p = warp(verdict.logits[:, input_ids.shape[1] - 1 - held:, :], self.temperature, self.top_p)  # (1, k+1, V)
        q = self.draft_probs if draft_tokens.shape[1] else p[:, :0]  # a round with no room for drafts has no q
        return accept_sampled(p, q, draft_tokens, self.generator)
        ### END SOLUTION


def accept_sampled(p: torch.Tensor, q: torch.Tensor, draft_tokens: torch.Tensor,
                   generator: torch.Generator | None = None) -> tuple[torch.Tensor, int, torch.Tensor]:
    """Steps 3-4 of a sampled round. p: (1, k+1, V) the target's, q: (1, k, V) the draft's, draft_tokens: (1, k).

    Returns (accepted draft tokens (1, n_accepted), n_accepted, the target's sampled token after them (1, 1)).
    """
    ### BEGIN SOLUTION
    k = draft_tokens.shape[1]
    positions = torch.arange(k, device=p.device)
    p_drafts = p[0, positions, draft_tokens[0]]  # p_i(x_i)
    q_drafts = q[0, positions, draft_tokens[0]]  # q_i(x_i) > 0: the draft sampled x_i
    u = torch.rand(k, generator=generator, device=p.device)
    n_accepted = int((u * q_drafts < p_drafts).cumprod(dim=0).sum())  # u < p/q without dividing
    if n_accepted < k:
        residual = (p[0, n_accepted] - q[0, n_accepted]).clamp(min=0)
        distribution = residual / residual.sum()
    else:
        distribution = p[0, k]
    next_token = torch.multinomial(distribution, 1, generator=generator).view(1, 1)
    return draft_tokens[:, :n_accepted], n_accepted, next_token
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_sampling", "locked": true, "points": 0, "schema_version": 3, "solution": false} specdec={"extra_credit": 5}
"""Extra credit: the first two sampled tokens follow the target's warped distribution (chi-square tests)."""
from specdec_kit import checks

checks.run_test("test_sampling", checks.check_sampling, SpeculativeSampler)
### BEGIN HIDDEN TESTS
from autograder import hidden

hidden.check_sampling(SpeculativeSampler)
### END HIDDEN TESTS

# %% tags=["demo"]
# Your sampler beside the target's own sampling and HF's speculative sampling (generate with an assistant and
# do_sample=True) on the sweep above, at temperature 1 (0.7 too on a GPU). Sampled text follows the target's
# distribution, not its greedy tokens, so speedups are over the target's own sampling at the same temperature.
# It runs once your sampler decodes the smallest pair and BONUS_SWEEPS is set (until then it says why and moves on).
from IPython.display import display

sampled = sweeps.bonus_compare({"SpeculativeSampler": SpeculativeSampler}, list(runners.SAMPLING_METHODS), sweep,
                               PAIR, DEVICE, BONUS_SWEEPS)
if sampled:
    figure = plot_bench(sampled)
    display(pd.DataFrame(sampled["summary"])[["method", "k", "temperature", "speedup", "acceptance_rate",
                                              "alpha"]].round(3))

# %% [markdown]
# ## Bonus: prompt lookup (extra credit)
#
# Text often repeats what came before: a summary quotes its source, code reuses its own names, a list
# repeats its pattern. Prompt lookup (Saxena, 2023; `generate(prompt_lookup_num_tokens=k)` in transformers)
# drafts without any draft model: it takes the text's last n tokens, finds an earlier place in the prompt or
# the text so far where the same n tokens occur, and proposes the (up to k) tokens that followed them there.
# The target checks them as in Part 1, so the output is still exactly its greedy output; drafts cost a search
# instead of k draft forwards, and where the text does not repeat the round proposes nothing and emits the
# target's one token.
#
# `lookup_drafts(ids, k, max_ngram_size)` tries n = max_ngram_size, then smaller n down to 1, and for the
# first n whose last n tokens occur earlier returns the up to k tokens after the latest earlier occurrence
# (HF takes the earliest one; both are correct). The last n tokens themselves are not an earlier occurrence:
# nothing follows them yet. With no match it returns `[]`. `PromptLookupDecoder` loads the target alone and
# keeps Part 2's loop, caches and rollback; `generate_draft_tokens` returns the looked-up tokens, shape
# (1, n) with n <= k (n = 0 when nothing matches). Example, max_ngram_size 3, k 2:
# `ids = [5, 6, 7, 8, 5, 6]`: `[8, 5, 6]` occurs nowhere earlier, `[5, 6]` does at index 0, so the drafts are
# `[7, 8]`.
#
# `test_lookup` (extra credit) checks the drafts on given sequences, the output against the target's
# greedy output, and the rounds on the kit's `scripted` pair against what lookup drafting must achieve there.


# %% nbgrader={"grade": false, "grade_id": "prompt_lookup_decoder", "locked": false, "schema_version": 3, "solution": true}
class PromptLookupDecoder(CachedSpeculativeDecoder):
    """Speculative decoding whose drafts are looked up in the text so far: no draft model."""

    def __init__(self, target_model_name: str, draft_model_name: str | None = None, device: str = "cuda",
                 dtype: torch.dtype | None = None, max_ngram_size: int = 3) -> None:
        """Load the target alone (draft_model_name is accepted, for the kit's benchmark, and ignored)."""
        self.device = resolve_device(device)
        self.dtype = dtype or default_dtype(self.device)
        self.target_model, self.target_tokenizer = self.initialize_target_model(target_model_name)
        self.draft_model = self.draft_tokenizer = None
        self.max_ngram_size = max_ngram_size
        self.reset_caches()

    @torch.inference_mode()
    def generate_draft_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                              num_speculative_tokens: int = 4) -> torch.Tensor:
        """Up to k drafts looked up in input_ids (1, L): shape (1, n), n <= k, on input_ids' device."""
        check_k(num_speculative_tokens)
        ### BEGIN SOLUTION
        drafts = lookup_drafts(input_ids[0].tolist(), num_speculative_tokens, self.max_ngram_size)
        return torch.tensor([drafts], dtype=input_ids.dtype, device=input_ids.device)  # [[]] is (1, 0)
        ### END SOLUTION


def lookup_drafts(ids: list[int], k: int, max_ngram_size: int = 3) -> list[int]:
    """The up to k tokens after the latest earlier occurrence of ids' last n tokens, for the largest n <=
    max_ngram_size that occurs earlier; [] if none does."""
    ### BEGIN SOLUTION
    for n in range(min(max_ngram_size, len(ids) - 1), 0, -1):
        tail = ids[-n:]
        for start in range(len(ids) - n - 1, -1, -1):  # latest first; start = len(ids) - n is the tail itself
            if ids[start:start + n] == tail:
                return ids[start + n:start + n + k]
    return []
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lookup", "locked": true, "points": 0, "schema_version": 3, "solution": false} specdec={"extra_credit": 3}
"""Extra credit: prompt lookup's drafts, its output against target greedy, and its rounds on the scripted pair."""
from specdec_kit import checks

checks.run_test("test_lookup", checks.check_lookup, PromptLookupDecoder)
### BEGIN HIDDEN TESTS
from autograder import hidden

hidden.check_lookup(PromptLookupDecoder)
### END HIDDEN TESTS

# %% tags=["demo"]
# Prompt lookup beside your model-drafted decoder and HF's prompt lookup, on the sweep above: the target's greedy
# tokens every time, with fewer target forwards per token where the text repeats. It runs once your decoder gives
# the target's tokens on the smallest pair and BONUS_SWEEPS is set (until then it says why and moves on).
from IPython.display import display

lookup = sweeps.bonus_compare({"CachedSpeculativeDecoder": CachedSpeculativeDecoder,
                               "PromptLookupDecoder": PromptLookupDecoder},
                              ["target_greedy", "cached", *runners.LOOKUP_METHODS], sweep, PAIR, DEVICE, BONUS_SWEEPS)
if lookup:
    figure = plot_bench(lookup)
    display(pd.DataFrame(lookup["summary"])[["method", "k", "speedup", "target_forwards_per_token",
                                             "acceptance_rate"]].round(3))

# %% [markdown]
# ## Bonus: adaptive k (extra credit)
#
# The best k depends on how often the draft agrees with the target and on what forwards cost, and both change:
# between texts, within one, between machines. Hugging Face's assisted generation adapts k by a fixed rule
# (`num_assistant_tokens_schedule="heuristic"`: +2 after a round that accepts every draft, -1 after a rejection)
# and stops drafting after a token the draft is unsure of (`assistant_confidence_threshold`).
# `AdaptiveSpeculativeDecoder` keeps the stop and, instead of the rule, picks before each round the k with the most
# expected tokens per second: Leviathan et al.'s choice of k, with the acceptance read off this decode's rounds
# and the prices of the forwards measured on this machine.
# - The counts: `reached[j - 1]` is how many counted rounds checked their j-th draft (drafts 1..j-1 were
#   accepted), `rejected[j - 1]` how many rejected it. Only the rounds right after a rejection are counted: they
#   start where the target has just corrected the draft, so all counted runs of accepted drafts are measured
#   from the same kind of point. The first round (where the prompt happens to end) and a round after a fully
#   accepted one start partway into a run.
# - `next_k(reached, rejected, costs, max_k)`: with prior weight w = 3 at rate r = 0.75 and
#   alpha = (sum(reached) - sum(rejected) + w r) / (sum(reached) + w), the j-th draft is rejected, given that
#   drafts 1..j-1 were accepted, with probability h_j = (rejected[j - 1] + w (1 - alpha)) / (reached[j - 1] + w).
#   A round of k drafts then yields 1 + sum over j <= k of (1 - h_1)...(1 - h_j) tokens on average and costs
#   `costs.round_seconds(k)` (k draft steps and a target forward on k + 1 tokens). Return the k in 1..max_k with
#   the most tokens per second, the smallest on a tie. After a counted round the decoder records it and asks
#   `next_k`; other rounds keep k.
# - The confidence stop, in `generate_draft_tokens`: drafting ends after a token to which the draft gives a
#   probability (softmax of its logits) below `confidence_threshold` (0.4, HF's default), since the drafts after
#   an unsure one are likely to be rejected.
#
# `num_speculative_tokens` is the first round's k. `costs` are measured when the decoder is built
# (`measure_forward_costs`: a few seconds; pass `forward_costs=` to give others): on a GPU a target forward on 17
# tokens costs about what one on 1 token does, on a CPU it does not, and that moves the best k. The class keeps
# Part 2's loop and caches: it passes the loop `max_k` as the largest k, so each round drafts up to min(self.k,
# the budget's room) tokens. `test_adaptive` (extra credit) checks the drafts of every round on the
# kit's `scripted` pair, where the draft is unsure after some tokens and wrong after others, with stated costs,
# and the output against the target's greedy output.


# %% nbgrader={"grade": false, "grade_id": "adaptive_speculative_decoder", "locked": false, "schema_version": 3, "solution": true}
class AdaptiveSpeculativeDecoder(CachedSpeculativeDecoder):
    """Speculative decoding with k chosen per round for the most expected tokens per second, and a stop on low
    draft confidence."""

    def __init__(self, *args, confidence_threshold: float = 0.4, max_k: int = 16,
                 forward_costs: ForwardCosts | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.confidence_threshold, self.max_k = confidence_threshold, max_k
        # Seconds of a draft step and of target forwards on 1..max_k + 1 tokens: measured here unless given.
        self.costs = forward_costs or measure_forward_costs(self.target_model, self.draft_model, max_k + 1)
        self.k = self.planned = None  # this round's k, and the drafts it planned (min(k, the budget's room))
        self.reached = self.rejected = self.counted = None  # the counts, and whether this round adds to them

    def speculative_decode(self, prompt: str, max_tokens: int = 100,
                           num_speculative_tokens: int = 4) -> DecodeResult:
        check_k(num_speculative_tokens)
        self.k = num_speculative_tokens  # the first round's; next_k gives the others
        self.reached, self.rejected, self.counted = [0] * self.max_k, [0] * self.max_k, False
        return super().speculative_decode(prompt, max_tokens, self.max_k)

    @torch.inference_mode()
    def generate_draft_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                              num_speculative_tokens: int = 4) -> torch.Tensor:
        """Part 2's cached greedy drafting of up to self.planned = min(self.k, num_speculative_tokens) tokens,
        ending after a token the draft gives probability below self.confidence_threshold: shape (1, n), n >= 1."""
        check_k(num_speculative_tokens)
        self.planned = min(self.k, num_speculative_tokens)
        ### BEGIN SOLUTION
        draft_cache, held = self.cached_prefix("draft", input_ids)
        step_ids, tokens = input_ids[:, held:], []
        for _ in range(self.planned):
            step = self.draft_model(input_ids=step_ids, **cache_kwargs(draft_cache), use_cache=True)
            draft_cache = cache_of(step)
            confidence, step_ids = step.logits[:, -1, :].float().softmax(dim=-1).max(dim=-1, keepdim=True)  # (1, 1)
            tokens.append(step_ids)
            if confidence.item() < self.confidence_threshold:  # a host sync: whether to go on depends on it
                break
        draft_tokens = torch.cat(tokens, dim=1)
        self.caches["draft"] = (draft_cache, torch.cat([input_ids, draft_tokens[:, :-1]], dim=1))
        return draft_tokens
        ### END SOLUTION

    def verify_tokens_vectorized(self, input_ids: torch.Tensor, draft_tokens: torch.Tensor,
                                 attention_mask: torch.Tensor) -> tuple[torch.Tensor, int, torch.Tensor]:
        """Part 2's verification; then, for a counted round, its counts and the next round's k from next_k. Whether
        the next round is counted: it follows a rejection. A round without drafts changes nothing."""
        accepted_tokens, n_accepted, next_token = super().verify_tokens_vectorized(input_ids, draft_tokens,
                                                                                   attention_mask)
        drafted = draft_tokens.shape[1]
        ### BEGIN SOLUTION
        if drafted:
            if self.counted:
                for j in range(min(n_accepted + 1, drafted)):
                    self.reached[j] += 1
                if n_accepted < drafted:
                    self.rejected[n_accepted] += 1
                self.k = next_k(self.reached, self.rejected, self.costs, self.max_k)
            self.counted = n_accepted < drafted
        ### END SOLUTION
        return accepted_tokens, n_accepted, next_token


def next_k(reached: list[int], rejected: list[int], costs: ForwardCosts, max_k: int) -> int:
    """The k in 1..max_k with the most expected tokens per second (the smallest on a tie), from the counts of
    accepted runs (prior: 3 drafts at acceptance 0.75) and costs.round_seconds(k)."""
    ### BEGIN SOLUTION
    weight, rate = 3.0, 0.75
    alpha = (sum(reached) - sum(rejected) + weight * rate) / (sum(reached) + weight)
    survival, tokens, best_k, best = 1.0, 1.0, 1, 0.0
    for j in range(1, max_k + 1):
        survival *= 1 - (rejected[j - 1] + weight * (1 - alpha)) / (reached[j - 1] + weight)
        tokens += survival
        if tokens / costs.round_seconds(j) > best:
            best_k, best = j, tokens / costs.round_seconds(j)
    return best_k
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_adaptive", "locked": true, "points": 0, "schema_version": 3, "solution": false} specdec={"extra_credit": 3}
"""Extra credit: adaptive k's drafts in every round on the scripted pair, and its output against target greedy."""
from specdec_kit import checks

checks.run_test("test_adaptive", checks.check_adaptive, AdaptiveSpeculativeDecoder)
### BEGIN HIDDEN TESTS
from autograder import hidden

hidden.check_adaptive(AdaptiveSpeculativeDecoder)
### END HIDDEN TESTS

# %% tags=["demo"]
# Adaptive k (first k 4) beside every fixed k of your cached decoder and HF's heuristic schedule, on the sweep above.
# It runs once your decoder gives the target's tokens on the smallest pair and BONUS_SWEEPS is set (until then it
# says why and moves on).
from IPython.display import display

adaptive = sweeps.bonus_compare({"CachedSpeculativeDecoder": CachedSpeculativeDecoder,
                                 "AdaptiveSpeculativeDecoder": AdaptiveSpeculativeDecoder},
                                ["target_greedy", "cached", *runners.ADAPTIVE_METHODS], sweep, PAIR, DEVICE,
                                BONUS_SWEEPS)
if adaptive:
    figure = plot_bench(adaptive)
    display(pd.DataFrame(adaptive["summary"])[["method", "k", "speedup", "target_forwards_per_token",
                                               "tokens_per_round"]].round(3))
