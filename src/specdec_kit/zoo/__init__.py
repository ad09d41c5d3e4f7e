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

The tables are in `tables.py`, the models built from them in `models.py`; this module names the pairs,
builds both models of one and caches them. Pairs are built into `cache_root()` (keyed by the transformers major
version) atomically and under a file lock, so parallel graders can call `materialize` at once.
"""

from __future__ import annotations

import json
import logging
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

from ..core import settings
from .models import Shape, build_model, check_on_prompts
from .tables import (
    SamplingScript,
    Script,
    branching_tables,
    draw_sampling_script,
    draw_script,
    sampling_tables,
    scripted_tables,
)
from .tokenizer import build_tokenizer

log = logging.getLogger(__name__)

ZOO_VERSION = 2  # 2: the context-free pairs' silenced MLPs are narrow (same logits, half the forward)
ZOO_PREFIX = "zoo:"
MIN_MARGIN = 1e-3  # smallest top-1/top-2 logit gap allowed on the kit's prompts (fp32 noise is ~1e-6)


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


@lru_cache(maxsize=1)
def scripted_script() -> Script:
    """What the `scripted` pair does (see `Script`): drawn with its seed, as its tables are."""
    return draw_script(PAIRS["scripted"].seed)


@lru_cache(maxsize=1)
def sampling_script() -> SamplingScript:
    """What the `sampling` pair does (see `SamplingScript`): drawn with its seed, as its tables are."""
    return draw_sampling_script(PAIRS["sampling"].seed)


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
# Building a pair


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
            target_table, draft_table = scripted_tables(scripted_script())
        elif spec.tables == "sampling":
            target_table, draft_table = sampling_tables(sampling_script())
        else:
            target_table, draft_table = branching_tables(spec.seed, spec.tie_fraction, tokenizer)
        target = build_model(spec.target, target_table, spec.tie_fraction > 0, seed, tokenizer.eos_token_id)
        draft = build_model(spec.draft, draft_table, spec.tie_fraction > 0, seed + 1, tokenizer.eos_token_id)
        if not spec.check_prompts:
            margin = agreement = None
            break
        margin, agreement = check_on_prompts(target, draft, tokenizer)
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
