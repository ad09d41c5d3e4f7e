"""A probe's answers read strictly: one answer per case the checks sent, in order, of the shape its kind gives.

    outcomes = assemble(events, request)     # one CaseOutcome per case of `request`, else NoAnswer

The cases are the checks' own list (`request["cases"]`; `load` has one). A probe answers the i-th case with one
`case` event of index i, in order, whose result has the shape `RESULTS` gives its kind. While grading these events
come from a process that runs the student's code, which can send anything: a missing, extra, repeated, reordered
or malformed answer fails the check ("no answer for case N") instead of being skipped, so that no check passes on
cases it never judged. Why an answer does not count is told in fixed words, with the grader's own case numbers and
the schema's own names: never a number, string or key the events hold (a case number they claim, where in a list
an item breaks its rule).

The one text of the student's code that comes back is an exception's: the method it was raised in, its kind, its
message and its traceback, each cut to a length a page can hold. With `redact` (the cases the grader keeps hidden)
not even that: an exception keeps only its kind (a built-in's name, else "an exception") and the method the grader
called, and a type name that is not a common one reads "another type".
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from functools import cache

from ..core.timing import DTYPES, ROLES, ForwardCall
from ..protocol.probes import ProbeError
from .failure import CheckFailed

MAX_ITEMS = 1 << 20  # numbers in one list of an answer (a token list, the samples)
METHODS = {"load": "__init__", "draft": "generate_draft_tokens", "verify": "verify_tokens_vectorized",
           "decode": "speculative_decode", "sample": "speculative_sample"}  # what each kind of probe calls
KNOWN_TYPES = frozenset({"Tensor", "DecodeResult", "tuple", "list", "dict", "int", "float", "bool", "str", "NoneType",
                         "ndarray", "generator"})
KIT_EXCEPTIONS = frozenset({"NoProgress", "RemoteError", "ChildFailed"})
MAX_NAME = 200  # characters of an exception's kind or method shown on a page
MAX_TEXT = 2000  # characters of an exception's message (or of a call's arguments) shown on a page
MAX_TRACEBACK = 10_000  # characters of its traceback: its end, where the exception was raised


class NoAnswer(CheckFailed):
    """A case of the checks' list got no well-formed answer of its own."""


@dataclass
class CaseOutcome:
    """One case: the method's outputs and the forward calls made while it ran."""

    result: dict
    forwards: dict[str, list[ForwardCall]] = field(default_factory=lambda: {r: [] for r in ROLES})
    embeddings: dict[str, int] = field(default_factory=lambda: {r: 0 for r in ROLES})

    def unseen(self, role: str) -> int:
        """Forwards that reached the input embeddings but not the model's own hooks."""
        return self.embeddings[role] - len(self.forwards[role])


# ---------------------------------------------------------------------------------------------
# The shapes of the answers (JSON Schema), as the probes (probes.py, the grader's sandbox/baseline.py) write them

NAME = {"type": "string", "maxLength": 200}
NUMBERS = {"type": ["array", "null"], "maxItems": MAX_ITEMS, "items": {"type": ["number", "boolean"]}}
INTEGERS = {"type": ["array", "null"], "maxItems": MAX_ITEMS, "items": {"type": "integer"}}
SHAPE = {"type": "array", "maxItems": 16, "items": {"type": "integer", "minimum": 0}}
DECODED = {"required": ["type"], "properties": {"type": NAME},
           "if": {"properties": {"type": {"const": "DecodeResult"}}},
           "then": {"required": ["token_ids", "proposed", "accepted"],
                    "properties": {"token_ids": INTEGERS, "proposed": INTEGERS, "accepted": INTEGERS}}}
RESULTS = {
    "load": {"required": ["mismatch"],
             "properties": {"mismatch": {"type": "string", "pattern": "^(not tried|accepted|refused: .{1,200})$"}}},
    "draft": {"required": ["type", "shape", "tokens", "repeats"],
              "properties": {"type": NAME, "shape": {"anyOf": [SHAPE, {"type": "null"}]}, "tokens": NUMBERS,
                             "repeats": {"type": "array", "maxItems": 64, "items": NUMBERS}}},
    "verify": {"required": ["triple", "type", "length"],
               "properties": {"triple": {"type": "boolean"}, "type": NAME,
                              "length": {"type": ["integer", "null"], "minimum": 0}},
               "if": {"properties": {"triple": {"const": True}}},
               "then": {"required": ["accepted", "position", "next", "next_shape"],
                        "properties": {"accepted": NUMBERS, "position": {"type": ["integer", "null"]}, "next": NUMBERS,
                                       "next_shape": {"anyOf": [SHAPE, NAME]}}}},
    "decode": DECODED,
    "sample": {**DECODED, "required": ["type", "samples"],
               "properties": {"type": NAME, "samples": {"type": "array", "maxItems": 10_000, "items": INTEGERS}}},
    "baseline": {"properties": {"token_ids": INTEGERS, "position": {"type": "integer", "minimum": 0},
                                "margin": {"type": "number"}}},
}
EVENTS = {
    "case": {"required": ["index", "result"],
             "properties": {"index": {"type": "integer"}, "result": {"type": "object"}}},
    "error": {"required": ["method", "kind", "message"],
              "properties": {"method": {"type": "string"}, "kind": {"type": "string"}, "message": {"type": "string"},
                             "traceback": {"type": "string"}}},
    "forward": {"required": ["role", "new_tokens", "cached_tokens"],
                "properties": {"role": {"enum": list(ROLES)}, "new_tokens": {"type": "integer", "minimum": 0},
                               "cached_tokens": {"type": "integer", "minimum": 0}, "ids": INTEGERS,
                               "padding": {"type": "integer", "minimum": 0}, "training": {"type": ["boolean", "null"]},
                               "dtype": {"enum": [*DTYPES, "other", None]}}},
    "embedding": {"required": ["role"], "properties": {"role": {"enum": list(ROLES)}}},
}


