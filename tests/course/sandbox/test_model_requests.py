"""A grading child's model requests are checked against their operation's schema before any work
(`specdec_course.sandbox.model_requests`): whatever a request holds, the model server answers it, with a refusal
for one outside the schema, and never fails itself (a failure of the server is the grader's, an `error` row).

Example run: python -m pytest tests/course/sandbox/test_model_requests.py -q
"""

import json
import math
import time

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec_course.sandbox.model_requests import MAX_NAME, MAX_NEW, MAX_NUMBER, MAX_TOKENS, OPERATIONS, schema
from specdec_course.sandbox.models import ModelServer, NoProgress, OutOfTime

HELD = 1  # the handle of the cache `server()` holds
VOCAB, POSITIONS = 320, 2048  # the tiny pair's: ids and positions the schema admits and the server refuses
VALID = {  # a request of each operation the server runs at once (a few tokens on the tiny pair)
    "crop": {"op": "crop", "cache": HELD, "length": -1},
    "clone": {"op": "clone", "cache": HELD},
    "forward": {"op": "forward", "pair": "tiny", "role": "target", "ids": [[1, 2, 3]], "cache": None},
    "generate": {"op": "generate", "pair": "tiny", "role": "target", "ids": [[1, 2, 3]],
                 "settings": {"max_new_tokens": 2}},
}
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=8)


def server() -> ModelServer:
    """A tiny pair's server holding one cache, HELD, of 3 positions."""
    served = ModelServer(["tiny"])
    served.serve({**VALID["forward"], "use_cache": True}, lambda message: None)
    return served


def reply(request: dict, over=lambda: False) -> tuple[dict, list[dict]]:
    """The header of the server's reply to `request`, and the forwards it ran."""
    sent = []
    events = server().serve(request, sent.append, over=over)
    return json.loads(sent[0]), events


# ---------------------------------------------------------------------------------------------
# Values each field must not take, by what the server documents it takes


def _other(*allowed: type) -> st.SearchStrategy:
    """JSON values of none of the `allowed` types (bool is not int, int is not float here)."""
    def among(value) -> bool:
        return any(type(value) is kind for kind in allowed)
    return JSON.filter(lambda value: not among(value))


def integers(low: int, high: int, nullable: bool = False) -> st.SearchStrategy:
    wrong = _other(int, *([type(None)] if nullable else []))
    return wrong | st.integers(max_value=low - 1) | st.integers(min_value=high + 1) | st.sampled_from(
        [float(low), math.nan, math.inf, True, str(low), [low]])


def numbers(low: float, high: float = math.inf) -> st.SearchStrategy:
    outside = st.floats(max_value=low, exclude_max=True) | (
        st.floats(min_value=high, exclude_min=True) if high < math.inf else st.nothing())
    return _other(int, float, type(None)) | outside | st.sampled_from([math.nan, math.inf, -math.inf, True, "0.5"])


def rows(high: int, nullable: bool = False) -> st.SearchStrategy:
    bad_item = integers(0, high)
    return (_other(list, *([type(None)] if nullable else [])) | st.sampled_from([[], [[]], [[1], [2]], [1, 2],
                                                                                 [[1] * (MAX_TOKENS + 1)]])
            | st.builds(lambda item, at: [[1, 2, 3][:at] + [item] + [1, 2, 3][at:]], bad_item, st.integers(0, 3)))


FLAG = _other(bool, type(None))
NAME = _other(str) | st.text(min_size=MAX_NAME + 1, max_size=MAX_NAME + 8) | st.sampled_from(["", "assistant", "x"])
HANDLE = _other(int) | st.integers().filter(lambda handle: handle != HELD)
ONLY_FALSE = st.sampled_from([True, 0, 1, "", [], {}]) | _other(bool, type(None))
WRONG = {  # op -> field -> values it must not take
    "crop": {"cache": HANDLE, "length": integers(-MAX_NUMBER, MAX_NUMBER)},
    "clone": {"cache": HANDLE},
    "forward": {"pair": NAME, "role": NAME, "ids": rows(MAX_NUMBER) | st.just([[1, VOCAB]]), "mask": rows(1, True),
                "use_cache": FLAG, "position_ids": rows(MAX_NUMBER, True) | st.just([[0, POSITIONS]]),
                "cache_position": _other(list, type(None)) | st.sampled_from([[], [-1], [1.0], [POSITIONS], [[0]]]),
                "logits_to_keep": integers(0, MAX_TOKENS, True),
                "cache": HANDLE.filter(lambda value: value is not None)},
    "generate": {"pair": NAME, "role": NAME, "ids": rows(MAX_NUMBER), "mask": rows(1, True),
                 "settings": _other(dict, type(None))},
}
SETTINGS = {  # generate's settings -> values they must not take
    "max_new_tokens": integers(0, MAX_NEW), "min_new_tokens": integers(0, MAX_NEW, True),
    "max_length": integers(0, MAX_TOKENS + MAX_NEW, True) | st.just(len(VALID["generate"]["ids"][0]) + MAX_NEW + 1),
    "do_sample": FLAG,
    "eos_token_id": integers(0, MAX_NUMBER, True).filter(lambda value: not isinstance(value, list))
    | st.sampled_from([[1] * 65, [1, -1], [1, 2.5], [[1]]]),
    "pad_token_id": integers(0, MAX_NUMBER, True), "temperature": numbers(0), "top_p": numbers(0, 1),
    "top_k": integers(0, MAX_NUMBER, True), "use_cache": FLAG,
    "assistant_model": _other(list, type(None)) | st.sampled_from([[], ["tiny"], ["tiny", "draft", "x"], "tiny",
                                                                   ["tiny", 1], ["tiny", "assistant"],
                                                                   ["scripted", "draft"], ["tiny", "x" * 100]]),
    "num_assistant_tokens": integers(0, MAX_NEW, True),
    "num_assistant_tokens_schedule": st.text().filter(lambda value: value not in ("constant", "heuristic",
                                                                                  "heuristic_transient")),
    "assistant_confidence_threshold": numbers(0, 1), "prompt_lookup_num_tokens": integers(0, MAX_TOKENS, True),
    "return_dict_in_generate": ONLY_FALSE, "output_scores": ONLY_FALSE, "output_logits": ONLY_FALSE,
}
REQUIRED = {"crop": ["cache", "length"], "clone": ["cache"], "forward": ["pair", "role", "ids"],
            "generate": ["pair", "role", "ids"]}
