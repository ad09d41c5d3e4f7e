"""The catalogue's `fails` checked against what its entries' checks lose (`specdec_course.selftest.record`): in seconds
against autograder/losses.json, which `specdec-course catalogue --losses --record` writes; an entry the record has not
seen (new, or its edits changed) is run here, in this process, through every check.

Example run: python -m pytest tests/course/selftest/test_record.py -q
"""

import dataclasses
import json
import shutil

import pytest

from specdec_course.selftest import record
from specdec_course.selftest.catalogue import Entry, load_catalogue, make_submission
from specdec_course.selftest.losses import notebook_losses
from specdec_kit.checks.speed import SPEED_TEST

from conftest import REPO, SOLUTION

AUTOGRADER = REPO / "autograder"
ENTRIES = load_catalogue(AUTOGRADER)
RERUN_LIMIT = 2  # entries the record has not seen that CI runs itself (a correct variant's checks: about 2 minutes)
# Every function the checks call first raises: each test fails at its first check, in seconds.
RAISES = "    raise RuntimeError('not written yet')\n"
BROKEN = tuple((line, line + RAISES) for line in (
    "def accept_drafts(logits: torch.Tensor, draft_tokens: torch.Tensor) -> tuple[torch.Tensor, int, torch.Tensor]:\n",
    "def check_k(k: int) -> None:\n",
    "def lookup_drafts(ids: list[int], k: int, max_ngram_size: int = 3) -> list[int]:\n"))


def judged(entry: Entry, tmp_path) -> str | None:
    """`record.agreement` of `entry` with what its checks lose, run here."""
    lost = notebook_losses(make_submission(SOLUTION, entry), tmp_path / f"{entry.name}.ipynb", AUTOGRADER)
    return record.agreement(entry, set(lost))


def test_the_record_is_of_these_checks():
    stale = record.check_record(ENTRIES, SOLUTION, AUTOGRADER).stale_inputs
    assert not stale, (f"autograder/losses.json was made before these changed: {', '.join(stale)}. Run "
                       f"`{record.COMMAND}` (every entry's checks, minutes an entry) and commit the record")


def test_every_recorded_entry_fails_what_its_checks_lost():
    report = record.check_record(ENTRIES, SOLUTION, AUTOGRADER)
    assert not report.disagree, "\n".join(f"{name}: {why}" for name, why in report.disagree.items())
    assert not report.gone, f"the record holds entries the catalogue no longer has: {report.gone}; run " \
                            f"`{record.COMMAND}`"


def test_a_guessed_entry_is_refused_by_the_record():
    """A recorded entry whose `fails` are guessed (one lost test left out; a variant said to lose one more) disagrees
    with the record, in seconds."""
    bug = next(e for e in ENTRIES if e.kind == "bug" and len(e.fails - {SPEED_TEST}) > 1)
    variant = next(e for e in ENTRIES if e.kind == "variant")
    missing = sorted(bug.fails - {SPEED_TEST})[0]
    guessed = [dataclasses.replace(bug, fails=bug.fails - {missing}),
               dataclasses.replace(variant, fails=variant.fails | {"test_exact"})]
    report = record.check_record(guessed, SOLUTION, AUTOGRADER)
    assert set(report.disagree) == {bug.name, variant.name}, report
    assert missing in report.disagree[bug.name] and "its fails say" in report.disagree[bug.name]


def test_the_speed_tests_timing_may_be_added_to_what_the_checks_lose():
    entry = Entry("slow", "", fails=frozenset({SPEED_TEST}))
    assert record.agreement(entry, set()) is None
    assert "test_speedup, lost by timing alone" in record.agreement(Entry("x", ""), {"test_exact"})
    assert record.agreement(Entry("x", ""), {SPEED_TEST}) is not None, "a gate's loss must be named"


