"""Models that run in the grading process: what a grading child's decoder holds instead of the check pairs' weights,
so that the grader runs, sees and counts every forward itself.

    remote.install(conn, {"/zoo/tiny-v2/target": ("tiny", "target"), ...})   # in a grading child, before any
    model = AutoModelForCausalLM.from_pretrained("/zoo/tiny-v2/target")        # submission code: a RemoteModel
    out = model(input_ids=ids, use_cache=True)       # the grader runs the forward; out.logits is a local tensor
    cache = cache_of(out)                            # a RemoteCache: the grader holds the keys and values
    crop_to(cache, 5)                                # cropped there too

Each call is one JSON request on the child's channel and one reply: a JSON header, then the logits as float32
bytes. `install` makes `from_pretrained` of the served folders give a RemoteModel (their weights are not readable
in the sandbox) and `DynamicCache` a RemoteCache. A student's code may change any of this in its own process:
what the checks judge is what the grader ran (`specdec_course.sandbox.models`), never what this module reports.
"""

from __future__ import annotations

import copy
import json
import os

import torch

from ..core.cache import cache_kwargs, passed_cache
from ..core.timing import dtype_name

WEIGHT_FILES = ("*.safetensors", "*.bin")  # what a served folder's copy leaves out: the weights stay the grader's
_channel = None  # the child's Connection to the grader
_folders: dict[str, tuple[str, str]] = {}  # real path of a served folder -> (pair, role)
ERRORS = {e.__name__: e for e in (ValueError, TypeError, IndexError, RuntimeError, NotImplementedError)}


class RemoteError(RuntimeError):
    """The grading process refused a request (the message says why)."""


def install(channel, folders: dict[str, tuple[str, str]]) -> None:
    """Serve `folders` (path -> (pair, role)) through `channel`: their from_pretrained gives RemoteModels."""
    import transformers
    from transformers import cache_utils

    global _channel
    _channel = channel
    for path, (pair, role) in folders.items():
        alias(path, pair, role)
    for owner in (transformers.PreTrainedModel, transformers.AutoModelForCausalLM):
        _serve_from_pretrained(owner)
    transformers.DynamicCache = cache_utils.DynamicCache = RemoteCache


def alias(path, pair: str, role: str) -> None:
    """Serve `path` as `pair`'s `role` (a copy of a served folder, for example)."""
    _folders[os.path.realpath(path)] = (pair, role)


def served(path) -> tuple[str, str] | None:
    try:
        return _folders.get(os.path.realpath(os.fspath(path)))
    except TypeError:
        return None


def _serve_from_pretrained(owner: type) -> None:
    holder = next(c for c in owner.__mro__ if "from_pretrained" in c.__dict__)
    original = holder.__dict__["from_pretrained"].__func__

    def from_pretrained(cls, name, *args, **kwargs):
        where = served(name)
        if where is None:
            return original(cls, name, *args, **kwargs)
        dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
        return RemoteModel(name, *where, dtype=dtype if isinstance(dtype, torch.dtype) else torch.float32)

    owner.from_pretrained = classmethod(from_pretrained)


def _ask(request: dict) -> tuple[dict, bytes | None]:
    """Send `request`; the grader's reply header (and the bytes after it, when the header says so)."""
    if _channel is None:
        raise RemoteError("no grading process to run this model: remote models exist only while grading")
    _channel.send_bytes(json.dumps({"event": "model", **request}).encode())
    header = json.loads(_channel.recv_bytes())
    if not header.get("ok"):
        raise ERRORS.get(header.get("kind"), RemoteError)(header.get("message", "the grading process refused"))
    return header, _channel.recv_bytes() if header.get("data") else None


def _rows(value, name: str) -> list[list[int]] | None:
    if value is None:
        return None
    if not isinstance(value, torch.Tensor) or value.dim() != 2 or value.dtype.is_floating_point:
        raise TypeError(f"{name} must be an integer tensor of shape (batch, positions), got "
                        f"{type(value).__name__} {tuple(getattr(value, 'shape', ()))}")
    return value.tolist()


class RemoteCache:
    """A KV cache the grading process holds: this object is its handle and knows its length. `DynamicCache()`
    makes one (empty until a forward fills it); crop, get_seq_length and deepcopy work as on a DynamicCache."""

    def __init__(self, *args, **kwargs):
        self.handle, self.length = None, 0

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def crop(self, max_length: int) -> None:
        if self.handle is not None:
            header, _ = _ask({"op": "crop", "cache": self.handle, "length": int(max_length)})
            self.length = int(header["length"])

    def __deepcopy__(self, memo) -> RemoteCache:
        twin = RemoteCache()
        if self.handle is not None:
            header, _ = _ask({"op": "clone", "cache": self.handle})
            twin.handle, twin.length = header["cache"], int(header["length"])
        return twin

    def __repr__(self) -> str:
        return f"RemoteCache(handle={self.handle}, length={self.length})"

    @classmethod
    def from_legacy_cache(cls, *args, **kwargs):
        raise NotImplementedError("caches as tuples of tensors are not available while grading: keep the "
                                  "DynamicCache a forward returns (cache_of(out)) and crop it with crop_to")


