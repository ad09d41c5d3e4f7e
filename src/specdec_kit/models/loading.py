"""Loading draft/target models by name: hub ids, local directories, `.gguf` files and `zoo:` pairs.

    from specdec_kit.models.loading import load_model, resolve_pair
    target_name, draft_name = resolve_pair("tiny")          # or "pythia", "gpt2", "zoo:tiny"
    model, tokenizer = load_model(target_name, device="cpu")

Names a model can have:
- `zoo:<pair>/target`, `zoo:<pair>/draft`: a model of the offline zoo, built on first use;
- a local directory written by `save_pretrained`;
- a `.gguf` file (transformers' GGUF loading; needs the `gguf` package);
- a Hugging Face hub id such as `EleutherAI/pythia-1.4b-deduped`. When the hub cannot be reached, a
  model already in the local hub cache still loads; anything else fails at once with what to do.
"""

from __future__ import annotations

import logging
import os
import socket
from functools import cache, lru_cache
from pathlib import Path
from urllib.parse import urlparse

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

from .. import zoo
from ..core import settings

log = logging.getLogger(__name__)

DEFAULT_TARGET = "EleutherAI/pythia-1.4b-deduped"
DEFAULT_DRAFT = "EleutherAI/pythia-160m-deduped"
HUB_PAIRS = {"pythia": (DEFAULT_TARGET, DEFAULT_DRAFT), "gpt2": ("gpt2-large", "gpt2")}
ROLES = ("target", "draft")


class ModelNotFoundError(OSError):
    """A model name that names nothing loadable here, with what to do instead."""


def resolve_device(device: str | torch.device) -> torch.device:
    """`device` as a torch.device; a CUDA request without a GPU falls back to the CPU, with a warning."""
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        log.warning("CUDA was requested but no GPU is visible; running on the CPU "
                    "(on Colab: Runtime > Change runtime type > GPU)")
        return torch.device("cpu")
    return device


def default_dtype(device: str | torch.device) -> torch.dtype:
    """fp16 on CUDA (Colab's T4 has no fast bf16), fp32 elsewhere."""
    return torch.float16 if torch.device(device).type == "cuda" else torch.float32


@lru_cache(maxsize=1)
def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the Hugging Face hub answers, decided in at most `timeout` seconds and never retried."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in {"1", "true", "yes"}:
        return False
    from huggingface_hub import constants

    host = urlparse(constants.ENDPOINT).hostname
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError:
        return False
    return True


def resolve_pair(pair: str) -> tuple[str, str]:
    """(target_name, draft_name) for a pair: `pythia`, `gpt2`, or a zoo pair (`tiny` or `zoo:tiny`)."""
    if pair in HUB_PAIRS:
        return HUB_PAIRS[pair]
    try:
        spec = zoo.get_pair(pair)
    except ValueError:  # zoo's message names only the zoo's pairs; name the hub pairs too
        raise ValueError(f"unknown pair {pair!r}; known pairs: {', '.join(known_pairs())}") from None
    return tuple(f"{zoo.ZOO_PREFIX}{spec.name}/{role}" for role in ROLES)


def known_pairs() -> list[str]:
    return [*HUB_PAIRS, *zoo.pair_names()]


def default_pair(device: str | torch.device, timing: bool = False) -> str:
    """The pair to run: Pythia on a GPU with the hub, else an offline pair, saying why.

    While grading (SPECDEC_GRADING=1) `tiny`, so that a notebook's demo cells take seconds, unless the
    pair is for `timing` (test_speedup): that needs a pair of realistic sizes, offline when grading.
    """
    if settings.grading() and not timing:
        _say_once("grading: using the offline pair tiny")
        return "tiny"
    if torch.device(device).type != "cuda":
        _say_once("no GPU: using the offline pair synthetic-small")
        return "synthetic-small"
    if settings.grading():
        _say_once("grading: using the offline pair synthetic-pythia")
        return "synthetic-pythia"
    if not hub_reachable():
        _say_once("the Hugging Face hub cannot be reached: using the offline pair synthetic-pythia")
        return "synthetic-pythia"
    return "pythia"


