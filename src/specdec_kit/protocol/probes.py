"""Probes: run a student's decoder class on given inputs and report what happened, as plain data.

    request = {"kind": "decode", "pair": "scripted", "cases": [["Hello", 30, 4]], "ids": True}
    events = []
    run_probe(request, CachedSpeculativeDecoder, events.append)
    outcomes = checks.outcomes.assemble(events, request)   # one CaseOutcome per case: its outputs and forwards

A probe builds the class on an offline zoo pair, calls one of its methods once per case and emits
events, in order: the call it is about to make (so a hang can be named), every forward call of the
target and draft models, and each case's outputs. Forwards are seen twice, independently: by hooks
on the models (with what each call fed and what its KV cache held) and by hooks on the models' input
embeddings, which also fire when a method calls `model.forward` directly or removes the model's hooks.
Events are JSON-safe dicts, read back strictly by `checks/outcomes.py`. The checks (`checks/`) judge them: in a
notebook in the same process, while grading in another process than the probe (`specdec_course/sandbox/child.py`),
out of the student's reach.

Kinds of probe (`request["kind"]`):
- `load`: construct the class; run each model it kept on its tokenizer's ids of a text, unpadded and padded (the
  forwards show the model, its mode, dtype and the padding); then construct it with a draft whose tokenizer differs
  from the target's and report whether that was refused.
- `draft`: `generate_draft_tokens(prefix, k)` per case `[prefix ids, k]`, `repeat` times each.
- `verify`: `verify_tokens_vectorized(prefix, drafts)` per case `[prefix ids, draft ids]`; reports what came back
  (a triple's tokens, n_accepted and next_token's shape, or the type and length of anything else).
- `decode`: `speculative_decode(prompt, max_tokens, k)` per case `[prompt, max_tokens, k]`; with
  `"ids": true` every forward also reports the ids it fed (a host sync, so timing leaves it off). A decode that
  fails first reports, as a `stuck` event, every round its verifier returned (`Observer.case_rounds`).
- `sample`: `speculative_sample(prompt, max_tokens, k, temperature, top_p, generator)` `samples` times per
  case `[prompt, max_tokens, k, temperature, top_p, samples, seed]`, one generator seeded with `seed`
  (and torch's global one too, for code that ignores the generator); reports the tokens of each sample and,
  as `decode` does, every forward (with `"ids": true` the ids each fed).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from functools import cache, partial

import torch

from .. import zoo
from ..core import settings
from ..core.no_progress import NoProgress, shape_of
from ..core.result import DecodeResult
from ..core.timing import ROLES, Emit, ForwardCosts, Observer
from . import remote


class ProbeError(Exception):
    """A student's method raised while a probe ran it: which method, and the exception."""

    def __init__(self, method: str, error: BaseException | None = None, kind: str = "", message: str = "",
                 student_traceback: str = ""):
        self.method = method
        self.kind = kind or type(error).__name__
        self.message = message if error is None else str(error)
        self.student_traceback = student_traceback
        super().__init__(f"{method} raised {self.kind}: {self.message}".rstrip(": "))


@cache
def pair_dirs(pair: str) -> tuple[str, str]:
    return tuple(str(p) for p in zoo.materialize(pair))


def set_threads(threads: int | None = None) -> None:
    """Pin torch's CPU threads (default $SPECDEC_THREADS, else 2): unpinned threads crawl under load."""
    torch.set_num_threads(threads or settings.threads())


def build(decoder_class: type, pair: str, device: str = "cpu", **init):
    """The student's class, constructed from the zoo pair's directories (on the CPU unless asked) and any further
    keyword arguments `init`, without transformers' loading bars: the checks build a decoder for every case list."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return decoder_class(*pair_dirs(pair), device=device, **init)
    finally:
        if bars:
            hf_logging.enable_progress_bar()


# ---------------------------------------------------------------------------------------------
# The probes


def run_probe(request: dict, decoder_class: type, emit: Emit, capture: bool = False) -> None:
    """Run `request` on `decoder_class`, emitting events; `capture` turns a student's exception into an
    `error` event (grading) instead of letting it propagate (a notebook, where the traceback helps)."""
    try:
        PROBES[request["kind"]](request, decoder_class, emit)
    except ProbeError as e:
        if not capture:
            raise (e.__cause__ or e) from None  # the student's own exception and traceback
        emit({"event": "error", "method": e.method, "kind": e.kind, "message": e.message,
              "traceback": e.student_traceback})
    emit({"event": "done"})


def call_student(method: str, fn: Callable, *args, emit: Emit, describe: str = ""):
    """Call a student's method, announcing it first; its exception becomes a ProbeError naming it."""
    emit({"event": "call", "method": method, "args": describe})
    try:
        return fn(*args)
    except (Exception, NoProgress) as e:
        raise ProbeError(method, e, student_traceback=student_frames(e)) from e


