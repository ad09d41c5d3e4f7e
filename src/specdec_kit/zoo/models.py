"""A zoo model built from its logit table: a GPT-NeoX (Pythia architecture) with hand-set weights.

    model = build_model(Shape(384, 1, 6), table, tie_breaks=False, seed=11, eos_id=eos)   # table: (V, V)
    margin, agreement = check_on_prompts(target, draft, tokenizer)

Embeddings of the tokenizer's tokens are orthonormal (times sqrt(width)) and orthogonal to the all-ones vector, so
the final LayerNorm leaves them unchanged and an unembedding built from the table M gives logit(y | current token x)
= M[x, y] exactly. With `tie_breaks` the transformer blocks then add a context-dependent term that reaches the
logits through a few spare directions of the residual stream; without, every block is silenced. The zoo
(`__init__.py`) says which pair gets which table (`tables.py`) and shapes, and builds, checks and caches both models
of a pair.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

from .tokenizer import VOCAB_SIZE

SPARE_DIMS = 32  # residual directions that carry the context-dependent tie-breaks
TIE_SIGMA = 1.0  # standard deviation of a tie-break logit, calibrated on random contexts
# Every MLP is silenced. Pairs that are timed keep a real model's MLP width (4 x hidden), so their forwards cost
# what their shape says; the context-free pairs only serve checks, where a wide MLP that adds 0 is half the time.
SILENT_MLP_WIDTH = 4


@dataclass(frozen=True)
class Shape:
    """A GPT-NeoX model's size. `vocab` may exceed the tokenizer's, as Pythia's 50304 does."""

    hidden: int
    layers: int
    heads: int
    vocab: int = VOCAB_SIZE


def rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def build_model(shape: Shape, table: torch.Tensor, tie_breaks: bool, seed: int, eos_id: int) -> GPTNeoXForCausalLM:
    """A GPT-NeoX whose logits after token x are table[x] plus (if `tie_breaks`) a context term."""
    vocab = table.shape[0]
    spare = SPARE_DIMS if tie_breaks else 0
    if shape.hidden <= vocab + spare:
        raise ValueError(f"width {shape.hidden} must exceed the tokenizer's {vocab} tokens + {spare} spare dims")
    torch.manual_seed(seed)  # the blocks keep transformers' own random initialisation
    config = GPTNeoXConfig(
        vocab_size=shape.vocab, hidden_size=shape.hidden, num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, intermediate_size=4 * shape.hidden if tie_breaks else SILENT_MLP_WIDTH,
        max_position_embeddings=2048,
        bos_token_id=eos_id, eos_token_id=eos_id, tie_word_embeddings=False,
    )
    model = GPTNeoXForCausalLM(config).eval()
    gen = rng(seed)
    basis = _zero_mean_orthonormal(shape.hidden, vocab + spare, gen)  # (d, V + spare)
    words, spare_dirs = basis[:, :vocab], basis[:, vocab:]
    scale = math.sqrt(shape.hidden)
    with torch.no_grad():
        if not tie_breaks:  # silence every block: the residual stream is the current token's embedding
            for layer in model.base_model.layers:
                for proj in (layer.attention.dense, layer.mlp.dense_4h_to_h):
                    proj.weight.zero_()
                    proj.bias.zero_()
        model.get_input_embeddings().weight[:vocab] = words.T * scale  # LayerNorm(e_x) == e_x
        final_norm = model.base_model.final_layer_norm
        final_norm.weight.fill_(1.0)
        final_norm.bias.zero_()
        unembed = model.get_output_embeddings().weight  # (V_model, d); rows past the tokenizer stay 0
        unembed.zero_()
        unembed[:vocab] = table.T @ words.T / scale  # so that unembed[y] . e_x == table[x, y]
        if tie_breaks:
            _make_previous_token_head(model)
            unembed[:vocab] += _tie_break_rows(model, spare_dirs, vocab, gen)
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = eos_id
    return model


