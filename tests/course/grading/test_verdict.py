"""The verdict: every check's probes run in a child process, the judging here; a hang, a crash or a tamper
costs only what it touches, and no top-level statement of a submission runs. (A hang and hidden forwards are
judged where tests/test_corpora.py grades the same edits as a class, not a second time here.)

Example run: python -m pytest tests/course/grading/test_verdict.py -q
"""

import dataclasses
import functools
from concurrent.futures import ThreadPoolExecutor

import nbformat
import pytest

from specdec_course.core.plan import load_plan
from specdec_course.grading import speed, verdict
from specdec_kit import checks
from specdec_kit.checks.speed import EXACT_BEFORE_TIMING, NOT_EXACT, SPEED_TEST
from specdec_kit.core import settings

from conftest import REPO
from corpora import (
    AUTO,
    HOG,
    SPECULATIVE_DECODE,
    blank,
    edited,
    solved,
    with_cell,
)

# The grading child's torch threads: the judging process waits on it, so it may use the cores a test has.
judge = functools.partial(verdict.judge, threads=settings.test_threads())
FAST_CHECK_SECONDS = 40  # of the submission's own time: the solution's checks use under 25 s (test_exact's, served)


@pytest.fixture(scope="module")
def plan():
    """The course's plan without the timed test (timed below on its own), with short check limits."""
    full = load_plan(REPO / "autograder")
    tests = {name: spec for name, spec in full.tests.items() if name != SPEED_TEST}
    return dataclasses.replace(full, tests=tests, check_seconds=FAST_CHECK_SECONDS)


@pytest.fixture(scope="module")
def parts(plan):
    """The plan's tests of Parts 1 and 2 (the auto-graded points): for a tamper of those parts, whose bonus checks
    would add a third to the verdict's time and nothing to the point."""
    return dataclasses.replace(plan, tests={name: spec for name, spec in plan.tests.items() if name in AUTO})


def lost(judged: verdict.Verdict) -> set[str]:
    return {test for test, result in judged.tests.items() if not result.passed}


@pytest.mark.slow
@pytest.mark.release
def test_solution_passes_every_check_from_outside(plan, tmp_path):
    judged = judge(solved(), plan, log=tmp_path / "child.log")
    assert lost(judged) == set(), f"the solution must pass every test; failed: " \
                                  f"{ {t: r.message for t, r in judged.tests.items() if not r.passed} }"
    assert all(r.visible_passed for r in judged.tests.values()), "each test's visible check passed too"
    assert judged.load_problems == [] and judged.not_run == [], \
        f"the solution's cells load cleanly; got {judged.load_problems}, not run {judged.not_run}"


@pytest.mark.slow
def test_blank_release_fails_every_test_naming_the_stub(plan):
    judged = judge(blank(), plan)
    assert lost(judged) == set(plan.tests), f"the blank must fail every test; passed {set(plan.tests) - lost(judged)}"
    for test, result in judged.tests.items():
        assert "NotImplementedError" in result.message, f"{test} should name the stub; said {result.message!r}"


@pytest.mark.slow
def test_top_level_statements_never_run(plan):
    """A cell that replaces the checks at top level (or anything else that is not a definition) is listed, not run."""
    tamper = "from specdec_kit import checks\nchecks.require = lambda *a: None\nprint('experiment')\n"
    judged = judge(with_cell(blank(), tamper, after="imports"), plan)
    assert lost(judged) == set(plan.tests), "replacing the checks in a cell must not pass anything"
    assert [item.split(": ", 1)[1] for item in judged.not_run] == ["checks.require = lambda *a: None",
                                                                   "print('experiment')"], judged.not_run


@pytest.mark.slow
def test_a_crash_costs_only_the_checks_it_crashes(parts):
    crash = "        if draft_tokens.shape[1] == 8:\n            import ctypes\n            ctypes.string_at(0)\n"
    start = "        sequence = torch.cat([input_ids, draft_tokens], dim=1)\n        mask = "
    judged = judge(edited(solved(), start, crash + start), parts)
    assert lost(judged) == {"test_verify_alignment"}, f"only the check with k=8 crashes; failed {lost(judged)}"
    message = judged.tests["test_verify_alignment"].message
    assert "segmentation fault" in message, f"the crashed check should name the segfault: {message}"


