"""The check pairs' models, run in the grading process for a grading child: the child's decoder holds stand-ins
(`specdec_kit.protocol.remote`), whose weights it cannot read, and every forward it makes is run, and recorded, here.

    server = ModelServer(["scripted", "tiny"])
    child = Child(host, cells, threads, memory_mb, server)   # the child's from_pretrained of server.folders() serve
    events = server.serve(request, send, over)   # a child's request: run it, reply, record it

The forward events the checks judge (how many tokens each call fed, what its cache held, the ids) are the ones
`serve` returns: the grader's record of what it ran. A request is JSON from the sandbox, checked against its
operation's schema before any work (`model_requests.py`); a refused one gets a reply that says why, which the
child's code sees as an exception. A request runs within its check's limit (`over`), checked before each forward
and at every step of a generate, and on the grading job's own copy of the models: one submission's requests cost
its own time and nobody else's.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import threading
from collections import OrderedDict

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from specdec_kit import cache_kwargs, cache_of, zoo
from specdec_kit.core.no_progress import KeptTokens, forwards_verdict
from specdec_kit.core.timing import ROLES, ForwardRecorder
from specdec_kit.models.loading import load_model, resolve_pair
from specdec_kit.protocol.remote import ASSISTANT_SETTINGS

from .model_requests import MAX_NEW, Refused, check
from .model_requests import MAX_TOKENS as MAX_TOKENS  # re-exported: callers read the server's bounds here

CHECK_PAIRS = ("scripted", "sampling", "tiny", "tiny-b")  # the pairs the checks load: all but the timing pair
MAX_HELD = 20_000  # positions the caches kept for one child may hold together (keys and values kept here)
MAX_CACHES = 256  # caches kept for one child: past either bound, the least recently used are let go

_jobs = threading.local()  # each grading job's (thread's) own copy of the models: no job waits on another's request


class OutOfTime(Exception):
    """A request ran past the deadline of the check that made it (checked before every forward, at every step of
    a generate): the check fails as a time limit, and the time was the submission's own."""


class NoProgress(Exception):
    """One call of the student's code sent the target the same text on the same cache more than REPEATS times in a
    row: a correct decode emits a token every round, so its input changes every round; a loop whose rounds emit
    nothing sends it until the check's limit. The check fails at once rather than at that limit, saying which cause
    the call's forwards show (`specdec_kit.core.no_progress.KeptTokens`): the server sees no verifier's return."""


DELEGATING = ("assistant_model", "prompt_lookup_num_tokens")  # generate's settings that make it speculative decoding
REPEATS = 8  # a correct call may send one input a few times in a row (a warm-up, a second look at a round)


class Complaint(Exception):
    """The model's own complaint about an input the child sent (its reply says what): the child's to handle."""


def model(pair: str, role: str) -> torch.nn.Module:
    """`pair`'s `role` model in fp32 on the CPU, loaded once per grading job (thread), for that job alone. A copy of
    its own, not `baseline.zoo_model`'s: a generate here hooks the model it runs, and the grader's own computations
    use that one meanwhile."""
    loaded = getattr(_jobs, "models", None)
    if loaded is None:
        loaded = _jobs.models = {}
    if (pair, role) not in loaded:
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # a grading log, not a terminal
        try:
            loaded[(pair, role)], _ = load_model(resolve_pair(pair)[ROLES.index(role)], "cpu", torch.float32)
        finally:
            if bars:
                hf_logging.enable_progress_bar()
    return loaded[(pair, role)]


@contextlib.contextmanager
def complaints():
    """The model's exceptions on the child's inputs, as a Complaint (a deadline passed stays OutOfTime)."""
    try:
        yield
    except OutOfTime:
        raise
    except Exception as e:
        raise Complaint(type(e).__name__, str(e)[:2000]) from e


class _Deadline(StoppingCriteria):
    """Stops a generate once `over()`, at the step it finds it."""

    def __init__(self, over):
        self.over = over

    def __call__(self, input_ids, scores, **kwargs):
        if self.over():
            raise OutOfTime("a generate ran past its check's time limit")
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


@contextlib.contextmanager
def _drafting(config, settings: dict):
    """The assistant's generation config with `settings` for one generate, then as it was: the models serve every
    child, and HF's heuristic schedule changes the config's k as it runs."""
    kept = {name: getattr(config, name, None) for name in ASSISTANT_SETTINGS}
    for name, value in settings.items():
        setattr(config, name, value)
    try:
        yield
    finally:
        for name, value in kept.items():
            setattr(config, name, value)


def _never() -> bool:
    return False


