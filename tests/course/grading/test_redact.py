"""What a student reads of a hidden case's failure (`specdec_course.grading.redact`): the check's words, none of the
inputs the grader handed the code, no token ids; and the hidden cases' answers read with no text of the student's code.

Example run: python -m pytest tests/course/grading/test_redact.py -q
"""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specdec_course.grading.redact import HIDDEN_TEXT, HiddenInputs
from specdec_kit.checks import outcomes
from specdec_kit.protocol.probes import ProbeError

from conftest import REPO

WORDS = st.text(st.characters(codec="utf-8", exclude_characters="<>[]\\", exclude_categories=("Cs", "Cc")),
                min_size=8, max_size=60).filter(lambda t: t.strip() == t and t not in HIDDEN_TEXT)
TOKENS = st.lists(st.integers(-5, 50_000), min_size=1, max_size=12)


def shown(text: str, how: int) -> str:
    return (text, repr(text), f"prompt {text!r}", f'"{text}"')[how]


@given(texts=st.lists(WORDS, min_size=1, max_size=4), tokens=st.lists(TOKENS, max_size=3),
       forms=st.lists(st.integers(0, 3), min_size=4, max_size=4), k=st.integers(1, 9))
def test_no_input_and_no_token_list_is_left(texts, tokens, forms, k):
    inputs = HiddenInputs()
    inputs.add({"kind": "decode", "cases": [[text, 30, k] for text in texts]})
    parts = [f"k={k}, {shown(text, forms[i % 4])}: output must equal the target's" for i, text in enumerate(texts)]
    parts += [f"got {list(t)}, expected {[list(t), list(t)]}" for t in tokens]
    scrubbed = inputs.scrub("; ".join(parts))
    for text in texts:
        assert text not in scrubbed and repr(text)[1:-1] not in scrubbed, (text, scrubbed)
    assert not re.search(r"\[\s*-?\d", scrubbed), scrubbed
    assert f"k={k}" in scrubbed and "output must equal" in scrubbed, "the check's own words stay"


def test_the_hidden_checks_inputs_are_scrubbed_from_a_real_message():
    """A hidden check_exact failure names its prompt and tokens; scrubbed, neither is left, its words are."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("hidden_for_test", REPO / "autograder" / "hidden.py")
    hidden = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hidden)
    inputs = HiddenInputs()
    inputs.add({"kind": "decode", "cases": [[p, 36, 3] for p in hidden.PROMPTS]})
    message = (f"k=3, prompt {hidden.PROMPTS[1]!r}: greedy speculative output must equal the target's own greedy "
               "output; first difference at new token 4 (got [11, 12, 13], expected [11, 12, 14]).")
    scrubbed = inputs.scrub(message)
    assert all(p not in scrubbed and repr(p) not in scrubbed for p in hidden.PROMPTS), scrubbed
    assert scrubbed == ("k=3, prompt <hidden prompt>: greedy speculative output must equal the target's own greedy "
                        "output; first difference at new token 4 (got [...], expected [...])."), scrubbed


EVENTS = [{"event": "call", "method": "speculative_decode", "args": "prompt 'Customer: secret'"},
          {"event": "error", "method": "speculative_decode", "kind": "ValueError",
           "message": "I was given 'Customer: secret'", "traceback": "  File '<cell>', line 3\nValueError: ..."}]


@pytest.mark.parametrize("kind, shown_kind", [("ValueError", "ValueError"), ("Customer_secret", "an exception")])
def test_a_hidden_cases_exception_keeps_only_a_known_kind(kind, shown_kind):
    request = {"kind": "decode", "cases": [["Customer: secret", 10, 2]]}
    events = [EVENTS[0], {**EVENTS[1], "kind": kind}, {"event": "done"}]
    with pytest.raises(ProbeError) as raised:
        outcomes.assemble(events, request, redact=True)
    error = raised.value
    assert (error.method, error.kind, error.message, error.student_traceback) == \
        ("speculative_decode", shown_kind, "", "")
    with pytest.raises(ProbeError, match="I was given"):
        outcomes.assemble(events, request)  # a visible case shows the student's own words


@given(name=st.text(min_size=1, max_size=40))
def test_a_hidden_cases_answer_names_no_type_of_the_students_choosing(name):
    request = {"kind": "decode", "cases": [["x", 10, 2]]}
    [outcome] = outcomes.assemble([{"event": "case", "index": 0, "result": {"type": name}}, {"event": "done"}],
                                  request, redact=True)
    assert outcome.result["type"] in outcomes.KNOWN_TYPES | {"another type"}
