"""Checks of a student's decoder classes, called by the assignment's test cells (and the kit's tests).

    from specdec_kit import checks
    checks.check_draft_tokens(SpeculativeDecoder)      # raises CheckFailed with what to fix

Every check builds the decoder from offline zoo directories (so the student's own `initialize_*`
methods load the models), runs it on the CPU in fp32, and judges it by what it returns and by the
forward calls counted on its models, never by numbers the decoder reports about itself. The `scripted`
pair makes every round predictable (`predict_rounds`); `tiny` is context-dependent.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from functools import cache

import torch

from . import zoo
from .counting import ForwardRecorder
from .demo import first_difference, target_greedy
from .result import DecodeResult

PROMPTS = ("The future of Artificial Intelligence is", "Write the lyrics to the song 'Happy Birthday'.",
           "def fibonacci(n):\n")
K_VALUES = (1, 2, 4, 7)


class CheckFailed(AssertionError):
    """A check's verdict: what was expected, what came back, and where to look."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def set_threads() -> None:
    """Pin torch's CPU threads (default 2, or $SPECDEC_THREADS): unpinned threads crawl under load."""
    torch.set_num_threads(int(os.environ.get("SPECDEC_THREADS", "2")))


@cache
def _pair_dirs(pair: str) -> tuple[str, str]:
    return tuple(str(p) for p in zoo.materialize(pair))


def build(decoder_class: type, pair: str = "scripted"):
    """The student's class, constructed on the CPU from the zoo pair's directories."""
    set_threads()
    return decoder_class(*_pair_dirs(pair), device="cpu")


def prompt_for_token(decoder, token: int) -> str:
    """A one-token prompt: `scripted` tokens encode back to themselves."""
    return decoder.target_tokenizer.decode([token])


def predict_rounds(last_token: int, k: int, max_tokens: int) -> DecodeResult:
    """What correct greedy speculative decoding does on `scripted` after `last_token`.

    Each round proposes min(k, budget left - 1) draft tokens, accepts the prefix on which draft and
    target agree, adds the target's own token, and stops after EOS or at the budget.
    """
    script = zoo.scripted_script()
    tokens, proposed, accepted = [], [], []
    current = last_token
    while len(tokens) < max_tokens:
        k_round = min(k, max_tokens - len(tokens) - 1)
        drafts, token = [], current
        for _ in range(k_round):
            token = script.draft_next[token]
            drafts.append(token)
        n, token = 0, current
        while n < k_round and drafts[n] == script.target_next[token]:
            token = drafts[n]
            n += 1
        round_tokens = drafts[:n] + [script.target_next[token]]
        if script.eos_id in round_tokens:
            round_tokens = round_tokens[: round_tokens.index(script.eos_id) + 1]
        tokens += round_tokens
        proposed.append(k_round)
        accepted.append(min(n, len(round_tokens)))
        if round_tokens[-1] == script.eos_id:
            break
        current = round_tokens[-1]
    return DecodeResult("", tokens, proposed, accepted)


def draft_chain(start: int, k: int) -> list[int]:
    script = zoo.scripted_script()
    chain = [script.draft_next[start]]
    while len(chain) < k:
        chain.append(script.draft_next[chain[-1]])
    return chain