@cache
def _validator(schema_key: tuple[str, str]):
    import jsonschema

    table = RESULTS if schema_key[0] == "result" else EVENTS
    return jsonschema.Draft202012Validator({"type": "object", **table[schema_key[1]]})


def _malformed(kind: str, value: object, table: str) -> str:
    """Where `value` leaves the shape `kind` gives (a JSON path and the rule it breaks: never the value), or ""."""
    error = next(iter(_validator((table, kind)).iter_errors(value)), None) if isinstance(value, dict) else None
    if error is None:
        return "" if isinstance(value, dict) else "not an object"
    # keys on the path are the schema's own property names; a list's index is the events' own, so it is not told
    where = "".join("[*]" if isinstance(p, int) else f"[{p!r}]" for p in error.absolute_path) or "the answer"
    return f"{where} breaks the rule {error.validator!r}"


# ---------------------------------------------------------------------------------------------
# Reading a probe's events


def expected_cases(request: dict) -> int:
    return 1 if request["kind"] == "load" else len(request["cases"])


def assemble(events: list[dict], request: dict, redact: bool = False) -> list[CaseOutcome]:
    """Group a probe's events into one CaseOutcome per case of `request` (forwards belong to the case whose answer
    comes after them); `started` of each ForwardCall is its position in the event stream, which orders the calls
    of both models.

    Raises ProbeError if the probe reported a student's exception, NoAnswer if a case has no well-formed answer
    of its own.
    """
    wanted, kind = expected_cases(request), request["kind"]
    cases, forwards, embeddings = [], {r: [] for r in ROLES}, {r: 0 for r in ROLES}
    for position, event in enumerate(events):
        name = event.get("event") if isinstance(event, dict) else None
        if not isinstance(name, str):
            continue
        if name in EVENTS and _malformed(name, event, "event"):
            raise _no_answer(len(cases), wanted, f"a malformed {name} event came instead")
        if name == "forward":
            ids = tuple(event["ids"]) if event.get("ids") is not None else None
            forwards[event["role"]].append(ForwardCall(event["new_tokens"], event["cached_tokens"], 0.0,
                                                       float(position), ids, event.get("padding", 0),
                                                       event.get("training"), event.get("dtype")))
        elif name == "embedding":
            embeddings[event["role"]] += 1
        elif name == "case":
            index = len(cases)
            if index >= wanted:
                raise _no_answer(wanted - 1, wanted, "more answers came than there are cases")
            if event["index"] != index:
                raise _no_answer(index, wanted, "its answer came with another case's number")
            problem = _malformed(kind, event["result"], "result")
            if problem:
                raise _no_answer(index, wanted, f"its answer is malformed: {problem}")
            result = _redacted(event["result"]) if redact else event["result"]
            cases.append(CaseOutcome(result, forwards, embeddings))
            forwards, embeddings = {r: [] for r in ROLES}, {r: 0 for r in ROLES}
        elif name == "error":
            if redact:
                raise ProbeError(METHODS.get(kind, "the notebook's code"), kind=_exception_kind(event["kind"]),
                                 message="")
            raise ProbeError(capped(event["method"], MAX_NAME), kind=capped(event["kind"], MAX_NAME),
                             message=capped(event["message"], MAX_TEXT),
                             student_traceback=_last(event.get("traceback", ""), MAX_TRACEBACK))
    if len(cases) < wanted:
        raise _no_answer(len(cases), wanted, "none came")
    return cases


def _no_answer(index: int, wanted: int, why: str) -> NoAnswer:
    return NoAnswer(f"no answer for case {index + 1} of {wanted}: {why}")


def capped(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying so."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _last(text: str, limit: int) -> str:
    return text if len(text) <= limit else "..." + text[3 - limit:]


def _exception_kind(kind: str) -> str:
    known = isinstance(getattr(builtins, kind, None), type) and issubclass(getattr(builtins, kind), BaseException)
    return kind if known or kind in KIT_EXCEPTIONS else "an exception"


def _redacted(result: dict) -> dict:
    """`result` with every name the student's code chose (a type's, an exception's) read as a common one
    or as "another type"."""
    out = dict(result)
    for key in ("type", "next_shape"):
        if isinstance(out.get(key), str) and out[key] not in KNOWN_TYPES:
            out[key] = "another type"
    if isinstance(out.get("mismatch"), str) and out["mismatch"].startswith("refused: "):
        out["mismatch"] = "refused: " + _exception_kind(out["mismatch"].removeprefix("refused: "))
    return out
