"""`specdec-kit demo`: a notebook's cached decoder against the target's own greedy decoding, per prompt.

    specdec-kit demo                      # default pair for this machine, the solution notebook
    specdec-kit demo --pair tiny --k 3    # any pair; --notebook PATH for a submission

Each prompt is decoded by `target.generate(do_sample=False)` and by the notebook's
`CachedSpeculativeDecoder`, alternately, after one warm-up of each; the table gives both speeds, the
speedup, the acceptance rate and whether the tokens are identical. In fp16 a correct decoder may
differ after a near-tie: such a row says so and gives the target's logit margin there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd
import torch

from .prompts import Prompt


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so that a timer read afterwards covers it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn, *args):
    """(fn(*args), wall seconds), with the device synchronised on both sides."""
    synchronize(device)
    start = time.perf_counter()
    out = fn(*args)
    synchronize(device)
    return out, time.perf_counter() - start


@dataclass(frozen=True)
class Mismatch:
    position: int  # index among the new tokens
    margin: float  # the target's top-1 minus top-2 logit there, computed over the reference prefix


def first_difference(got: list[int], expected: list[int]) -> int:
    """Index of the first token where `got` leaves `expected` (the shorter length if one is a prefix)."""
    return next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))


def first_mismatch(model, prompt_ids: torch.Tensor, expected: list[int], got: list[int]) -> Mismatch | None:
    """Where `got` leaves `expected` (None if identical), with the target's logit margin at that point."""
    if got == expected:
        return None
    position = first_difference(got, expected)
    prefix = torch.tensor([expected[:position]], device=prompt_ids.device, dtype=prompt_ids.dtype)
    with torch.inference_mode():
        logits = model(torch.cat([prompt_ids, prefix], dim=1)).logits[0, -1].float()
    top2 = logits.topk(2).values
    return Mismatch(position, float(top2[0] - top2[1]))


def target_greedy(model, input_ids: torch.Tensor, max_new_tokens: int) -> list[int]:
    out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_new_tokens,
                         do_sample=False)
    return out[0, input_ids.shape[1]:].tolist()


def run_demo(decoder, prompts: list[Prompt], k: int) -> pd.DataFrame:
    """One row per prompt: target greedy and the decoder, timed alternately on the same models."""
    device = decoder.target_model.device
    warm = decoder.target_tokenizer(prompts[0].text, return_tensors="pt").input_ids.to(device)
    target_greedy(decoder.target_model, warm, 8)
    decoder.speculative_decode(prompts[0].text, 8, k)
    rows = []
    for prompt in prompts:
        ids = decoder.target_tokenizer(prompt.text, return_tensors="pt").input_ids.to(device)
        expected, base_s = timed(device, target_greedy, decoder.target_model, ids, prompt.max_new_tokens)
        result, spec_s = timed(device, decoder.speculative_decode, prompt.text, prompt.max_new_tokens, k)
        mismatch = first_mismatch(decoder.target_model, ids, expected, result.token_ids)
        rows.append({
            "prompt": prompt.id,
            "new_tokens": len(result.token_ids),
            "target_tok_s": len(expected) / base_s,
            "decoder_tok_s": len(result.token_ids) / spec_s,
            "speedup": (len(result.token_ids) / spec_s) / (len(expected) / base_s),
            "acceptance": result.acceptance_rate,
            "identical": "yes" if mismatch is None else "no",
            "note": "" if mismatch is None else
                    f"first differs at token {mismatch.position}, target margin {mismatch.margin:.2g}",
        })
    return pd.DataFrame(rows)
