"""`specdec-kit demo`: a notebook's cached decoder against the target's own greedy decoding, per prompt.

    specdec-kit demo                      # default pair for this machine, the solution notebook
    specdec-kit demo --pair tiny --k 3    # any pair; --notebook PATH for a submission

Each prompt is decoded by `target.generate(do_sample=False)` and by the notebook's
`CachedSpeculativeDecoder`, alternately, after one warm-up of each; the table gives both speeds, the
speedup, the acceptance rate and whether the tokens are identical. In fp16 a correct decoder may
differ after a near-tie: such a row says so and gives the target's logit margin there.
"""

from __future__ import annotations

import pandas as pd
from tqdm.auto import tqdm

from ..core.prompts import Prompt
from ..core.timing import timed
from ..models.baseline import first_mismatch, target_greedy


def run_demo(decoder, prompts: list[Prompt], k: int) -> pd.DataFrame:
    """One row per prompt: target greedy and the decoder, timed alternately on the same models."""
    device = decoder.target_model.device
    warm = decoder.target_tokenizer(prompts[0].text, return_tensors="pt").input_ids.to(device)
    target_greedy(decoder.target_model, warm, 8)
    decoder.speculative_decode(prompts[0].text, 8, k)
    rows = []
    for prompt in tqdm(prompts, desc="demo", unit="prompt"):  # on stderr: the table stays clean
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
