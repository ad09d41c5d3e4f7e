"""A probe's answers read strictly (`specdec_kit.checks.outcomes`): exactly one well-formed answer per case, in
order, or the check fails; whatever a child sends, reading it raises nothing else.

Example run: python -m pytest tests/kit/checks/test_outcomes.py -q
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec_kit.checks import CheckFailed
from specdec_kit.checks.outcomes import MAX_NAME, MAX_TEXT, MAX_TRACEBACK, NoAnswer, assemble
from specdec_kit.protocol.probes import ProbeError

DECODED = {"type": "DecodeResult", "token_ids": [5, 6], "proposed": [2], "accepted": [1]}
REQUEST = {"kind": "decode", "cases": [["a", 2, 2], ["b", 2, 2], ["c", 2, 2]]}


def answers(count: int, result=DECODED) -> list[dict]:
    return [{"event": "case", "index": i, "result": dict(result)} for i in range(count)] + [{"event": "done"}]


def test_every_case_answered_in_order_is_read():
    got = assemble(answers(3), REQUEST)
    assert [o.result for o in got] == [DECODED] * 3


@pytest.mark.parametrize("events, why", [
    (answers(0), "no answer for case 1 of 3: none came"),
    (answers(2), "no answer for case 3 of 3: none came"),
    (answers(4), "more answers came"),
    (answers(3)[:1] + answers(3)[:1] + answers(3)[2:], "case 2 of 3: its answer came with another case's number"),
    ([answers(3)[1], answers(3)[0], *answers(3)[2:]], "case 1 of 3: its answer came with another case's number"),
    (answers(3, {"type": "DecodeResult", "token_ids": "5 6", "proposed": [], "accepted": []}), "malformed"),
    (answers(3, {"type": "DecodeResult"}), "malformed"),
    ([{"event": "case", "index": 0, "result": [1, 2]}, *answers(3)[1:]], "malformed"),
    ([{"event": "case", "index": "0", "result": DECODED}, *answers(3)[1:]], "malformed case event"),
])
def test_a_missing_extra_repeated_reordered_or_malformed_answer_fails(events, why):
    with pytest.raises(NoAnswer, match=why):
        assemble(events, REQUEST)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                    max_leaves=12)
EVENT = st.one_of(
    st.fixed_dictionaries({"event": st.just("case"), "index": st.integers(-1, 4), "result": JSON}),
    st.fixed_dictionaries({"event": st.sampled_from(["forward", "embedding", "error", "call", "done", "case"])},
                          optional={"role": JSON, "new_tokens": JSON, "cached_tokens": JSON, "ids": JSON,
                                    "index": JSON, "result": JSON, "method": JSON, "kind": JSON, "message": JSON}),
    JSON)


@given(events=st.lists(EVENT, max_size=8), kind=st.sampled_from(["load", "draft", "verify", "decode", "sample"]))
def test_whatever_comes_back_is_read_or_fails_as_a_check(events, kind):
    request = {"kind": kind, "cases": [[1, 2]] * 3}
    try:
        got = assemble(events, request)
    except (CheckFailed, ProbeError):
        return
    assert len(got) == (1 if kind == "load" else 3)


WELL_FORMED = {  # an answer of each kind that `assemble` reads
    "load": {"mismatch": "not tried"},
    "draft": {"type": "Tensor", "shape": [1, 2], "tokens": [5, 6], "repeats": []},
    "verify": {"triple": False, "type": "tuple", "length": 2},
    "decode": DECODED,
    "sample": {"type": "list", "samples": [[5, 6]]},
}


@st.composite
def planted(draw) -> tuple[str, str, int, list]:
    """A probe's kind, and a child's events with its own tokens planted where a message might echo them: a
    12-letter marker (lower case: never an exception's name) and a large integer, as case numbers, keys, values,
    list items, exception text. The events start as the honest answers to some of the cases, so that the later
    ones are read too."""
    kind = draw(st.sampled_from(list(WELL_FORMED)))
    marker = draw(st.text("abcdefghijklmnopqrstuvwxyz", min_size=12, max_size=12))
    number = draw(st.integers(10**9, 10**30)) * draw(st.sampled_from([1, -1]))
    token = st.sampled_from([marker, number, str(number), float(number), marker * 500, [number, marker],
                             {marker: number}])
    text = st.sampled_from([marker, str(number), marker * 500, f"{number}: {marker}"]) | st.text(max_size=12)
    junk = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8) | token,
                        lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=6) | st.just(marker), inner, max_size=4), max_leaves=12)
    numbers = st.lists(st.integers(0, 9) | token, max_size=6)
    result = st.just(WELL_FORMED[kind]) | junk | st.fixed_dictionaries(
        {"type": st.just("DecodeResult") | token, "token_ids": numbers, "proposed": numbers, "accepted": numbers},
        optional={marker: junk})
    index = st.sampled_from([number, -number, number + 1, float(number), 1e300, marker, str(number), -1, 0, 1, 2, 3])
    event = st.one_of(
        st.fixed_dictionaries({"event": st.just("case"), "index": index, "result": result}),
        st.fixed_dictionaries({"event": st.just("error"), "method": text, "kind": text, "message": text},
                              optional={"traceback": text}),
        st.fixed_dictionaries({"event": st.sampled_from(["forward", "embedding", "call", "done", marker])},
                              optional={"role": junk, "new_tokens": junk, "cached_tokens": junk, "ids": junk,
                                        "args": token, marker: token}),
        junk)
    honest, answered = answers(3, WELL_FORMED[kind])[:3], draw(st.integers(0, 3))
    return kind, marker, number, honest[:answered] + draw(st.lists(event, min_size=1, max_size=6)) + honest[answered:]


def echoes(message: str, marker: str, number: int) -> list[str]:
    """The planted tokens `message` holds: the marker, or the integer's digits (give or take one: a case number)."""
    forms = [marker, *(str(abs(n)) for n in (number - 1, number, number + 1)), repr(float(number))]
    return [form for form in forms if form in message]


@settings(max_examples=200, deadline=None)
@given(events=planted(), redact=st.booleans())
def test_no_message_echoes_a_token_the_child_chose(events, redact):
    """Whatever the events hold, a hidden case's failure (`redact`) shows none of it, and "no answer" never does:
    a student who packed the hidden prompts into a case number, a key or an exception's text cannot read them back
    from their page. A visible case's exception shows its own text, each part cut to a length a page can hold."""
    kind, marker, number, events = events
    try:
        assemble(events, {"kind": kind, "cases": [[1, 2]] * 3}, redact=redact)
    except NoAnswer as e:
        assert not echoes(str(e), marker, number), f"{echoes(str(e), marker, number)} echoed in {e}"
    except ProbeError as e:
        shown = f"{e} {e.student_traceback}"
        assert not redact or not echoes(shown, marker, number), f"{echoes(shown, marker, number)} echoed in {e}"
        assert len(e.method) <= MAX_NAME and len(e.kind) <= MAX_NAME and len(e.message) <= MAX_TEXT
        assert len(e.student_traceback) <= MAX_TRACEBACK