class ModelServer:
    """Runs `pairs`' models for one child; holds that child's caches by handle, forgotten at each new request."""

    def __init__(self, pairs: list[str]):
        self.pairs = list(pairs)
        self._caches: OrderedDict[int, object] = OrderedDict()  # least recently used first
        self._lengths: dict[int, int] = {}  # handle -> its cache's length when last measured (_measure)
        self._held = 0  # their sum: a request's room is found without measuring every held cache
        self._handles = itertools.count(1)
        self._over = _never  # whether the request being served (`serve`) ran past its check's limit
        self._last_target, self._sends = None, 0  # see NoProgress
        self._kept = KeptTokens()  # the call's rounds as its forwards show them, for NoProgress's words
        self.delegated = 0  # generates it ran with HF's speculative decoding (an assistant model, prompt lookup)

    def folders(self) -> dict[str, list[str]]:
        """The pairs' folders, as the child's `remote.install` takes them: path -> [pair, role]."""
        return {str(folder): [pair, role] for pair in self.pairs for role, folder in zip(ROLES, zoo.materialize(pair))}

    def reset(self) -> None:
        """Forget the last request's caches, before a new request."""
        self.called()
        self._caches.clear()
        self._lengths.clear()
        self._held = 0

    def called(self) -> None:
        """A new call of the student's code began: its target inputs are counted afresh (NoProgress)."""
        self._last_target, self._sends, self._kept = None, 0, KeptTokens()

    def serve(self, request: dict, send, over=None) -> list[dict]:
        """Run the child's `request` while not `over()` (else OutOfTime), `send` the reply (a JSON header, then any
        data), return the forward events of what ran. Any other exception is the server's own failure, not the
        child's."""
        events: list[dict] = []
        self._over = over or _never
        try:
            header, data = self._run(request, events)
        except Refused as e:
            header, data = {"ok": False, "kind": "ValueError", "message": str(e)}, None
        except Complaint as e:  # the model's own complaint about an input: the child's to handle, never the grader's
            header, data = {"ok": False, "kind": e.args[0], "message": e.args[1]}, None
        send(json.dumps({**header, "data": data is not None}).encode())
        if data is not None:
            send(data)
        return events

    def _run(self, request: dict, events: list[dict]) -> tuple[dict, bytes | None]:
        check(request)  # every field below is of its schema's type, range and size
        op = request["op"]
        if op == "crop":
            handle = request["cache"]
            cache = self._cache(handle)
            try:
                with complaints():
                    cache.crop(request["length"])
            finally:
                self._measure(handle)
            return {"ok": True, "length": cache.get_seq_length()}, None
        if op == "clone":
            cache = self._cache(request["cache"])
            self._room(cache.get_seq_length())
            return {"ok": True, "cache": self._keep(copy.deepcopy(cache)), "length": cache.get_seq_length()}, None
        if op == "forward":
            return self._forward(request, events)
        return self._generate(request, events)

    def _model(self, request: dict) -> torch.nn.Module:
        pair, role = request["pair"], request["role"]
        if pair not in self.pairs or role not in ROLES:
            raise Refused(f"no model {pair!r} {role!r} is served here")
        return model(pair, role)

    def _forward(self, request: dict, events: list[dict]) -> tuple[dict, bytes]:
        net = self._model(request)
        ids = _ids(request["ids"], net.config.vocab_size)
        handle = request.get("cache")
        cache = self._cache(handle) if handle is not None else None
        cached = cache.get_seq_length() if cache is not None else 0
        self._room(ids.shape[1])
        kwargs = {"input_ids": ids, **cache_kwargs(cache), "use_cache": request.get("use_cache")}
        positions = net.config.max_position_embeddings
        if request.get("mask") is not None:
            kwargs["attention_mask"] = _ids(request["mask"], 2)
        if request.get("position_ids") is not None:
            kwargs["position_ids"] = _ids(request["position_ids"], positions)
        if request.get("cache_position") is not None:
            kwargs["cache_position"] = _ids([request["cache_position"]], positions)[0]
        if request.get("logits_to_keep"):
            kwargs["logits_to_keep"] = request["logits_to_keep"]
        if self._over():
            raise OutOfTime("a forward was asked for past its check's time limit")
        try:
            with complaints(), torch.inference_mode():
                out = net(**kwargs)
        finally:  # the model may have grown the cache before it raised
            if cache is not None:
                self._measure(handle)
        events.append({**_event(request["role"], ids.shape[1], cached, ids[0].tolist()),
                       "padding": int((kwargs["attention_mask"] == 0).sum()) if "attention_mask" in kwargs else 0,
                       "training": request.get("training"), "dtype": request.get("dtype")})
        if request["role"] == "target":
            self._progressed((cached, events[-1]["ids"]), out.logits[0].argmax(dim=-1).tolist())
        else:
            self._kept.drafted()
        kept = cache_of(out)
        if kept is not None and cache is None:
            handle = self._keep(kept)
        logits = out.logits.float().contiguous()
        header = {"ok": True, "shape": list(logits.shape), "cache": handle if kept is not None else None,
                  "length": kept.get_seq_length() if kept is not None else 0}
        return header, logits.numpy().tobytes()

    def _generate(self, request: dict, events: list[dict]) -> tuple[dict, None]:
        net = self._model(request)
        settings = request.get("settings") or {}
        roles = {request["role"]: net}
        if settings.get("assistant_model") is not None:
            pair, role = settings["assistant_model"]
            settings["assistant_model"] = roles[role] = self._model({"pair": pair, "role": role})
        self.delegated += any(settings.get(name) is not None for name in DELEGATING)
        ids = _ids(request["ids"], net.config.vocab_size)
        if (settings.get("max_length") or 0) > ids.shape[1] + MAX_NEW:  # against the prompt: the schema cannot
            raise Refused(f"generate makes at most {MAX_NEW} new tokens while grading")
        mask = request.get("mask")
        drafting = {name: settings.pop(name) for name in ASSISTANT_SETTINGS if name in settings}
        with complaints(), torch.inference_mode(), contextlib.ExitStack() as stack:
            if settings.get("assistant_model") is not None:
                stack.enter_context(_drafting(settings["assistant_model"].generation_config, drafting))
            recorders = {role: stack.enter_context(ForwardRecorder(m, record_ids=True)) for role, m in roles.items()}
            sequences = net.generate(ids, attention_mask=_ids(mask, 2) if mask is not None else None,
                                     stopping_criteria=StoppingCriteriaList([_Deadline(self._over)]), **settings)
        calls = sorted(((role, call) for role, recorder in recorders.items() for call in recorder),
                       key=lambda entry: entry[1].started)
        events += [_event(role, c.new_tokens, c.cached_tokens, list(c.input_ids or ())) for role, c in calls]
        self._kept.drafted(sum(role == "draft" for role, _ in calls))
        return {"ok": True, "sequences": sequences.tolist()}, None

    def _cache(self, handle):
        if not isinstance(handle, int) or handle not in self._caches:
            raise Refused(f"no cache {handle!r} is held here: a cache lasts for one check's request, and of more than "
                          f"{MAX_CACHES} caches (or {MAX_HELD} positions) the least recently used are let go")
        self._caches.move_to_end(handle)
        return self._caches[handle]

    def _keep(self, cache) -> int:
        handle = next(self._handles)
        self._caches[handle] = cache
        self._measure(handle)
        return handle

    def _measure(self, handle: int) -> None:
        """Record the length of the cache held as `handle` after a request that may have changed it."""
        if handle in self._caches:  # not let go of to make room for the request that used it
            length = self._caches[handle].get_seq_length()
            self._held += length - self._lengths.get(handle, 0)
            self._lengths[handle] = length

    def _progressed(self, target_input: tuple, own: list[int]) -> None:
        """Count the target's input (cached, ids) repeated in a row; past REPEATS in one call, NoProgress. `own` is
        the target's argmax at each row of its logits."""
        self._sends = self._sends + 1 if target_input == self._last_target else 1
        self._last_target = target_input
        self._kept.target(*target_input, own)
        if self._sends > REPEATS:
            raise NoProgress(f"it sent the target the same tokens on the same cache {self._sends} times in a "
                             "row: a round that emits no token, so the decode makes no progress. "
                             + forwards_verdict(self._kept))

    def _room(self, new: int) -> None:
        """Let go of the least recently used caches until `new` more positions and one more cache fit."""
        while self._caches and (self._held + new > MAX_HELD or len(self._caches) >= MAX_CACHES):
            oldest, _ = self._caches.popitem(last=False)
            self._held -= self._lengths.pop(oldest)


def _event(role: str, new_tokens: int, cached: int, ids: list[int]) -> dict:
    return {"event": "forward", "role": role, "new_tokens": new_tokens, "cached_tokens": cached, "ids": ids}


def _ids(rows: list[list[int]], bound: int) -> torch.Tensor:
    """Rows the schema admitted (whole numbers from 0), each checked to lie below the model's `bound`, as a
    (batch, n) long tensor."""
    ids = torch.tensor(rows, dtype=torch.long)
    if ids.max() >= bound:
        raise Refused(f"values must lie in 0..{bound - 1}")
    return ids

