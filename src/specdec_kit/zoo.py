"""The offline model zoo: draft/target pairs built in code, no download.

    from specdec_kit import zoo
    target_dir, draft_dir = zoo.materialize("tiny")      # local directories, built once and cached
    AutoModelForCausalLM.from_pretrained(target_dir)    # loads offline, like a hub model

Every pair is a GPT-NeoX (Pythia architecture) model with hand-set weights. Embeddings of the
tokenizer's tokens are orthonormal (times sqrt(width)) and orthogonal to the all-ones vector, so the
final LayerNorm leaves them unchanged and an unembedding built from a chosen logit table M gives
logit(y | current token x) = M[x, y] exactly. The transformer blocks then add a context-dependent term
that reaches the logits through a few spare directions of the residual stream ("tie-breaks"):

- `scripted`: blocks silenced, so the greedy next token is a chosen function of the current token and
  every round's acceptance is known before running (see `scripted_script`).
- `sampling`: blocks silenced, and the next token's distribution (not just its argmax) is a chosen
  function of the current token, so that speculative sampling has exact targets (see `sampling_script`).
- `tiny`, `synthetic-small`, `synthetic-pythia`: each token has two successors; on "tie" tokens the
  two have equal table logits and the model's own context term picks one, so target and draft (with
  different random blocks) agree there about half the time. The tie fraction is the acceptance knob.

Pairs are built into `cache_root()` (keyed by the transformers major version) atomically and under
a file lock, so parallel graders can call `materialize` at once.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import torch
import transformers
from filelock import FileLock
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

from . import settings
from .tokenizer import EOS_TOKEN, VOCAB_SIZE, build_tokenizer

log = logging.getLogger(__name__)

ZOO_VERSION = 2  # 2: the context-free pairs' silenced MLPs are narrow (same logits, half the forward)
ZOO_PREFIX = "zoo:"
BASE_LOGIT = 10.0  # table logit of a successor; every other token gets 0
GAP = 4.0  # table-logit lead of the first successor on tokens that are not ties
SPARE_DIMS = 32  # residual directions that carry the context-dependent tie-breaks
TIE_SIGMA = 1.0  # standard deviation of a tie-break logit, calibrated on random contexts
MIN_MARGIN = 1e-3  # smallest top-1/top-2 logit gap allowed on the kit's prompts (fp32 noise is ~1e-6)
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


@dataclass(frozen=True)
class PairSpec:
    name: str
    description: str
    target: Shape
    draft: Shape
    tie_fraction: float  # share of tokens whose successor the context decides (0: context-free tables)
    seed: int
    tables: str = "branching"  # the logit tables: "branching", "scripted" or "sampling"
    save_dtype: str = "float32"
    check_prompts: bool = True  # run both models over the kit's prompts at build time (too slow on a CPU for 1.4B)


PAIRS = {
    spec.name: spec
    for spec in [
        PairSpec("scripted", "context-free; acceptance of every round known in advance",
                 Shape(384, 1, 6), Shape(384, 1, 6), tie_fraction=0.0, seed=11, tables="scripted"),
        PairSpec("sampling", "context-free; target and draft distributions set, for speculative sampling",
                 Shape(384, 1, 6), Shape(384, 1, 6), tie_fraction=0.0, seed=61, tables="sampling",
                 check_prompts=False),
        PairSpec("tiny", "small and context-dependent; acceptance about 70%",
                 Shape(448, 3, 7), Shape(384, 1, 6), tie_fraction=0.4, seed=21),
        PairSpec("tiny-b", "a second tiny pair (other seed, other shapes) for hidden checks",
                 Shape(512, 2, 8), Shape(384, 1, 6), tie_fraction=0.5, seed=51),
        PairSpec("synthetic-small", "CPU benchmark; draft about a tenth of the target's cost",
                 Shape(1024, 8, 16), Shape(384, 2, 6), tie_fraction=0.12, seed=31),
        PairSpec("synthetic-pythia", "pythia-1.4b and pythia-160m shapes, for a GPU",
                 Shape(2048, 24, 16, 50304), Shape(768, 12, 12, 50304), tie_fraction=0.12, seed=41,
                 save_dtype="float16", check_prompts=False),
    ]
}


CHECK_PAIRS = ("tiny", "scripted", "sampling")  # what the notebook's test cells decode on


def pair_names() -> list[str]:
    return list(PAIRS)


def get_pair(name: str) -> PairSpec:
    """The pair called `name` (with or without the `zoo:` prefix); a ValueError lists the others."""
    key = name.removeprefix(ZOO_PREFIX)
    if key not in PAIRS:
        raise ValueError(f"unknown zoo pair {name!r}; the zoo has: {', '.join(PAIRS)}")
    return PAIRS[key]


def cache_root() -> Path:
    """Where built pairs live: $SPECDEC_KIT_CACHE (default ~/.cache/specdec-kit)/zoo/transformers<major>.

    Keyed by the transformers major version, so a 4.x environment never loads files a 5.x one wrote.
    """
    return settings.cache_dir() / "zoo" / f"transformers{transformers.__version__.split('.')[0]}"


def materialize(pair: str) -> tuple[Path, Path]:
    """Build `pair` once into the cache and return `(target_dir, draft_dir)`, each loadable offline."""
    spec = get_pair(pair)
    root = cache_root() / f"{spec.name}-v{ZOO_VERSION}"
    if not root.is_dir():
        root.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{root}.lock"):
            if not root.is_dir():  # another process may have built it while we waited
                # Said on stderr, where a notebook shows it at once: a first build takes a while.
                print(f"building the offline pair {spec.name!r} into {root} (once per machine)...",
                      file=sys.stderr, flush=True)
                started = time.perf_counter()
                _build_atomically(spec, root)
                print(f"built {spec.name!r} in {time.perf_counter() - started:.0f} s; later runs load it from there",
                      file=sys.stderr, flush=True)
    return root / "target", root / "draft"


def materialize_all(pairs) -> None:
    """Build each of `pairs` that is a zoo pair and not in the cache yet (a hub model is skipped), each saying so and
    how long it took: what a notebook's first run on a machine does up front. While grading, the grader's pairs are
    built already."""
    if settings.grading():
        return
    for pair in dict.fromkeys(pairs):
        if pair.removeprefix(ZOO_PREFIX) in PAIRS:
            materialize(pair)


def pair_info(pair: str) -> dict:
    """The build record of a materialised pair: its spec and the acceptance measured at build time."""
    target_dir, _ = materialize(pair)
    return json.loads((target_dir.parent / "zoo.json").read_text())


def _build_atomically(spec: PairSpec, root: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=root.parent))
    try:
        record = build_pair(spec, tmp)
        (tmp / "zoo.json").write_text(json.dumps(record, indent=2) + "\n")
        os.rename(tmp, root)  # atomic on one file system: readers see all of it or none
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("zoo: built %s in %s", spec.name, root)


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


@lru_cache(maxsize=1)
def scripted_script() -> Script:
    tokenizer = build_tokenizer()
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    tokens = _round_trip_tokens(tokenizer)
    order = [tokens[i] for i in torch.randperm(len(tokens), generator=_rng(PAIRS["scripted"].seed))]
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


def _scripted_tables() -> tuple[torch.Tensor, torch.Tensor]:
    script = scripted_script()
    target, draft = torch.zeros(VOCAB_SIZE, VOCAB_SIZE), torch.zeros(VOCAB_SIZE, VOCAB_SIZE)
    target[torch.arange(VOCAB_SIZE), torch.tensor(script.target_next)] = BASE_LOGIT
    draft[torch.arange(VOCAB_SIZE), torch.tensor(script.draft_next)] = BASE_LOGIT
    for x in sorted(script.flat):
        others = [y for y in script.cycle if y != script.target_next[x]][: FLAT_WIDTH - 1]
        draft[x, others] = FLAT_LOGIT
        draft[x, script.target_next[x]] = FLAT_LOGIT + FLAT_LEAD
    return target, draft


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


@lru_cache(maxsize=1)
def sampling_script() -> SamplingScript:
    tokens = _round_trip_tokens(build_tokenizer())
    order = [tokens[i] for i in torch.randperm(len(tokens), generator=_rng(PAIRS["sampling"].seed))]
    return SamplingScript(first=tuple(order[:2]), second=tuple(order[2:4]))


def _sampling_tables() -> tuple[torch.Tensor, torch.Tensor]:
    script = sampling_script()
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


def _branching_table(spec: PairSpec, tokenizer: PreTrainedTokenizerFast) -> tuple[torch.Tensor, torch.Tensor]:
    """Two successors per token: on tie tokens both get BASE_LOGIT, elsewhere the first leads by GAP.

    Non-tie tokens are put in a random order and each one's first successor is a tie token or a later
    non-tie token, so runs of non-tie tokens are finite: greedy text can never settle into a cycle the
    context has no say in, and ties come up about as often as `tie_fraction` says.
    """
    gen = _rng(spec.seed)
    successors = torch.tensor(_round_trip_tokens(tokenizer))
    successors = successors[torch.randperm(len(successors), generator=gen)]
    n_tie = round(spec.tie_fraction * len(successors))
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


# ---------------------------------------------------------------------------------------------
# Building models


def _rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def build_pair(spec: PairSpec, out_dir: Path, max_tries: int = 20) -> dict:
    """Build and save both models of `spec` with the kit's tokenizer; return the build record.

    Pairs are rebuilt with the next seed until the target's greedy continuation of every prompt in the
    kit's prompt set (to its max_new_tokens) has a top-1/top-2 margin of at least MIN_MARGIN, so that
    correct decoders never meet a near-tie on them; the record gives the draft's agreement there.
    """
    tokenizer = build_tokenizer()
    for attempt in range(max_tries):
        seed = spec.seed + 1000 * attempt
        if spec.tables == "scripted":
            target_table, draft_table = _scripted_tables()
        elif spec.tables == "sampling":
            target_table, draft_table = _sampling_tables()
        else:
            target_table, draft_table = _branching_table(spec, tokenizer)
        target = _build_model(spec.target, target_table, spec.tie_fraction > 0, seed, tokenizer.eos_token_id)
        draft = _build_model(spec.draft, draft_table, spec.tie_fraction > 0, seed + 1, tokenizer.eos_token_id)
        if not spec.check_prompts:
            margin = agreement = None
            break
        margin, agreement = _check_on_prompts(target, draft, tokenizer)
        if margin >= MIN_MARGIN:
            break
        log.info("zoo: %s seed %d has a near-tie (margin %.2g); trying the next seed", spec.name, seed, margin)
    else:
        raise RuntimeError(f"zoo: no seed of {spec.name} gave a margin of {MIN_MARGIN} in {max_tries} tries")
    dtype = getattr(torch, spec.save_dtype)
    for model, name in [(target, "target"), (draft, "draft")]:
        model.to(dtype).save_pretrained(out_dir / name)
        tokenizer.save_pretrained(out_dir / name)
    return {"pair": spec.name, "zoo_version": ZOO_VERSION, "seed": seed, "min_margin": margin,
            "agreement": agreement, "transformers": transformers.__version__, "spec": asdict(spec)}


def _build_model(shape: Shape, table: torch.Tensor, tie_breaks: bool, seed: int, eos_id: int) -> GPTNeoXForCausalLM:
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
    gen = _rng(seed)
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


def _check_on_prompts(target, draft, tokenizer) -> tuple[float, float]:
    """Smallest top-1/top-2 gap of the target along its greedy continuation of every kit prompt,
    and the share of those positions where the draft's argmax equals the target's."""
    from .prompts import load_prompts

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
