"""The one catalogue of known student bugs and correct variants (`autograder/catalogue.py`), which the
selftest grades, these tests run through the checks, and docs/instructors.md lists.

Each bug is the solution with the catalogue's edits, loaded through the seam: every test the entry says it
loses fails here too, in seconds, and one of them says the entry's message. (The speed test's timing, and
"loses nothing else", are the selftest's: it grades every entry through the real grading path. So is "a
correct variant passes every check it does not name": the selftest expects each variant to lose exactly the
tests it names, and `make test-release`'s selftest grades every variant.)

Example run: python -m pytest tests/course/selftest/test_catalogue.py -q
"""

import pytest

from specdec_course.core.plan import SPEED_TEST, load_plan
from specdec_course.selftest.catalogue import Entry, catalogue_table, load_catalogue, make_submission
from specdec_course.selftest.losses import notebook_losses

from conftest import REPO, SOLUTION
from independent import independent

ENTRIES = load_catalogue(REPO / "autograder")
BUGS = [e for e in ENTRIES if e.kind == "bug"]
VARIANTS = [e for e in ENTRIES if e.kind == "variant"]
PLAN = load_plan(REPO / "autograder")
CLASSES = tuple(sorted({class_name for class_name, _ in PLAN.tests.values()}))
TIMED = SPEED_TEST  # its timing is the selftest's; its deterministic gate runs here like any check


def verdicts(entry: Entry, tmp_path, tests) -> dict[str, str]:
    """test -> "" if its checks (visible, then hidden) pass on the entry's classes, else the failure's words."""
    found = notebook_losses(make_submission(SOLUTION, entry), tmp_path / f"{entry.name}.ipynb", REPO / "autograder",
                            tests)
    return {test: found.get(test, "") for test in tests}


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


@pytest.mark.slow
@pytest.mark.release
@pytest.mark.parametrize("entry", BUGS, ids=lambda e: e.name)
def test_bug_fails_the_tests_it_names_with_its_message(entry, tmp_path):
    lost = [t for t in PLAN.tests if t in entry.fails]
    found = verdicts(entry, tmp_path, lost)
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
