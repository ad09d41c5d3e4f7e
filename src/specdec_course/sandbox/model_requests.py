"""A grading child's model requests, checked before any work: a JSON Schema per operation (`op`: crop, clone,
forward, generate) gives every field the model server reads its type, range and size, and no other field is taken.

    check(request)   # None, or Refused("generate got max_length='x': an integer from 0 to 3072 or None is needed")

A request outside its schema is Refused, in words for the student's code: the reply goes back to the child alone,
as an exception of its code (whose text a hidden case's failure never shows, `specdec_kit.checks.outcomes`), so it
may show the child's own value, cut to SHOWN characters. What a schema cannot know (the pairs a server holds, a
model's vocabulary and positions, the caches it keeps, a generate's length against its prompt) the server checks
itself (`models.py`), still before any work.
"""

from __future__ import annotations

import math
import reprlib
from functools import cache

from specdec_kit.core.timing import DTYPES

MAX_ROWS = 1  # the decoders work on batch size 1
MAX_TOKENS = 2048  # positions fed in one request (the pairs' longest context)
MAX_NEW = 1024  # new tokens of one generate
MAX_NUMBER = 2**31 - 1  # any id, position or length: far past every real one, well within the models' int64
MAX_NAME = 64  # characters of a pair's or a role's name
SHOWN = 40  # characters of a refused value its reply shows


class Refused(ValueError):
    """A request the grader does not run (its reply says why)."""


def _integer(low: int, high: int, nullable: bool = False) -> tuple[dict, str]:
    rule = {"type": ["integer", "null"] if nullable else "integer", "minimum": low, "maximum": high}
    return rule, f"an integer from {low} to {high}{_or_none(nullable)} is needed"


def _number(low: float, high: float | None = None) -> tuple[dict, str]:
    rule = {"type": ["number", "null"], "minimum": low, **({"maximum": high} if high is not None else {})}
    bounds = f"from {low} to {high}" if high is not None else f"of at least {low}"
    return rule, f"a finite number {bounds} or None is needed"


def _rows(high: int, nullable: bool = False) -> tuple[dict, str]:
    """`MAX_ROWS` row(s) of 1 to MAX_TOKENS integers in 0..high (sizes first: a huge list fails before its items)."""
    row = {"type": "array", "minItems": 1, "maxItems": MAX_TOKENS, "items": {"type": "integer", "minimum": 0,
                                                                             "maximum": high}}
    rule = {"type": ["array", "null"] if nullable else "array", "minItems": 1, "maxItems": MAX_ROWS, "items": row}
    values = "zeros and ones" if high == 1 else f"whole numbers from 0 to {high}"
    return rule, (f"{MAX_ROWS} row of 1 to {MAX_TOKENS} {values}{_or_none(nullable)} is needed: the decoders work "
                    "on batch size 1")


def _or_none(nullable: bool) -> str:
    return " or None" if nullable else ""


FLAG = {"type": ["boolean", "null"]}, "True, False or None is needed"
NAME = {"type": "string", "maxLength": MAX_NAME}, f"a name of at most {MAX_NAME} characters is needed"
SEQUENCES_ONLY = {"enum": [False, None]}, "False or None is needed: generate returns the sequences only while grading"