@pytest.mark.slow
def test_a_method_cannot_rewrite_the_judge(parts):
    """Replacing the checks from inside a method changes the child's copy, never the judge's."""
    patch = ("        import specdec_kit.checks as c\n"
             "        c.require = lambda *a, **k: None\n"
             "        c.check_exact = lambda *a, **k: None\n")
    notebook = edited(solved(), "        encoded = self.target_tokenizer(prompt, return_tensors=\"pt\")",
                      patch + "        return DecodeResult('', [0], [0], [0])\n        encoded = "
                              "self.target_tokenizer(prompt, return_tensors=\"pt\")")
    judged = judge(notebook, parts)
    expected = {"test_exact", "test_eos_and_budget", "test_counts", "test_cached_exact", "test_cache_use"}
    assert expected <= lost(judged), \
        f"a made-up result should lose {sorted(expected)} whatever the checks became; lost {sorted(lost(judged))}"
    assert checks.require.__module__ == "specdec_kit.checks.failure", "the grading process's checks are untouched"


@pytest.mark.slow
def test_speed_is_timed_here_and_stored_answers_do_not_help(tmp_path, monkeypatch):
    """The reference clears the bar; a decoder that serves answers stored for the course's timing prompts (keyed by
    their text, filled in the untimed warm-up) gives the wrong tokens on the unseen prompts that are timed. On a CPU
    a run is measured by its cost, which other timings beside it do not change: no wait for the machine's timing
    lock, which another grader may hold for minutes."""
    monkeypatch.setenv("SPECDEC_SELFTEST", "1")  # one timed repeat

    def held_elsewhere(*args, **kwargs):
        raise AssertionError("the speed test took the machine-wide timing lock")

    monkeypatch.setattr(checks, "timing_lock", held_elsewhere)
    full = load_plan(REPO / "autograder")
    plan = dataclasses.replace(full, tests={SPEED_TEST: full.tests[SPEED_TEST]})
    judged = judge(solved(), plan)
    assert judged.tests[SPEED_TEST].passed, judged.tests[SPEED_TEST].message
    assert judged.speed["vs_hf_assisted"] >= plan.min_ratio and judged.speed["runs"] == 2, judged.speed
    stored = ("        key = (prompt[:40], max_tokens, num_speculative_tokens)\n"
              "        memo = type(self).__dict__.get('_memo') or {}\n"
              "        type(self)._memo = memo\n"
              "        if key not in memo:\n"
              "            memo[key] = super().speculative_decode(prompt, max_tokens, num_speculative_tokens)\n"
              "        return memo[key]\n")
    reset = "        self.reset_caches()  # a new prompt shares nothing with the last one\n"
    kept = edited(solved(), reset, reset + stored)
    result = judge(nbformat.from_dict(kept), plan).tests[SPEED_TEST]
    assert not result.passed and "leaves target greedy" in result.message, result.message


@pytest.mark.slow
def test_a_decoder_that_lost_cached_exact_is_not_timed():
    """The speed test's outcome for a wrong decoder is the same whatever a run's timing draws: a decoder whose tokens
    go wrong only on some prompts may give the right ones on a run's timed prompts, so the speed test takes
    test_cached_exact's verdict (the grader's cases, the same in every run) before it times anything. This one is
    wrong on the course's prompts and right on the short ones of the speed test's first check."""
    full = load_plan(REPO / "autograder")
    plan = dataclasses.replace(full, tests={test: full.tests[test] for test in (EXACT_BEFORE_TIMING, SPEED_TEST)})
    reset = "        self.reset_caches()  # a new prompt shares nothing with the last one\n"
    wrong = ("        if len(prompt) > 20:\n"
             "            got = super().speculative_decode(prompt, max_tokens, num_speculative_tokens)\n"
             "            tokens = [*got.token_ids[:-1], got.token_ids[-1] + 1]\n"
             "            return DecodeResult(got.text, tokens, got.proposed, got.accepted)\n")
    judged = judge(edited(solved(), reset, reset + wrong), plan)
    assert not judged.tests[EXACT_BEFORE_TIMING].passed, "its last token is wrong on the course's prompts"
    assert judged.tests[SPEED_TEST].message == NOT_EXACT and judged.speed is None, \
        f"not timed, and saying why: {judged.tests[SPEED_TEST].message!r}, measured {judged.speed}"


