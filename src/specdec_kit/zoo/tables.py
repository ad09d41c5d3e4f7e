"""The zoo's logit tables: M[x, y] is a pair's logit of token y after token x, before any context term.

    script = draw_script(seed)                        # what the `scripted` pair does, for tests to predict it
    target_table, draft_table = scripted_tables(script)   # (V, V) each

- `scripted`: the greedy next token is a chosen function of the current token, so every round's acceptance is
  known before running (`Script`).
- `sampling`: the next token's distribution (not just its argmax) is a chosen function of the current token, so
  that speculative sampling has exact targets (`SamplingScript`).
- the other pairs: each token has two successors, on "tie" tokens with equal logits (`branching_tables`).

The zoo (`__init__.py`) draws the scripts with its pairs' seeds (`zoo.scripted_script`, `zoo.sampling_script`) and
builds models from the tables (`models.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerFast

from .models import rng
from .tokenizer import EOS_TOKEN, VOCAB_SIZE, build_tokenizer

BASE_LOGIT = 10.0  # table logit of a successor; every other token gets 0
GAP = 4.0  # table-logit lead of the first successor on tokens that are not ties


# ---------------------------------------------------------------------------------------------
# The scripted pair's script


@dataclass(frozen=True)
class Script:
    """What the `scripted` pair does, for tests to predict it.

    `target_next[x]` / `draft_next[x]` is each model's greedy next token after token x, whatever came
    before. `disagree` are the tokens after which the draft proposes something else, `flat` those after
    which the draft's distribution is nearly flat over `FLAT_WIDTH` tokens (its argmax is still right,
    by a margin of `FLAT_LEAD`), and `eos_chain` a path c0 -> c1 -> ... -> EOS outside the main cycle.
    Every token here encodes back to itself: `tokenizer.decode([t])` is a one-token prompt.
    """

    target_next: tuple[int, ...]
    draft_next: tuple[int, ...]
    cycle: tuple[int, ...]
    disagree: frozenset[int]
    flat: frozenset[int]
    eos_chain: tuple[int, ...]
    eos_id: int


FLAT_WIDTH = 4
FLAT_LEAD = 0.05
FLAT_LOGIT = 8.0


def draw_script(seed: int) -> Script:
    """The `scripted` pair's script, its tokens in the order a permutation seeded with `seed` gives."""
    tokenizer = build_tokenizer()
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    tokens = _round_trip_tokens(tokenizer)
    order = [tokens[i] for i in torch.randperm(len(tokens), generator=rng(seed))]
    eos_chain, cycle = tuple(order[:4]), tuple(order[4:])
    target_next = [cycle[0]] * VOCAB_SIZE  # tokens off the cycle (bytes, EOS) lead into it
    for i, x in enumerate(cycle):
        target_next[x] = cycle[(i + 1) % len(cycle)]
    for a, b in zip(eos_chain, eos_chain[1:] + (eos,)):
        target_next[a] = b
    draft_next = list(target_next)
    disagree = frozenset(cycle[2::5])
    for x in disagree:
        draft_next[x] = target_next[target_next[x]]  # a real token, just not the target's
    flat = frozenset(x for x in cycle[4::7] if x not in disagree)
    return Script(tuple(target_next), tuple(draft_next), cycle, disagree, flat, eos_chain, eos)


def _round_trip_tokens(tokenizer: PreTrainedTokenizerFast) -> list[int]:
    """Printable tokens t with encode(decode([t])) == [t]: usable as successors and as prompts."""
    out = []
    for t in range(VOCAB_SIZE):
        text = tokenizer.decode([t])
        if t != tokenizer.eos_token_id and text.isascii() and text.isprintable() and text.strip():
            if tokenizer.encode(text) == [t]:
                out.append(t)
    return out


def scripted_tables(script: Script) -> tuple[torch.Tensor, torch.Tensor]:
    target, draft = torch.zeros(VOCAB_SIZE, VOCAB_SIZE), torch.zeros(VOCAB_SIZE, VOCAB_SIZE)
    target[torch.arange(VOCAB_SIZE), torch.tensor(script.target_next)] = BASE_LOGIT
    draft[torch.arange(VOCAB_SIZE), torch.tensor(script.draft_next)] = BASE_LOGIT
    for x in sorted(script.flat):
        others = [y for y in script.cycle if y != script.target_next[x]][: FLAT_WIDTH - 1]
        draft[x, others] = FLAT_LOGIT
        draft[x, script.target_next[x]] = FLAT_LOGIT + FLAT_LEAD
    return target, draft