def _ids(tokens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor([tokens])
    return ids, torch.ones_like(ids)


# ---------------------------------------------------------------------------------------------
# Part 1: loading


def check_loading(decoder_class: type, pair: str = "tiny") -> None:
    decoder = build(decoder_class, pair)
    for role in ("target", "draft"):
        model, tokenizer = getattr(decoder, f"{role}_model", None), getattr(decoder, f"{role}_tokenizer", None)
        require(model is not None and tokenizer is not None,
                f"the decoder must keep self.{role}_model and self.{role}_tokenizer from initialize_{role}_model")
        require(not model.training, f"the {role} model is in training mode: call .eval() after loading it")
        require(tokenizer.pad_token is not None,
                f"the {role} tokenizer has no pad token (Pythia's has none): set it, e.g. to the EOS token")
        require(model.dtype == torch.float32,
                f"on the CPU the {role} model should be float32 (fp16 is for CUDA), got {model.dtype}")
    with tempfile.TemporaryDirectory() as tmp:
        other = os.path.join(tmp, "draft-with-another-vocabulary")
        shutil.copytree(_pair_dirs(pair)[1], other)
        tokenizer = type(decoder.draft_tokenizer).from_pretrained(other)
        tokenizer.add_tokens(["<not-in-the-target-vocabulary>"])
        tokenizer.save_pretrained(other)
        try:
            decoder_class(_pair_dirs(pair)[0], other, device="cpu")
        except NotImplementedError:
            raise
        except Exception:
            return
        raise CheckFailed("a draft whose tokenizer differs from the target's was accepted: compare the two "
                          "vocabularies in __init__ and raise a ValueError that names both models")


# ---------------------------------------------------------------------------------------------
# Part 2: drafting


def check_draft_tokens(decoder_class: type, starts: tuple[int, ...] | None = None,
                       k_values: tuple[int, ...] = K_VALUES) -> None:
    decoder = build(decoder_class)
    script = zoo.scripted_script()
    starts = starts or tuple(script.cycle[:8])
    for start in starts:
        for k in k_values:
            prefix = [script.eos_chain[0], start]  # two tokens: only new tokens may come back
            drafts = decoder.generate_draft_tokens(*_ids(prefix), k)
            require(isinstance(drafts, torch.Tensor) and tuple(drafts.shape) == (1, k),
                    f"generate_draft_tokens must return the k={k} new tokens as a tensor of shape [1, {k}], got "
                    f"{getattr(drafts, 'shape', type(drafts))} (the prompt must not be included)")
            expected = draft_chain(start, k)
            got = drafts[0].tolist()
            if got != expected:
                where = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
                flat = (start if where == 0 else expected[where - 1]) in script.flat
                raise CheckFailed(
                    f"draft token {where} is {got[where]}, expected the draft model's greedy choice "
                    f"{expected[where]} (k={k}). "
                    + ("Here the draft's distribution is nearly flat: take the argmax, do not sample."
                       if flat else "Feed each new token back in and take the argmax of the last position.")
                )


# ---------------------------------------------------------------------------------------------
# Part 3: verification


def _verify(decoder, prefix: list[int], drafts: list[int]):
    ids, mask = _ids(prefix)
    with ForwardRecorder(decoder.target_model) as calls:
        out = decoder.verify_tokens_vectorized(ids, torch.tensor([drafts]), mask)
    require(isinstance(out, tuple) and len(out) == 3,
            "verify_tokens_vectorized must return (accepted_tokens, accepted_position, next_token)")
    require(len(calls) == 1, f"verification made {len(calls)} target forward passes: score the prompt and all "
                             "drafts with exactly one, which also gives the correction and bonus tokens")
    accepted, position, next_token = out
    return accepted, int(position), next_token


def check_verify_alignment(decoder_class: type, starts: tuple[int, ...] | None = None,
                           k_values: tuple[int, ...] = (2, 4, 6)) -> None:
    decoder = build(decoder_class)
    script = zoo.scripted_script()
    for start in starts or tuple(script.cycle[:10]):
        for k in k_values:
            drafts = draft_chain(start, k)
            expected = predict_rounds(start, k, k + 1).accepted[0]
            _, position, _ = _verify(decoder, [script.eos_chain[0], start], drafts)
            require(position == expected,
                    f"with drafts {drafts} after token {start}, the first rejected draft is at index {expected}, "
                    f"your verifier said {position}. The target's prediction for draft token i is the logit at "
                    f"position L-1+i (L = length before the draft); comparing position L+i is the off-by-one.")


def check_correction_and_bonus(decoder_class: type) -> None:
    decoder = build(decoder_class)
    script = zoo.scripted_script()
    x = next(t for t in script.cycle if t in script.disagree)
    accepted, position, next_token = _verify(decoder, [x], [script.draft_next[x]])
    require(position == 0 and accepted.shape[-1] == 0, "a draft the target would not produce must be rejected")
    require(next_token.reshape(-1).tolist() == [script.target_next[x]],
            f"after a rejection next_token must be the target's own token {script.target_next[x]} (the "
            f"correction), read from the same forward pass; got {next_token.reshape(-1).tolist()}")
    start = script.eos_chain[0]
    chain = [script.target_next[start], script.target_next[script.target_next[start]]]
    accepted, position, next_token = _verify(decoder, [start], chain)
    require(position == 2 and accepted.reshape(-1).tolist() == chain, "drafts the target agrees with are accepted")
    require(next_token.reshape(-1).tolist() == [script.target_next[chain[-1]]],
            "when every draft is accepted, next_token is the bonus token: the target's argmax after the last "
            "draft, from the same forward pass")


# ---------------------------------------------------------------------------------------------
# Part 4: the decoding loop


def check_exact(decoder_class: type, pair: str = "tiny", prompts: tuple[str, ...] = PROMPTS,
                k_values: tuple[int, ...] = K_VALUES, max_tokens: int = 30) -> None:
    decoder = build(decoder_class, pair)
    for prompt in prompts:
        ids = decoder.target_tokenizer(prompt, return_tensors="pt").input_ids
        expected = target_greedy(decoder.target_model, ids, max_tokens)
        for k in k_values:
            result = decoder.speculative_decode(prompt, max_tokens, k)
            require(isinstance(result, DecodeResult), "speculative_decode must return a specdec_kit.DecodeResult")
            where = first_difference(result.token_ids, expected)
            require(result.token_ids == expected,
                    f"k={k}, prompt {prompt!r}: greedy speculative output must equal the target's own greedy output; "
                    f"first difference at new token {where} (got {result.token_ids[where:where + 3]}, expected "
                    f"{expected[where:where + 3]}). Check the acceptance rule and what you append each round.")


def check_eos_and_budget(decoder_class: type) -> None:
    decoder = build(decoder_class)
    script = zoo.scripted_script()
    cases = [(script.eos_chain[0], 5, 50, "EOS inside an accepted draft"),
             (script.eos_chain[0], 3, 50, "EOS as the bonus token"),
             (script.cycle[3], 4, 6, "a budget that ends mid-draft"),
             (script.cycle[5], 8, 3, "k larger than the budget left"),
             (script.cycle[7], 4, 1, "max_tokens = 1")]
    for start, k, max_tokens, label in cases:
        expected = predict_rounds(start, k, max_tokens)
        got = decoder.speculative_decode(prompt_for_token(decoder, start), max_tokens, k)
        require(got.token_ids == expected.token_ids,
                f"{label} (k={k}, max_tokens={max_tokens}): expected tokens {expected.token_ids}, got "
                f"{got.token_ids}. Emit EOS and nothing after it, and never more than max_tokens new tokens.")
    prompt = decoder.target_tokenizer.eos_token + prompt_for_token(decoder, script.cycle[0])
    got = decoder.speculative_decode(prompt, 10, 4)
    require(len(got.token_ids) == 10, "an EOS inside the prompt must not stop decoding; only a generated EOS does")


def check_counts(decoder_class: type, starts: tuple[int, ...] | None = None, k: int = 4) -> None:
    decoder = build(decoder_class)
    script = zoo.scripted_script()
    for start in starts or tuple(script.cycle[10:16]):
        expected = predict_rounds(start, k, 24)
        with ForwardRecorder(decoder.target_model) as calls:
            got = decoder.speculative_decode(prompt_for_token(decoder, start), 24, k)
        require(len(calls) == expected.rounds,
                f"{len(calls)} target forward passes for a decode that takes {expected.rounds} rounds: one per "
                "round, whose logits give the acceptance, the correction and the bonus token")
        require(got.proposed == expected.proposed and got.accepted == expected.accepted,
                f"per-round counts should be proposed {expected.proposed}, accepted {expected.accepted}; the "
                f"decoder reported proposed {got.proposed}, accepted {got.accepted}. Count accepted drafts only "
                "(not the bonus or correction token) and propose no more drafts than the budget leaves room for.")


# ---------------------------------------------------------------------------------------------
# Part 5: the cached decoder


def check_cache_use(decoder_class: type, starts: tuple[int, ...] | None = None, k: int = 4,
                    max_tokens: int = 30) -> None:
    """After the prefill no forward re-sends the prefix, and the caches are cropped after a rejection.

    Runs on `scripted`, where the true length of the text at every round is known from the script.
    """
    decoder = build(decoder_class)
    script = zoo.scripted_script()
    for start in starts or tuple(script.cycle[20:24]):
        expected = predict_rounds(start, k, max_tokens)
        with ForwardRecorder(decoder.target_model) as target_calls, \
                ForwardRecorder(decoder.draft_model) as draft_calls:
            result = decoder.speculative_decode(prompt_for_token(decoder, start), max_tokens, k)
        require(result.token_ids == expected.token_ids, "the cached decoder must produce the target's greedy tokens")
        lengths = [1]  # a one-token prompt
        for accepted in expected.accepted:
            lengths.append(lengths[-1] + accepted + 1)
        sent = [c.new_tokens for c in target_calls]
        require(len(target_calls) == expected.rounds and max(sent[1:], default=0) <= k + 1,
                f"target forwards fed {sent} tokens: after the prefill each round should feed only the last token "
                f"and the k={k} drafts, on a KV cache kept across rounds")
        for i, call in enumerate(target_calls[1:], start=1):
            require(call.cached_tokens == lengths[i] - 1,
                    f"round {i}: the target's cache held {call.cached_tokens} positions where {lengths[i] - 1} are "
                    "still part of the text: crop the cache (specdec_kit.crop_to) to drop rejected drafts")
        draft_sent = [c.new_tokens for c in draft_calls]
        require(max(draft_sent[1:], default=0) <= 2,
                f"draft forwards fed {draft_sent} tokens: after the prefill the draft needs one new token per step "
                "(two right after a fully accepted round)")