# Each field: (its schema, the refusal's words on what is needed). `op` is each operation's own; `event` tags a
# child's message on its channel.
COMMON = {"op": ({"type": "string"}, "an operation is needed"), "event": ({"const": "model"}, "'model' is needed")}
SETTINGS = {  # generate's keyword arguments taken while grading (HF's names)
    "max_new_tokens": ({"type": "integer", "minimum": 0, "maximum": MAX_NEW},
                       f"an integer from 0 to {MAX_NEW} is needed: generate makes at most {MAX_NEW} new tokens "
                       "while grading"),
    "min_new_tokens": _integer(0, MAX_NEW, nullable=True),
    "max_length": _integer(0, MAX_TOKENS + MAX_NEW, nullable=True),
    "do_sample": FLAG,
    "eos_token_id": ({"type": ["integer", "array", "null"], "minimum": 0, "maximum": MAX_NUMBER, "maxItems": 64,
                      "items": {"type": "integer", "minimum": 0, "maximum": MAX_NUMBER}},
                     f"a token id from 0 to {MAX_NUMBER}, a list of at most 64 of them or None is needed"),
    "pad_token_id": _integer(0, MAX_NUMBER, nullable=True),
    "temperature": _number(0),
    "top_p": _number(0, 1),
    "top_k": _integer(0, MAX_NUMBER, nullable=True),
    "use_cache": FLAG,
    "assistant_model": ({"type": ["array", "null"], "minItems": 2, "maxItems": 2, "items": NAME[0]},
                        "one of the models this decoder was given, or None, is needed"),
    "num_assistant_tokens": _integer(0, MAX_NEW, nullable=True),
    "num_assistant_tokens_schedule": ({"enum": ["constant", "heuristic", "heuristic_transient", None]},
                                      "'constant', 'heuristic', 'heuristic_transient' or None is needed"),
    "assistant_confidence_threshold": _number(0, 1),
    "prompt_lookup_num_tokens": _integer(0, MAX_TOKENS, nullable=True),
    "return_dict_in_generate": SEQUENCES_ONLY,
    "output_scores": SEQUENCES_ONLY,
    "output_logits": SEQUENCES_ONLY,
}
CACHE = {"type": "integer"}, "the handle of a cache a forward returned is needed"
MODEL = {"pair": NAME, "role": NAME, "ids": _rows(MAX_NUMBER), "mask": _rows(1, nullable=True)}
OPERATIONS = {  # op -> (its fields, those it needs)
    "crop": ({"cache": CACHE, "length": _integer(-MAX_NUMBER, MAX_NUMBER)}, ["cache", "length"]),
    "clone": ({"cache": CACHE}, ["cache"]),
    "forward": ({**MODEL, "use_cache": FLAG, "position_ids": _rows(MAX_NUMBER, nullable=True),
                 "cache_position": ({"type": ["array", "null"], "minItems": 1, "maxItems": MAX_TOKENS,
                                     "items": {"type": "integer", "minimum": 0, "maximum": MAX_NUMBER}},
                                    f"1 to {MAX_TOKENS} positions from 0 to {MAX_NUMBER} or None is needed"),
                 "logits_to_keep": _integer(0, MAX_TOKENS, nullable=True),
                 "cache": ({"type": ["integer", "null"]},
                           "the handle of a cache a forward returned, or None, is needed"),
                 "training": FLAG, "dtype": ({"enum": [*DTYPES, "other", None]},
                                             f"one of {', '.join(DTYPES)}, 'other' or None is needed")},
                ["pair", "role", "ids"]),
    "generate": ({**MODEL, "settings": ({"type": ["object", "null"], "additionalProperties": False,
                                        "properties": {name: rule for name, (rule, _) in SETTINGS.items()}},
                                       "generate's keyword arguments or None is needed")},
                 ["pair", "role", "ids"]),
}


def schema(op: str) -> dict:
    """`op`'s request: unknown fields first, then missing ones, then each field's own rules."""
    fields, needed = OPERATIONS[op]
    return {"type": "object", "additionalProperties": False, "required": needed,
            "properties": {name: rule for name, (rule, _) in {**COMMON, **fields}.items()}}


def check(request) -> None:
    """Refuse `request` unless it is a known operation's, every field within its schema."""
    if not isinstance(request, dict):
        raise Refused("a model request is a JSON object")
    op = request.get("op")
    if not isinstance(op, str) or op not in OPERATIONS:
        raise Refused(f"unknown request {shown(op)}")
    error = next(iter(_validator(op).iter_errors(request)), None)
    if error is not None:
        raise Refused(_why(op, request, error))


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxstring, _SHORT.maxlong = 2, 4, 4, SHOWN, SHOWN


def shown(value) -> str:
    """The child's own `value` as its reply shows it: a repr cut to SHOWN characters, cheap for a huge list."""
    text = _SHORT.repr(value)
    return text if len(text) <= SHOWN else text[:SHOWN - 3] + "..."


def _why(op: str, request: dict, error) -> str:
    """The refusal for the first place `op`'s request leaves its schema, named by the field (or setting) there."""
    path, fields, holder = list(error.absolute_path), {**COMMON, **OPERATIONS[op][0]}, request
    if path[:1] == ["settings"] and (len(path) > 1 or error.validator == "additionalProperties"):
        path, fields, holder = path[1:], SETTINGS, request["settings"]
    if not path:  # the request (or its settings) as a whole: a field unknown, or one missing
        if error.validator == "additionalProperties":
            unknown = next(name for name in holder if name not in fields)
            return f"{op} takes, while grading, only {sorted(fields)}: not {shown(unknown)}"
        missing = next(name for name in error.validator_value if name not in holder)
        return f"{op} got no {missing}: {fields[missing][1]}"
    name = path[0]
    return f"{op} got {name}={shown(holder[name])}: {fields[name][1]}"


@cache
def _validator(op: str):
    import jsonschema

    base = jsonschema.Draft202012Validator
    strict = base.TYPE_CHECKER.redefine_many({
        "integer": lambda _, value: isinstance(value, int) and not isinstance(value, bool),  # not 2.0, not True
        "number": lambda _, value: isinstance(value, (int, float)) and not isinstance(value, bool) and (
            isinstance(value, int) or math.isfinite(value)),  # JSON from Python may hold NaN and Infinity
    })
    return jsonschema.validators.extend(base, type_checker=strict)(schema(op))
