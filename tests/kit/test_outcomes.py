"""A probe's answers read strictly (`specdec_kit.checks.outcomes`): exactly one well-formed answer per case, in
order, or the check fails; whatever a child sends, reading it raises nothing else.

Example run: python -m pytest tests/kit/test_outcomes.py -q
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specdec_kit.checks import CheckFailed
from specdec_kit.checks.outcomes import NoAnswer, assemble
from specdec_kit.probes import ProbeError

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
    (answers(3)[:1] + answers(3)[:1] + answers(3)[2:], "the answer for case 1 came in its place"),
    ([answers(3)[1], answers(3)[0], *answers(3)[2:]], "the answer for case 2 came in its place"),
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