def test_timed_prompts_are_drawn_afresh_from_the_operating_system():
    """Each timed run's number comes from the operating system's randomness: seeding Python's and torch's generators
    (all a submission or the repository could fix) leaves the draws apart."""
    import random

    import torch

    from specdec_kit.core.prompts import load_prompts

    prompt = load_prompts()[0]
    draws = set()
    for _ in range(20):
        random.seed(0)
        torch.manual_seed(0)
        unseen = speed._unseen(prompt)
        assert unseen.text.startswith(prompt.text + " ") and unseen.text[-6:].isdigit(), unseen.text
        draws.add(unseen.text)
    assert len(draws) >= 19, f"20 draws under the same seeds gave {len(draws)} prompts"


def test_plan_pairs_each_test_cell_with_its_visible_and_hidden_checks():
    """The grading plan (autograder/hidden.py's TESTS) runs what each test cell of the solution calls."""
    import ast

    from conftest import SOLUTION

    plan = load_plan(REPO / "autograder")
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source for c in nbformat.read(SOLUTION, as_version=4).cells
             if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"}
    assert set(cells) == set(plan.tests), f"plan tests {sorted(plan.tests)} != test cells {sorted(cells)}"
    for test, source in cells.items():
        calls = []
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.args):
                continue
            if node.func.attr == "run_test":  # checks.run_test("test_x", checks.check_x, Class): the visible check
                named, check, decoder = node.args
                assert named.value == test, f"{test}'s cell runs its check under the name {named.value!r}"
                calls.append((check.value.id, check.attr, decoder.id))
            elif isinstance(node.args[0], ast.Name):
                calls.append((node.func.value.id, node.func.attr, node.args[0].id))
        class_name, test_checks = plan.tests[test]
        if test == SPEED_TEST:
            assert calls == [("checks", "check_speedup", class_name)] and test_checks == [checks.gate_rounds], \
                f"{test}: the grader gates with checks.gate_rounds, then times; the cell calls {calls}"
            continue
        planned = [("checks" if f.__module__.startswith("specdec_kit.checks") else "hidden", f.__name__, class_name)
                   for f in test_checks]
        assert planned == calls, f"{test}: the plan runs {planned}, the cell calls {calls}"



def test_a_plan_that_times_before_cached_exact_is_refused(tmp_path):
    """The grader runs the hidden checks in TESTS' order and times the speed test only after test_cached_exact's whole
    verdict (visible and hidden): a TESTS listing the speed test first would time on the visible cases alone."""
    import shutil

    autograder = tmp_path / "autograder"
    shutil.copytree(REPO / "autograder", autograder, ignore=shutil.ignore_patterns("__pycache__"))
    hidden = autograder / "hidden.py"
    hidden.write_text(hidden.read_text()
                      + f"TESTS = {{t: TESTS[t] for t in sorted(TESTS, key=lambda t: t != {SPEED_TEST!r})}}\n")
    with pytest.raises(ValueError, match=f"TESTS lists {SPEED_TEST} before {EXACT_BEFORE_TIMING}"):
        load_plan(autograder)

@pytest.mark.slow
def test_children_leave_no_working_folder_behind(plan):
    """Each child works in a folder of its own, removed with it, also when it was killed mid-check."""
    import tempfile
    from pathlib import Path

    def folders():
        return set(Path(tempfile.gettempdir()).glob("specdec-child-*"))

    before = folders()
    crash = "        import os\n        os._exit(1)\n"
    judged = judge(edited(solved(), SPECULATIVE_DECODE, SPECULATIVE_DECODE + crash),
                   dataclasses.replace(plan, tests={"test_exact": plan.tests["test_exact"]}))
    assert "exited (status 1)" in judged.tests["test_exact"].message, judged.tests["test_exact"].message
    assert folders() == before, f"left behind: {sorted(folders() - before)}"