UNKNOWN = st.text(max_size=12).filter(lambda key: all(key not in fields for fields, _ in OPERATIONS.values())
                                      and key not in ("op", "event", *SETTINGS))


def _with(op: str, field: str, value) -> dict:
    return {**VALID[op], field: value}


def _with_setting(field: str, value) -> dict:
    return {**VALID["generate"], "settings": {**VALID["generate"]["settings"], field: value}}


INVALID = st.one_of(
    *(st.builds(_with, st.just(op), st.just(field), wrong) for op, fields in WRONG.items()
      for field, wrong in fields.items()),
    *(st.builds(_with_setting, st.just(field), wrong) for field, wrong in SETTINGS.items()),
    *(st.builds(_with, st.just(op), UNKNOWN, JSON) for op in VALID),
    st.builds(_with_setting, UNKNOWN, JSON),
    st.builds(lambda missing: {key: value for key, value in VALID[missing[0]].items() if key != missing[1]},
              st.sampled_from([(op, field) for op, fields in REQUIRED.items() for field in fields])),
    st.builds(lambda op: {"op": op}, _other(str) | st.text().filter(lambda op: op not in VALID)),
)
SOME_SETTINGS = st.dictionaries(st.sampled_from(list(SETTINGS)) | UNKNOWN, JSON, max_size=4)
ANYTHING = st.fixed_dictionaries({"op": st.sampled_from([*VALID, "load"])},
                                 optional={field: JSON for fields in WRONG.values() for field in fields}) | \
    st.sampled_from(list(VALID.values())).flatmap(lambda valid: st.fixed_dictionaries(
        {key: st.just(value) | JSON | (SOME_SETTINGS if key == "settings" else st.nothing())
         for key, value in valid.items()}, optional={"event": JSON, "logits_to_keep": JSON}))


# ---------------------------------------------------------------------------------------------


def test_each_operations_schema_is_a_schema_and_the_valid_requests_run():
    for op in OPERATIONS:
        jsonschema.Draft202012Validator.check_schema(schema(op))
        header, _ = reply(VALID[op])
        assert header["ok"] is True, (op, header)


def test_a_refusal_names_the_field_and_the_childs_own_value_cut_short():
    header, events = reply(_with_setting("max_length", "x"))
    assert header == {"ok": False, "kind": "ValueError", "data": False,
                      "message": "generate got max_length='x': an integer from 0 to 3072 or None is needed"}, header
    header, _ = reply(_with("forward", "pair", "p" * 1000))
    assert "pair='ppppp" in header["message"] and "p" * 41 not in header["message"], header["message"]


@settings(max_examples=200, deadline=None)
@given(request=INVALID)
def test_an_invalid_request_is_refused_to_the_child_before_any_work(request):
    """Each field of each operation (and of generate's settings) given a value of another type, out of range or too
    large, an unknown field, a missing one or an unknown operation: a refusal the child reads as an exception,
    nothing run, the value it shows cut short; never an exception of the server's."""
    header, events = reply(request)
    assert header["ok"] is False and events == [], (request, header)
    assert header["kind"] == "ValueError" and 0 < len(header["message"]) <= 600, header


@settings(max_examples=150, deadline=None)
@given(request=ANYTHING)
def test_whatever_a_request_holds_the_server_answers_it(request):
    """Any mix of known and unknown fields and values: the server replies, and raises only what it documents
    (OutOfTime within a second, NoProgress), never TypeError, ValueError, KeyError, IndexError or RuntimeError."""
    started = time.monotonic()
    try:
        header, _ = reply(request, over=lambda: time.monotonic() > started + 1)
    except (OutOfTime, NoProgress):
        return
    assert isinstance(header["ok"], bool), header


@pytest.mark.parametrize("request_", [[1, 2], "forward", None])
def test_a_request_that_is_not_an_object_is_refused(request_):
    header, _ = reply(request_)
    assert header["ok"] is False and "JSON object" in header["message"], header