def student_frames(error: BaseException) -> str:
    """The traceback of `error` limited to frames in notebook cells (`<... cell>` file names); none for NoProgress,
    raised at a target forward that is not where the loop goes wrong (its message says what the rounds returned)."""
    import traceback

    if isinstance(error, NoProgress):
        return ""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith("<")]
    lines = traceback.format_list(frames) + traceback.format_exception_only(type(error), error)
    return "".join(lines)


_kept: dict[tuple, object] = {}  # decoders kept across requests ("keep": timing reuses one warm decoder)


def init_kwargs(request: dict) -> dict:
    """The request's further constructor arguments: {"forward_costs": {"draft": s, "verify": [s, ...]}} becomes
    ForwardCosts (adaptive k's prices, given so that its rounds are known in advance)."""
    init = dict(request.get("init", {}))
    if "forward_costs" in init:
        costs = init["forward_costs"]
        init["forward_costs"] = ForwardCosts(float(costs["draft"]), tuple(float(v) for v in costs["verify"]))
    return init


def _construct(request: dict, decoder_class: type, emit: Emit):
    pair, device, init = request["pair"], request.get("device", "cpu"), init_kwargs(request)
    key = (decoder_class, pair, device, repr(init))
    if request.get("keep") and key in _kept:
        return _kept[key]
    given = "".join(f", {name}=..." for name in init)
    describe = f"{decoder_class.__name__}(<{pair} target>, <{pair} draft>, device={device!r}{given})"
    decoder = call_student("__init__", partial(build, **init), decoder_class, pair, device, emit=emit,
                           describe=describe)
    if request.get("keep"):
        _kept[key] = decoder
    return decoder


LOAD_TEXT = "Hello, world"  # what the load probe has each tokenizer encode and each model run
LOAD_PADDING = 3  # pad tokens it then asks for past that text: only a tokenizer with a pad token gives them


def probe_load(request: dict, decoder_class: type, emit: Emit) -> None:
    """Construct the class, then run each kept model on its tokenizer's ids of LOAD_TEXT, unpadded and padded: what
    is judged is those forwards (while grading, as the grader served them: the model asked for, its mode and dtype,
    the ids and their padding), not a word of this process's about its objects."""
    decoder = _construct(request, decoder_class, emit)
    with Observer(decoder, emit, record_ids=True):
        for role in ROLES:
            model, tokenizer = getattr(decoder, f"{role}_model", None), getattr(decoder, f"{role}_tokenizer", None)
            if model is not None and tokenizer is not None:
                _run_on_text(model, tokenizer)
    emit({"event": "case", "index": 0, "result": {"mismatch": _mismatched_vocab(request, decoder, decoder_class,
                                                                                emit)}})


def _run_on_text(model, tokenizer) -> None:
    """`model` on `tokenizer`'s ids of LOAD_TEXT, then padded. Whatever fails here (a tokenizer without a pad token
    refuses to pad) leaves its forward unmade, which the check reads."""
    try:
        length = len(tokenizer(LOAD_TEXT).input_ids)
        for padding in ({}, {"padding": "max_length", "max_length": length + LOAD_PADDING}):
            batch = tokenizer(LOAD_TEXT, return_tensors="pt", **padding)
            with torch.inference_mode():
                model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
    except Exception:
        return


def _mismatched_vocab(request: dict, decoder, decoder_class: type, emit: Emit) -> str:
    """Construct the class with a draft whose tokenizer has one token more: 'refused: <error>' or 'accepted'."""
    if getattr(decoder, "draft_tokenizer", None) is None:
        return "not tried"
    target_dir, draft_dir = pair_dirs(request["pair"])
    served = remote.served(draft_dir)  # grading: the weights are the grader's, the copy is served as the draft
    with tempfile.TemporaryDirectory() as tmp:
        other = os.path.join(tmp, "draft-with-another-vocabulary")
        shutil.copytree(draft_dir, other, ignore=shutil.ignore_patterns(*remote.WEIGHT_FILES) if served else None)
        if served:
            remote.alias(other, *served)
        tokenizer = type(decoder.draft_tokenizer).from_pretrained(other)
        tokenizer.add_tokens(["<not-in-the-target-vocabulary>"])
        tokenizer.save_pretrained(other)
        emit({"event": "call", "method": "__init__", "args": "a draft whose tokenizer differs from the target's"})
        try:
            decoder_class(target_dir, other, device="cpu")
        except NotImplementedError as e:
            raise ProbeError("__init__", e, student_traceback=student_frames(e)) from e
        except Exception as e:
            return f"refused: {type(e).__name__}"
    return "accepted"