def test_a_timing_waits_for_checks_in_flight_and_holds_back_new_ones():
    """Parallel jobs: no check of another job runs while a speed test is timed, and a check's wait is not
    counted against its time limit."""
    import threading
    import time

    from specdec_course.sandbox.timing_gate import Quiet

    quiet, log = Quiet(patience=5), []

    def check(name: str, seconds: float):
        with quiet.check() as waited:
            log.append((name, "start", round(waited, 1)))
            time.sleep(seconds)
            log.append((name, "end", None))

    first = threading.Thread(target=check, args=("in flight", 0.3))
    first.start()
    time.sleep(0.05)
    with quiet.timing():
        log.append(("timing", "start", None))
        later = threading.Thread(target=check, args=("later", 0.0))
        later.start()
        time.sleep(0.3)
        log.append(("timing", "end", None))
    later.join()
    first.join()
    order = [(name, event) for name, event, _ in log]
    assert order == [("in flight", "start"), ("in flight", "end"), ("timing", "start"), ("timing", "end"),
                     ("later", "start"), ("later", "end")], f"events out of order: {log}"
    assert log[4][2] >= 0.2, f"the later check waited for the timing and is told so; got {log[4]}"


@pytest.mark.slow
def test_a_stall_costs_its_own_budget_and_names_where(plan):
    """A decoder that sleeps when graded: each check waits its own limit only until the notebook's budget is spent,
    then the tests left fail unjudged and the verdict says where grading stopped."""
    start = "        encoded = self.target_tokenizer(prompt, return_tensors=\"pt\")"
    sleeping = edited(solved(), start, "        import time\n        time.sleep(3600)\n" + start)
    short = dataclasses.replace(plan, check_seconds=8, verdict_seconds=20)
    import time

    started = time.monotonic()
    judged = judge(sleeping, short)
    seconds = time.monotonic() - started
    assert judged.out_of_time, "the verdict must say in which test the budget ran out"
    unjudged = [t for t, r in judged.tests.items() if r.message.startswith("not judged")]
    assert unjudged, f"the tests after the budget ran out are not judged; got {lost(judged)}"
    assert seconds < short.verdict_seconds + 60, f"the budget bounds the verdict: it took {seconds:.0f} s"


@pytest.mark.slow
def test_a_submissions_largest_requests_cost_nobody_else(plan):
    """Two jobs at once, as `--jobs 2` grades them (one torch thread each): beside a submission that sends the largest
    model requests the caps allow, a correct one gets the same verdict in at most 1.5x the seconds it takes alone,
    the time each waited for a core that other work on the machine held left out (the grader's limits leave it out).
    Each request stops at its check's deadline, on its job's own copy of the models."""
    order = ("test_eos_and_budget", "test_exact", "test_counts")  # the hog's requests start with the first check
    short = dataclasses.replace(plan, tests={test: plan.tests[test] for test in order})
    one = functools.partial(verdict.judge, plan=short, threads=1)

    def seconds(judged: verdict.Verdict) -> float:
        return sum(result.seconds - result.waited for result in judged.tests.values())

    alone = one(solved())
    with ThreadPoolExecutor(2) as pool:
        hog = pool.submit(one, edited(solved(), SPECULATIVE_DECODE, SPECULATIVE_DECODE + HOG))
        beside = pool.submit(one, solved()).result()
        hogged = hog.result()
    assert lost(alone) == lost(beside) == set(), {t: r.message for t, r in beside.tests.items() if not r.passed}
    assert seconds(beside) <= 1.5 * seconds(alone), f"alone {seconds(alone):.1f} s, beside {seconds(beside):.1f} s"
    assert lost(hogged) == {"test_eos_and_budget"}, {t: r.message for t, r in hogged.tests.items() if not r.passed}
    assert f"did not return within {FAST_CHECK_SECONDS} s" in hogged.tests["test_eos_and_budget"].message
    print(f"\nlargest requests beside a correct submission: {seconds(alone):.1f} s alone, {seconds(beside):.1f} s "
          f"beside ({seconds(beside) / seconds(alone):.2f}x)")