@cache
def _say_once(message: str) -> None:
    """Log why a pair was picked once per process (a grader picks it again for every submission)."""
    log.info(message)


def model_source(name: str) -> tuple[str, dict]:
    """Where `from_pretrained` should look for `name`: (path or hub id, extra from_pretrained kwargs)."""
    if name.startswith(zoo.ZOO_PREFIX):
        pair, _, role = name.removeprefix(zoo.ZOO_PREFIX).partition("/")
        if role not in ROLES:
            raise ModelNotFoundError(f"{name!r}: a zoo model is named zoo:<pair>/target or zoo:<pair>/draft")
        target_dir, draft_dir = zoo.materialize(pair)
        return str(target_dir if role == "target" else draft_dir), {}
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelNotFoundError(f"GGUF file {path} does not exist")
        # An absolute gguf_file: transformers tries a gguf_file as a path relative to the working
        # directory before looking in the model directory, so a bare name could load another file.
        return str(path.parent), {"gguf_file": str(path.resolve())}
    if path.is_dir():
        return str(path), {}
    if path.exists() or name.startswith((".", "/", "~")):
        raise ModelNotFoundError(f"{name!r} is neither a model directory nor a .gguf file")
    if settings.grading():
        raise ModelNotFoundError(f"{name!r}: grading runs offline and loads no hub model; use zoo:<pair>/<role>")
    if not hub_reachable():
        # Only the local hub cache can help; never let from_pretrained retry a dead network.
        return name, {"local_files_only": True}
    return name, {}


def dtype_kwargs(dtype: torch.dtype) -> dict:
    """transformers 5 calls the argument `dtype`; 4.x called it `torch_dtype`."""
    major = int(transformers.__version__.split(".")[0])
    return {"dtype": dtype} if major >= 5 else {"torch_dtype": dtype}


def load_tokenizer(name: str):
    source, kwargs = model_source(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
    except OSError as e:
        raise _not_found(name, kwargs, e) from e
    if tokenizer.pad_token is None:  # Pythia and GPT-2 have none; batching and generate want one
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(name: str, device: str | torch.device = "cpu", dtype: torch.dtype | None = None):
    """Load `name` for inference: (model in eval mode on `device`, tokenizer with a pad token)."""
    device = resolve_device(device)
    dtype = dtype or default_dtype(device)
    tokenizer = load_tokenizer(name)
    source, kwargs = model_source(name)
    try:
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs, **dtype_kwargs(dtype))
    except OSError as e:
        raise _not_found(name, kwargs, e) from e
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.to(device).eval(), tokenizer


def check_same_vocab(target_tokenizer, draft_tokenizer, target_name: str = "target",
                     draft_name: str = "draft") -> None:
    """Raise ValueError unless both tokenizers map the same strings to the same ids."""
    target_vocab, draft_vocab = target_tokenizer.get_vocab(), draft_tokenizer.get_vocab()
    if target_vocab != draft_vocab:
        differing = len(set(target_vocab.items()) ^ set(draft_vocab.items()))
        raise ValueError(
            f"the draft and target tokenizers differ ({target_name}: {len(target_vocab)} tokens, "
            f"{draft_name}: {len(draft_vocab)} tokens, {differing} entries not shared): speculative decoding "
            "compares token ids, so both models must share one vocabulary; pick a draft from the target's "
            "family (e.g. pythia-160m for pythia-1.4b, gpt2 for gpt2-large)"
        )


def _not_found(name: str, kwargs: dict, error: Exception) -> ModelNotFoundError:
    why = ("the Hugging Face hub cannot be reached and it is not in the local cache"
           if kwargs.get("local_files_only") else f"loading failed: {error}")
    return ModelNotFoundError(
        f"cannot load model {name!r}: {why}. Offline, use a zoo pair (--pair tiny, or names like "
        f"zoo:tiny/target), a local directory or a .gguf file; known pairs: {', '.join(known_pairs())}"
    )
