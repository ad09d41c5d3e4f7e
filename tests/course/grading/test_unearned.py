"""No outcome, no point: a stand-in for the grading child answers every check of the grading plan (visible and hidden,
the speed test's gate) with what a hostile child could send instead of its honest answers: nothing, too few, too
many, duplicated, out of order, cut short, type-confused, or renumbered. No such answer may pass a check unless it
is the correct decoder's own, and none may crash the judging with anything but a check's failure.

The honest answers are the solution's, recorded once per request by running its probes in this process (what the
grading child would send); the checks then judge them through `outcomes.assemble`, as grading does.

Example run: python -m pytest tests/course/grading/test_unearned.py -q
"""

import copy
import json
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec_course.core.plan import load_plan
from specdec_kit import checks
from specdec_kit.checks.outcomes import assemble
from specdec_kit.protocol import probes
from specdec_kit.protocol.adapters import load_decoder_classes

from conftest import REPO, SOLUTION

pytestmark = pytest.mark.slow  # the honest answers are a full local run of the solution's checks
PLAN = load_plan(REPO / "autograder")
CHECKS = [(test, index, class_name, check) for test, (class_name, test_checks) in PLAN.tests.items()
          for index, check in enumerate(test_checks)]
BROKEN = ("nothing", "drop", "extra", "duplicate", "out_of_order", "cut_short", "type_confused", "not_an_object",
          "missing_field")


@cache
def classes() -> dict[str, type]:
    return load_decoder_classes(SOLUTION, tuple(sorted({name for _, _, name, _ in CHECKS})))


_recorded: dict[tuple[str, str], list[dict]] = {}


def honest(class_name: str, request: dict) -> list[dict]:
    """The solution's events for `request`, as its grading child would send them (recorded once)."""
    key = (class_name, json.dumps(request, sort_keys=True, default=str))
    if key not in _recorded:
        events = []
        probes.run_probe(request, classes()[class_name], events.append, capture=True)
        _recorded[key] = events
    return copy.deepcopy(_recorded[key])


def other_type(value):
    """A value of a JSON type the probe never writes where `value` is: an object for a list, a number or a string
    (no result field holds one), a list for an object."""
    return list(value) if isinstance(value, dict) else {"value": value}


def change(events: list[dict], how: str, data) -> list[dict]:
    """`events` (a probe's stream, ending with `done`) changed `how`."""
    cases = [i for i, e in enumerate(events) if e["event"] == "case"]
    if not cases:
        return events
    pick = data.draw(st.sampled_from(cases), label="case event")
    event = events[pick]
    if how == "nothing":
        return [e for e in events if e["event"] != "case"]
    if how == "drop":
        return events[:pick] + events[pick + 1:]
    if how == "extra":
        return events[:-1] + [{**copy.deepcopy(event), "index": len(cases)}] + events[-1:]
    if how == "duplicate":
        return events[:pick + 1] + [copy.deepcopy(event)] + events[pick + 1:]
    if how == "out_of_order":
        if len(cases) < 2:
            return events[:pick] + events[pick + 1:]
        other = data.draw(st.sampled_from([c for c in cases if c != pick]), label="swapped with")
        swapped = list(events)
        swapped[pick], swapped[other] = swapped[other], swapped[pick]
        return swapped
    if how == "cut_short":
        return events[:pick] + [{"event": "done"}]
    if how == "not_an_object":
        return events[:pick] + [{**event, "result": other_type(event["result"])}] + events[pick + 1:]
    if how in ("type_confused", "missing_field"):
        result = dict(event["result"])
        fields = [k for k, v in result.items() if v is not None]
        if not fields:
            return events[:pick] + events[pick + 1:]
        name = data.draw(st.sampled_from(sorted(fields)), label="field")
        if how == "missing_field":
            del result[name]
        else:
            result[name] = other_type(result[name])
        return events[:pick] + [{**event, "result": result}] + events[pick + 1:]
    raise ValueError(how)


def renumbered(events: list[dict], data) -> list[dict]:
    """The case events' results permuted, their indices kept in order: a complete stream of answers, possibly wrong."""
    cases = [i for i, e in enumerate(events) if e["event"] == "case"]
    order = data.draw(st.permutations(cases), label="answers permuted")
    results = [events[i]["result"] for i in order]
    out = copy.deepcopy(events)
    for i, result in zip(cases, results):
        out[i]["result"] = copy.deepcopy(result)
    return out


class StandIn:
    """A runner that answers the `target`-th request with the solution's events changed `how`, every other one
    honestly; it remembers whether the change was made and whether the changed outcomes equal the honest ones."""

    def __init__(self, class_name: str, how: str, target: int, data):
        self.class_name, self.how, self.target, self.data = class_name, how, target, data
        self.requests, self.changed, self.same = 0, False, True

    def run(self, request: dict):
        events = honest(self.class_name, request)
        if self.requests == self.target:
            sent = renumbered(events, self.data) if self.how == "renumbered" else change(events, self.how, self.data)
            self.changed = sent != events
            if self.how == "renumbered":
                self.same = [e.get("result") for e in sent] == [e.get("result") for e in events]
            events = sent
        self.requests += 1
        return assemble(events, request)


@pytest.mark.parametrize("test, index, class_name, check", CHECKS,
                         ids=[f"{t}-{'visible' if i == 0 else 'hidden'}" for t, i, _, _ in CHECKS])
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_answer_but_the_correct_one_passes(test, index, class_name, check, data):
    how = data.draw(st.sampled_from((*BROKEN, "renumbered")), label="how")
    stand_in = StandIn(class_name, how, data.draw(st.integers(0, 3), label="which request"), data)
    try:
        check(stand_in)
        passed = True
    except (checks.CheckFailed, probes.ProbeError):
        passed = False
    if not stand_in.changed:
        assert passed, f"{test}: the solution's own answers must pass"
    elif how in BROKEN:
        assert not passed, f"{test}: a check passed on answers {how.replace('_', ' ')}"
    else:
        assert not passed or stand_in.same, f"{test}: a check passed on the cases' answers permuted"