# How HF's assisted generation drafts: transformers 5 reads these from the assistant's generation config, not from
# generate's arguments, so they travel with a generate and the grading process sets them on its assistant's.
ASSISTANT_SETTINGS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


class RemoteModel(torch.nn.Module):
    """A causal LM whose forwards the grading process runs: `config`, `generation_config`, `dtype`, `device`,
    `eval()`/`train()`, `.to()`, `forward` (input_ids, attention_mask, the cache by the name or names the installed
    transformers takes, use_cache, position_ids, cache_position, logits_to_keep) and `generate` as on the model it
    stands for. Its output holds the cache under the installed version's name (`specdec_kit.cache_of` reads it)."""

    def __init__(self, folder, pair: str, role: str, dtype: torch.dtype = torch.float32):
        from transformers import AutoConfig, GenerationConfig

        super().__init__()
        self.pair, self.role, self.name_or_path = pair, role, str(folder)
        self.config = AutoConfig.from_pretrained(folder)
        try:
            self.generation_config = GenerationConfig.from_pretrained(folder)
        except OSError:
            self.generation_config = GenerationConfig.from_model_config(self.config)
        self._anchor = torch.nn.Parameter(torch.zeros(1, dtype=dtype), requires_grad=False)  # dtype and device

    @property
    def dtype(self) -> torch.dtype:
        return self._anchor.dtype

    @property
    def device(self) -> torch.device:
        return self._anchor.device

    def get_input_embeddings(self):
        return None

    def can_generate(self) -> bool:
        return True

    @torch.compiler.disable
    def forward(self, input_ids=None, attention_mask=None, use_cache=None, position_ids=None, cache_position=None,
                inputs_embeds=None, return_dict=None, logits_to_keep=0, **kwargs):
        from transformers.modeling_outputs import CausalLMOutputWithPast

        if input_ids is None:
            raise NotImplementedError("while grading the models take input_ids (inputs_embeds is not available)")
        # Under a name the installed transformers does not take (`cache` before 5.24) the cache is ignored, as the
        # model this stands for ignores it: the forward then runs without one.
        past = passed_cache(kwargs)
        if past is not None and not isinstance(past, RemoteCache):
            raise TypeError(f"the cache passed to a forward must be one a forward returned, a DynamicCache or None, "
                            f"got {type(past).__name__} (caches as tuples are not available while grading)")
        request = {"op": "forward", "pair": self.pair, "role": self.role, "ids": _rows(input_ids, "input_ids"),
                   "mask": _rows(attention_mask, "attention_mask"), "use_cache": use_cache,
                   "position_ids": _rows(position_ids, "position_ids"),
                   "cache_position": cache_position.tolist() if isinstance(cache_position, torch.Tensor) else None,
                   "logits_to_keep": int(logits_to_keep) if isinstance(logits_to_keep, int) else 0,
                   "cache": past.handle if past is not None else None,
                   "training": self.training, "dtype": dtype_name(self.dtype)}  # how the model is asked to run
        header, data = _ask(request)
        logits = torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(header["shape"]).to(self.dtype)
        cache = None
        if header.get("cache") is not None:
            cache = past if past is not None else RemoteCache()
            cache.handle, cache.length = header["cache"], int(header["length"])
        if return_dict is False:
            return (logits, cache) if cache is not None else (logits,)
        return CausalLMOutputWithPast(logits=logits, **cache_kwargs(cache))

    def generate(self, inputs=None, attention_mask=None, **kwargs):
        """HF generate, run by the grading process: input_ids and attention_mask as tensors, other settings as
        plain values, `assistant_model` another RemoteModel; returns the sequences."""
        input_ids = kwargs.pop("input_ids", inputs)
        assistant = kwargs.pop("assistant_model", None)
        if assistant is not None:
            if not isinstance(assistant, RemoteModel):
                raise TypeError("assistant_model must be one of the models this decoder was given")
            kwargs["assistant_model"] = [assistant.pair, assistant.role]
            for name in ASSISTANT_SETTINGS:  # read from the assistant's generation config, as HF reads them
                value = getattr(assistant.generation_config, name, None)
                if value is not None:
                    kwargs.setdefault(name, value)
        if kwargs.get("generation_config") is not None:
            kwargs.update(copy.deepcopy(kwargs.pop("generation_config")).to_diff_dict())
        kwargs.pop("generation_config", None)
        header, _ = _ask({"op": "generate", "pair": self.pair, "role": self.role,
                          "ids": _rows(input_ids, "input_ids"), "mask": _rows(attention_mask, "attention_mask"),
                          "settings": kwargs})
        return torch.tensor(header["sequences"], dtype=torch.long, device=self.device)

    def extra_repr(self) -> str:
        return f"{self.pair} {self.role}, run by the grading process"
