"""The one catalogue of known student bugs and correct variants (`autograder/catalogue.py`), which the
selftest grades, these tests run through the checks, and docs/instructors.md lists.

Each bug is the solution with the catalogue's edits, loaded through the seam: every test the entry says it
loses fails here too, in seconds, and one of them says the entry's message. (The speed test's timing, and
"loses nothing else", are the selftest's: it grades every entry through the real grading path. So is "a
correct variant passes every check it does not name": the selftest expects each variant to lose exactly the
tests it names, and `make test-release`'s selftest grades every variant.)

A round that emits no token has one of two causes (`specdec_kit.core.no_progress.CAUSE_WORDS`): a bug whose messages are
about one names its own, and no message of its tests names the other, here in this process and graded through the
sandbox, where the model server sees only forwards and may say that they do not show which.

Example run: python -m pytest tests/course/selftest/test_catalogue.py -q
"""

import dataclasses

import pytest

from specdec_course.core.plan import load_plan
from specdec_course.grading import verdict
from specdec_course.selftest.catalogue import Entry, catalogue_table, load_catalogue, make_submission
from specdec_course.selftest.losses import notebook_losses
from specdec_kit.checks.speed import SPEED_TEST
from specdec_kit.core import settings
from specdec_kit.core.no_progress import CAUSE_WORDS, UNTOLD

from conftest import REPO, SOLUTION
from independent import independent

ENTRIES = load_catalogue(REPO / "autograder")
BUGS = [e for e in ENTRIES if e.kind == "bug"]
VARIANTS = [e for e in ENTRIES if e.kind == "variant"]
PLAN = load_plan(REPO / "autograder")
CLASSES = tuple(sorted({class_name for class_name, _ in PLAN.tests.values()}))
TIMED = SPEED_TEST  # its timing is the selftest's; its deterministic gate runs here like any check
NO_TOKEN = "emits no token"


def causes(entry: Entry) -> set[str]:
    """The causes of a round that emits no token whose words the entry's expected messages hold."""
    return {cause for cause, words in CAUSE_WORDS.items() if any(words in said for _, said in entry.messages)}


NO_TOKEN_BUGS = [e for e in BUGS if causes(e) or NO_TOKEN in e.message
                 or any(NO_TOKEN in said for _, said in e.messages)]


def verdicts(entry: Entry, tmp_path, tests) -> dict[str, str]:
    """test -> "" if its checks (visible, then hidden) pass on the entry's classes, else the failure's words."""
    found = notebook_losses(make_submission(SOLUTION, entry), tmp_path / f"{entry.name}.ipynb", REPO / "autograder",
                            tests)
    return {test: found.get(test, "") for test in tests}


@pytest.fixture(scope="module")
def lost_tests(tmp_path_factory):
    """entry -> `verdicts` of the tests it names, found once for every test here that reads them."""
    found = {}

    def of(entry: Entry) -> dict[str, str]:
        if entry.name not in found:
            found[entry.name] = verdicts(entry, tmp_path_factory.mktemp(entry.name),
                                         [t for t in PLAN.tests if t in entry.fails])
        return found[entry.name]
    return of


def wrong_causes(entry: Entry, messages: dict[str, str], untold_allowed: bool) -> dict[str, str]:
    """The messages that name a cause of a round that emits no token other than the entry's own (any, for an entry
    that names none), or name a cause without its own; with `untold_allowed`, the other beside its own where the
    message says the evidence does not show which."""
    own = causes(entry)
    wrong = {}
    for test, said in messages.items():
        named = {cause for cause, words in CAUSE_WORDS.items() if words in said}
        others = named - own
        if named and (not own & named or (others and not (untold_allowed and UNTOLD in said))):
            wrong[test] = said
    return wrong


def test_catalogue_covers_bugs_and_variants():
    assert len(BUGS) >= 12 and len(VARIANTS) >= 5, f"{len(BUGS)} bugs and {len(VARIANTS)} variants"
    assert all(e.fails for e in BUGS), f"a bug loses a test: {[e.name for e in BUGS if not e.fails]}"
    assert {t for e in ENTRIES for t in e.fails} <= set(PLAN.tests), "every test an entry names exists"


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_entry_applies_to_the_solution(entry):
    """Every edit still finds its text exactly once, so a change of the solution cannot void an entry silently."""
    make_submission(SOLUTION, entry)


def test_a_stale_entry_is_refused():
    with pytest.raises(ValueError, match="occurs 0 times"):
        make_submission(SOLUTION, Entry("stale", "", edits=(("no such code", ""),)))