def _zero_mean_orthonormal(dim: int, count: int, gen: torch.Generator) -> torch.Tensor:
    """`count` orthonormal columns in R^dim, each orthogonal to the all-ones vector."""
    a = torch.randn(dim, count, generator=gen, dtype=torch.float64)
    a -= a.mean(dim=0, keepdim=True)
    q, _ = torch.linalg.qr(a)
    return q.float()


PREV_HEAD_QK = 18.0  # query/key size of the previous-token head: softmax puts ~all weight on offset 1
PREV_HEAD_VALUE = 4.0  # its values' scale against the other heads' near-uniform context averages


def _make_previous_token_head(model: GPTNeoXForCausalLM) -> None:
    """Turn head 0 of layer 0 into a previous-token head and silence the MLPs.

    Its query and key are constant (biases only); with rotary embeddings the score of key position n
    for query position m is then sum_i A^2 cos((m - n - 1) theta_i), largest at n = m - 1. The tie-break
    then depends on the previous token and on the other heads' averages over the context, so a stale
    or missing cache entry changes the output, and greedy text does not fall into a loop set by the
    current token alone.
    """
    attention = model.base_model.layers[0].attention
    head = attention.head_size
    rotary = next(m for m in model.modules() if hasattr(m, "inv_freq"))
    theta = rotary.inv_freq.float()  # (rotary_dims / 2,)
    half = len(theta)
    q_rows, k_rows, v_rows = slice(0, head), slice(head, 2 * head), slice(2 * head, 3 * head)  # head 0
    qkv = attention.query_key_value
    qkv.weight[q_rows] = 0
    qkv.weight[k_rows] = 0
    qkv.bias[: 3 * head] = 0
    qkv.bias[q_rows][:half] = PREV_HEAD_QK
    qkv.bias[k_rows][:half] = PREV_HEAD_QK * torch.cos(theta)
    qkv.bias[k_rows][half : 2 * half] = PREV_HEAD_QK * torch.sin(theta)
    qkv.weight[v_rows] *= PREV_HEAD_VALUE
    for layer in model.base_model.layers:
        layer.mlp.dense_4h_to_h.weight.zero_()
        layer.mlp.dense_4h_to_h.bias.zero_()


def _tie_break_rows(model: GPTNeoXForCausalLM, spare_dirs: torch.Tensor, vocab: int,
                    gen: torch.Generator) -> torch.Tensor:
    """Unembedding rows that read the blocks' output along the spare directions.

    Scaled so that a token's tie-break logit has standard deviation TIE_SIGMA over random contexts.
    """
    weights = torch.randn(vocab, spare_dirs.shape[1], generator=gen)  # (V, spare)
    contexts = torch.randint(0, vocab, (4, 64), generator=gen)
    hidden = model.base_model(contexts).last_hidden_state  # (4, 64, d), after the final LayerNorm
    logits = (hidden @ spare_dirs) @ weights.T  # (4, 64, V)
    return (TIE_SIGMA / logits.std()) * weights @ spare_dirs.T


def check_on_prompts(target, draft, tokenizer) -> tuple[float, float]:
    """Smallest top-1/top-2 gap of the target along its greedy continuation of every kit prompt,
    and the share of those positions where the draft's argmax equals the target's."""
    from ..core.prompts import load_prompts

    margins, agree, total = [], 0, 0
    with torch.inference_mode():
        for prompt in load_prompts():
            ids = tokenizer(prompt.text, return_tensors="pt").input_ids
            out = target.generate(ids, max_new_tokens=prompt.max_new_tokens, do_sample=False)
            positions = slice(ids.shape[1] - 1, out.shape[1] - 1)
            target_logits = target(out).logits[0, positions]
            top2 = target_logits.topk(2, dim=-1).values
            margins.append((top2[:, 0] - top2[:, 1]).min().item())
            draft_pred = draft(out).logits[0, positions].argmax(-1)
            agree += (draft_pred == target_logits.argmax(-1)).sum().item()
            total += draft_pred.numel()
    return min(margins), agree / total