def test_a_changed_input_makes_the_record_stale(tmp_path):
    autograder = tmp_path / "autograder"
    shutil.copytree(AUTOGRADER, autograder, ignore=shutil.ignore_patterns("__pycache__"))
    fresh = record.check_record(ENTRIES, SOLUTION, autograder).stale_inputs
    (autograder / "hidden.py").write_text((autograder / "hidden.py").read_text() + "\n# changed\n")
    assert record.check_record(ENTRIES, SOLUTION, autograder).stale_inputs == sorted(
        {*fresh, "autograder: hidden.py"})
    (autograder / record.RECORD).unlink()
    assert "does not exist" in record.check_record(ENTRIES, SOLUTION, autograder).stale_inputs[0]


def test_a_modules_comments_docstrings_and_layout_decide_nothing_its_code_does(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""A module."""\n\n\ndef f(x):\n    """Twice x."""\n    return 2 * x  # doubled\n')
    before = record.code_digest(module)
    module.write_text('"""Another text."""\n\ndef f(x):\n    # a comment\n    return 2 * x\n')
    assert record.code_digest(module) == before, "only comments, docstrings and blank lines changed"
    module.write_text('"""A module."""\n\n\ndef f(x):\n    """Twice x."""\n    return 3 * x\n')
    assert record.code_digest(module) != before, "the code changed"


def test_a_partial_record_on_changed_inputs_is_refused(tmp_path):
    previous = json.loads((AUTOGRADER / record.RECORD).read_text())
    previous["inputs"]["autograder: hidden.py"] = "an older one"
    entries = {e.name: e for e in ENTRIES}
    with pytest.raises(ValueError, match="run every entry"):
        record.measured_record({ENTRIES[0].name: set()}, entries, SOLUTION, AUTOGRADER, previous)


@pytest.mark.slow
def test_entries_the_record_has_not_seen_are_run_through_their_checks(tmp_path):
    unseen = record.check_record(ENTRIES, SOLUTION, AUTOGRADER).unrecorded
    assert len(unseen) <= RERUN_LIMIT, (f"{len(unseen)} entries the record has not seen ({', '.join(unseen)}): more "
                                        f"than CI runs; run `{record.COMMAND}` and commit the record")
    wrong = {e.name: judged(e, tmp_path) for e in ENTRIES if e.name in unseen}
    assert not any(wrong.values()), {name: why for name, why in wrong.items() if why}


@pytest.mark.slow
def test_a_new_entry_with_guessed_fails_is_run_and_refused(tmp_path):
    guessed = Entry("guessed", "every function raises", edits=BROKEN, fails=frozenset({"test_exact"}))
    assert guessed.name in record.check_record([guessed], SOLUTION, AUTOGRADER).unrecorded
    why = judged(guessed, tmp_path)
    assert why is not None and "its fails say test_exact, its checks lose test_" in why, why


def test_catalogue_losses_record_writes_a_record_the_check_accepts(tmp_path, monkeypatch, capsys):
    """`catalogue --losses --record` (the entries' checks replaced by their fails) writes a record that every entry
    agrees with; once an input changes, recording only some entries is refused before any runs."""
    from specdec_course.cli import main
    from specdec_course.selftest import losses

    autograder = tmp_path / "autograder"
    shutil.copytree(AUTOGRADER, autograder, ignore=shutil.ignore_patterns("__pycache__", record.RECORD))
    monkeypatch.setattr(losses, "losses", lambda entry, *args, **kwargs: dict.fromkeys(entry.fails, "CheckFailed"))
    common = ["--autograder", str(autograder), "--solution", str(SOLUTION)]

    def refused_some() -> bool:
        code = main(["catalogue", "--losses", ENTRIES[0].name, "--record", *common])
        return code != 0 and "record every entry" in capsys.readouterr().err

    assert refused_some(), "no record yet: some entries alone are refused"
    assert main(["catalogue", "--losses", "--record", *common]) == 0, capsys.readouterr()
    assert record.check_record(ENTRIES, SOLUTION, autograder) == record.Report()
    (autograder / "hidden.py").write_text((autograder / "hidden.py").read_text() + "\n# changed\n")
    assert refused_some(), "the hidden checks changed: some entries alone are refused"