# ---------------------------------------------------------------------------------------------
# The sampling pair's script


@dataclass(frozen=True)
class SamplingScript:
    """What the `sampling` pair does: a two-step chain whose distributions are set, not just their argmax.

    After a token of `second` or any token outside the chain, the next token is one of `first`, with
    probabilities `target_first` under the target and `draft_first` under the draft; after a token of `first`,
    one of `second` (`target_second`, `draft_second`). The draft puts its mass elsewhere than the target at
    both steps, so a sampler that verifies greedily, skips the residual distribution or takes the bonus token
    from the draft moves the output's distribution far from the target's. The chain never reaches EOS.
    """

    first: tuple[int, ...]
    second: tuple[int, ...]
    target_first: tuple[float, ...] = (0.4, 0.6)
    draft_first: tuple[float, ...] = (0.95, 0.05)
    target_second: tuple[float, ...] = (0.6, 0.4)
    draft_second: tuple[float, ...] = (0.2, 0.8)


SAMPLING_LOGIT = 30.0  # table logit of a chosen token with probability 1: the other tokens' mass is ~1e-11


def draw_sampling_script(seed: int) -> SamplingScript:
    """The `sampling` pair's script, its tokens in the order a permutation seeded with `seed` gives."""
    tokens = _round_trip_tokens(build_tokenizer())
    order = [tokens[i] for i in torch.randperm(len(tokens), generator=rng(seed))]
    return SamplingScript(first=tuple(order[:2]), second=tuple(order[2:4]))


def sampling_tables(script: SamplingScript) -> tuple[torch.Tensor, torch.Tensor]:
    first, second = torch.tensor(script.first), torch.tensor(script.second)
    tables = []
    for probs_first, probs_second in [(script.target_first, script.target_second),
                                      (script.draft_first, script.draft_second)]:
        table = torch.zeros(VOCAB_SIZE, VOCAB_SIZE)
        table[:, first] = torch.tensor(probs_first).log() + SAMPLING_LOGIT
        table[first] = 0.0
        table[first.unsqueeze(1), second] = torch.tensor(probs_second).log() + SAMPLING_LOGIT
        tables.append(table)
    return tables[0], tables[1]


# ---------------------------------------------------------------------------------------------
# The context-dependent pairs' tables


def branching_tables(seed: int, tie_fraction: float,
                     tokenizer: PreTrainedTokenizerFast) -> tuple[torch.Tensor, torch.Tensor]:
    """Two successors per token: on tie tokens both get BASE_LOGIT, elsewhere the first leads by GAP.

    Non-tie tokens are put in a random order and each one's first successor is a tie token or a later
    non-tie token, so runs of non-tie tokens are finite: greedy text can never settle into a cycle the
    context has no say in, and ties come up about as often as `tie_fraction` says. Target and draft share
    the table (their context terms differ).
    """
    gen = rng(seed)
    successors = torch.tensor(_round_trip_tokens(tokenizer))
    successors = successors[torch.randperm(len(successors), generator=gen)]
    n_tie = round(tie_fraction * len(successors))
    ties, chain = successors[:n_tie], successors[n_tie:]  # `chain` in its (random) order
    table = torch.zeros(VOCAB_SIZE, VOCAB_SIZE)
    tie_set = set(ties.tolist())
    rank = {t: i for i, t in enumerate(chain.tolist())}
    for x in range(VOCAB_SIZE):
        if x in tie_set:
            first, second = successors[torch.randperm(len(successors), generator=gen)[:2]].tolist()
            table[x, first] = table[x, second] = BASE_LOGIT
            continue
        allowed = torch.cat([ties, chain[rank.get(x, -1) + 1:]])
        first = allowed[torch.randint(len(allowed), (1,), generator=gen)].item()
        others = successors[successors != first]
        second = others[torch.randint(len(others), (1,), generator=gen)].item()
        table[x, first] = BASE_LOGIT
        table[x, second] = BASE_LOGIT - GAP
    return table, table