def _ids(tokens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor([tokens])
    return ids, torch.ones_like(ids)


def _tokens(value) -> list | None:
    """A (1, n) tensor's row as a list (None for anything else)."""
    if isinstance(value, torch.Tensor) and value.dim() == 2 and value.shape[0] == 1:
        return value[0].tolist()
    if isinstance(value, torch.Tensor) and value.dim() <= 1:
        return value.reshape(-1).tolist()
    return None


def probe_draft(request: dict, decoder_class: type, emit: Emit) -> None:
    decoder = _construct(request, decoder_class, emit)
    with Observer(decoder, emit, request.get("ids", False)):
        for index, (prefix, k) in enumerate(request["cases"]):
            answers = []
            for _ in range(request.get("repeat", 1)):
                drafts = call_student("generate_draft_tokens", decoder.generate_draft_tokens, *_ids(prefix), k,
                                      emit=emit, describe=f"prefix {prefix}, k={k}")
                answers.append(drafts)
            first = answers[0]
            emit({"event": "case", "index": index, "result": {
                "type": type(first).__name__, "shape": list(first.shape) if isinstance(first, torch.Tensor) else None,
                "tokens": _tokens(first), "repeats": [_tokens(a) for a in answers[1:]]}})


def probe_verify(request: dict, decoder_class: type, emit: Emit) -> None:
    decoder = _construct(request, decoder_class, emit)
    with Observer(decoder, emit, request.get("ids", False)):
        for index, (prefix, drafts) in enumerate(request["cases"]):
            ids, mask = _ids(prefix)
            out = call_student("verify_tokens_vectorized", decoder.verify_tokens_vectorized, ids,
                               torch.tensor([drafts]), mask, emit=emit, describe=f"prefix {prefix}, drafts {drafts}")
            result = {"triple": isinstance(out, tuple) and len(out) == 3, "type": type(out).__name__,
                      "length": len(out) if isinstance(out, (tuple, list)) else None}
            if result["triple"]:
                accepted, position, next_token = out
                result.update(accepted=_tokens(accepted), position=_int(position), next=_tokens(next_token),
                              next_shape=shape_of(next_token))
            emit({"event": "case", "index": index, "result": result})


def probe_decode(request: dict, decoder_class: type, emit: Emit) -> None:
    decoder = _construct(request, decoder_class, emit)
    with Observer(decoder, emit, request.get("ids", False)) as observer:
        for index, (prompt, max_tokens, k) in enumerate(request["cases"]):
            observer.expect_tokens(max_tokens)
            try:
                got = call_student("speculative_decode", decoder.speculative_decode, prompt, max_tokens, k, emit=emit,
                                   describe=f"prompt {prompt!r}, max_tokens={max_tokens}, num_speculative_tokens={k}")
            except ProbeError as e:
                explain_failed_decode(e, observer.why_failed())
                emit({"event": "stuck", "index": index, "rounds": observer.case_rounds})
                raise
            emit({"event": "case", "index": index, "result": decode_result(got)})


def explain_failed_decode(error: ProbeError, why: str) -> None:
    """Add to a decode's failure what its last round's verification returned and means (`why`, where it returned
    no target token): to its message (grading's words) and as a note on the student's own exception (the
    notebook's). NoProgress says it already."""
    if not why or error.kind == "NoProgress":
        return
    error.message = f"{error.message}. {why}"
    student = error.__cause__
    if isinstance(student, BaseException):
        try:
            student.__notes__ = [*getattr(student, "__notes__", []), why]  # add_note, on Python 3.10 too
        except (AttributeError, TypeError):
            pass


def probe_sample(request: dict, decoder_class: type, emit: Emit) -> None:
    decoder = _construct(request, decoder_class, emit)
    for index, (prompt, max_tokens, k, temperature, top_p, samples, seed) in enumerate(request["cases"]):
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        describe = (f"prompt {prompt!r}, max_tokens={max_tokens}, num_speculative_tokens={k}, "
                    f"temperature={temperature}, top_p={top_p}")
        sample = partial(decoder.speculative_sample, temperature=temperature, top_p=top_p, generator=generator)
        tokens = []
        with Observer(decoder, emit, request.get("ids", False)) as observer:
            for _ in range(samples):
                observer.expect_tokens(max_tokens)
                got = call_student("speculative_sample", sample, prompt, max_tokens, k, emit=emit, describe=describe)
                result = decode_result(got)
                if result["type"] != "DecodeResult" or result["token_ids"] is None:
                    break
                tokens.append(result["token_ids"])
        emit({"event": "case", "index": index, "result": {**result, "samples": tokens}})


def decode_result(got) -> dict:
    """What a `speculative_decode` return value says, as plain data (its type named if it is not a DecodeResult)."""
    if not isinstance(got, DecodeResult):  # a class of the student's own that shares the name says where it is from
        name = type(got).__name__
        return {"type": f"{type(got).__module__}.{name}" if name == "DecodeResult" else name}
    return {"type": "DecodeResult", "token_ids": _int_list(got.token_ids), "proposed": _int_list(got.proposed),
            "accepted": _int_list(got.accepted)}


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError, RuntimeError):
        return None


def _int_list(values) -> list[int] | None:
    try:
        return [int(v) for v in values]
    except (TypeError, ValueError, RuntimeError):
        return None


PROBES = {"load": probe_load, "draft": probe_draft, "verify": probe_verify, "decode": probe_decode,
          "sample": probe_sample}