def test_every_bug_says_what_each_lost_tests_message_must_hold():
    untold = {e.name: sorted(e.fails - {TIMED} - dict(e.messages).keys()) for e in BUGS}
    stray = {e.name: sorted(dict(e.messages).keys() - e.fails) for e in BUGS}
    assert not any(untold.values()) and not any(stray.values()), (
        f"each bug's `messages` name every test it loses, the speed test's timing aside: missing {untold}, "
        f"not lost {stray}"
    )


def test_every_bug_about_a_round_that_emits_no_token_names_its_one_cause():
    """Such a bug's expected messages hold the words of one cause (a verifier's slice one position late, or the
    target's token dropped), and the catalogue has bugs of both."""
    named = {e.name: sorted(causes(e)) for e in NO_TOKEN_BUGS}
    assert all(len(c) == 1 for c in named.values()), \
        f"each bug whose messages are about a round that emits no token names one cause ({CAUSE_WORDS}): {named}"
    assert {c for said in named.values() for c in said} == set(CAUSE_WORDS), \
        f"the catalogue has a bug of each cause of a round that emits no token: {named}"


@pytest.mark.slow
@pytest.mark.release
@pytest.mark.parametrize("entry", BUGS, ids=lambda e: e.name)
def test_bug_fails_the_tests_it_names_with_its_message(entry, lost_tests):
    found = lost_tests(entry)
    gated = {t: words for t, words in found.items() if t != TIMED or words}  # a timing failure shows only when timed
    passed = [t for t, words in gated.items() if not words]
    assert not passed, f"{entry.name} should fail {passed} too (the catalogue says it loses {sorted(entry.fails)})"
    if entry.fails == {TIMED} and not found[TIMED]:
        return  # slow, and nothing else: only the timing shows it, so the selftest finds its message on its page
    assert any(entry.message in words for words in found.values()), \
        f"{entry.name}: no failing check says {entry.message!r}; they said {found}"
    unnamed = {test: found[test] for test, words in entry.messages if words not in found[test]}
    assert not unnamed, f"{entry.name}: these tests' messages should name the cause ({dict(entry.messages)}): " \
                        f"{unnamed}"


@pytest.mark.slow
@pytest.mark.release
@pytest.mark.parametrize("entry", BUGS, ids=lambda e: e.name)
def test_a_bugs_messages_name_no_cause_of_an_empty_round_but_its_own(entry, lost_tests):
    """Where the kit sees the verifier's return, as in a notebook: a bug that drops the target's token is never told
    that its slice starts one position late, nor a late slice that it drops the token, nor another bug either."""
    wrong = wrong_causes(entry, lost_tests(entry), untold_allowed=False)
    assert not wrong, f"{entry.name} names {sorted(causes(entry)) or 'no cause'} of a round that emits no token " \
                      f"({CAUSE_WORDS}); these messages say otherwise: {wrong}"


@pytest.mark.slow
@pytest.mark.release
@pytest.mark.parametrize("entry", [e for e in NO_TOKEN_BUGS if causes(e)], ids=lambda e: e.name)
def test_a_graded_no_token_bug_is_told_its_own_cause(entry):
    """Graded through the sandbox, where the model server stops a decode that sends the target one input again and
    again from the forwards alone: each message names the bug's own cause, the other only beside it where the
    forwards do not show which, and at least one names its own alone."""
    tests = {t: spec for t, spec in PLAN.tests.items() if t in entry.fails and t != TIMED}
    judged = verdict.judge(make_submission(SOLUTION, entry), dataclasses.replace(PLAN, tests=tests),
                           threads=settings.test_threads())
    messages = {test: result.message for test, result in judged.tests.items() if not result.passed}
    wrong = wrong_causes(entry, messages, untold_allowed=True)
    assert not wrong, f"{entry.name}, graded: these messages name another cause than {sorted(causes(entry))}: {wrong}"
    [own] = causes(entry)
    assert any(CAUSE_WORDS[own] in said and UNTOLD not in said for said in messages.values()), \
        f"{entry.name}, graded: no message names its cause ({CAUSE_WORDS[own]!r}) alone: {messages}"


def test_instructors_page_lists_the_catalogue():
    table = catalogue_table(ENTRIES)
    assert table in (REPO / "docs" / "instructors.md").read_text(), \
        f"docs/instructors.md's table of known bugs is stale; put in its place what specdec-course catalogue " \
        f"prints:\n{table}"



@pytest.mark.slow
@pytest.mark.release
def test_an_independently_written_solution_passes_every_check(tmp_path):
    """The report's similarity test pairs it with nothing; it must be correct code, or that proves little."""
    failed = notebook_losses(independent(), tmp_path / "independent.ipynb", REPO / "autograder",
                             [t for t in PLAN.tests if t != TIMED])
    assert not failed, f"the independent solution is correct code and must pass; failed {failed}"
