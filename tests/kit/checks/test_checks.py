"""`specdec_kit.checks` passes the reference solution; the hidden cases differ from the visible ones; the
cache replay finds a stale entry. (Each known bug is named by its checks in tests/course/selftest/test_catalogue.py.)
"""

import re
import signal
import time

import pytest

from specdec_kit import checks
from specdec_kit.checks.core import WALL_FACTOR, CheckTimeout, _time_limit
from specdec_kit.core.no_progress import NoProgress
from specdec_kit.core.timing import ForwardCall
from specdec_kit.protocol.adapters import load_notebook

from conftest import REPO, SOLUTION
from load import one_busy_core

UNCACHED_CHECKS = [checks.check_loading, checks.check_draft_tokens, checks.check_verify_alignment,
                   checks.check_correction_and_bonus, checks.check_exact, checks.check_eos_and_budget,
                   checks.check_counts]
CACHED_CHECKS = [checks.check_exact, checks.check_cache_use, checks.check_counts, checks.check_verify_alignment]


@pytest.fixture
def notebook():
    """A fresh copy of the solution's module, so patches never leak between tests."""
    return load_notebook(SOLUTION)


@pytest.mark.slow
@pytest.mark.parametrize("check", UNCACHED_CHECKS, ids=lambda c: c.__name__)
def test_solution_passes(notebook, check):
    check(notebook.SpeculativeDecoder)


@pytest.mark.parametrize("check", CACHED_CHECKS, ids=lambda c: c.__name__)
def test_cached_solution_passes(notebook, check):
    check(notebook.CachedSpeculativeDecoder)


@pytest.fixture
def hidden(monkeypatch):
    """The instructor's hidden checks, importable as grading makes them (the repository on the path)."""
    monkeypatch.syspath_prepend(str(REPO))
    from autograder import hidden

    return hidden


@pytest.mark.parametrize("check", [checks.check_correction_and_bonus, checks.check_eos_and_budget])
def test_hidden_cases_differ_from_the_visible_ones(notebook, hidden, check):
    """The hidden siblings run other cases, and the solution passes them too."""
    assert checks.eos_and_budget_cases(chain_start=1, cycle_start=80) != checks.eos_and_budget_cases(), (
        "the hidden EOS and budget cases should start elsewhere in the script than the visible ones"
    )
    getattr(hidden, check.__name__)(notebook.SpeculativeDecoder)


@pytest.mark.slow
def test_loading_is_judged_by_the_forwards_the_models_made(notebook):
    """test_loading reads the load probe's forwards, not the decoder's word: a draft moved to fp16 after loading is
    named by the dtype its forward ran in, and a tokenizer whose pad token is removed after loading by the padded
    forward that never came."""
    class HalfDraft(notebook.SpeculativeDecoder):
        def initialize_draft_model(self, model_name):
            model, tokenizer = super().initialize_draft_model(model_name)
            return model.half(), tokenizer

    class NoPad(notebook.SpeculativeDecoder):
        def initialize_target_model(self, model_name):
            model, tokenizer = super().initialize_target_model(model_name)
            tokenizer.pad_token = None
            return model, tokenizer

    for decoder, words in ((HalfDraft, "the draft model should be float32 (fp16 is for CUDA), got float16"),
                           (NoPad, "the target tokenizer has no pad token")):
        with pytest.raises(checks.CheckFailed, match=re.escape(words)):
            checks.check_loading(decoder)


def call(new_tokens, cached, ids, started=0.0):
    return ForwardCall(new_tokens, cached, 0.0, started, tuple(ids))


def test_stale_cache_position_finds_an_uncropped_rejected_draft():
    text = [5, 6, 7, 9]  # prompt 5; draft 6, 8 proposed, 8 rejected, 7 the correction; then 9
    cropped = [call(3, 0, [5, 6, 8]), call(2, 2, [7, 9])]
    uncropped = [call(3, 0, [5, 6, 8]), call(2, 3, [7, 9])]
    assert checks.stale_cache_position(cropped, text) is None, (
        f"a cache cropped after the rejection holds only the text: no stale position expected, "
        f"got (forward, position) {checks.stale_cache_position(cropped, text)}"
    )
    assert checks.stale_cache_position(uncropped, text) == (1, 2), (
        "an uncropped cache keeps the rejected draft 8 at position 2 in forward 1: (1, 2) expected, "
        f"got {checks.stale_cache_position(uncropped, text)}"
    )
    assert checks.stale_cache_position(uncropped, text, judged={0}) is None, (
        "judging only forward 0, whose cache is empty, should find no stale position, "
        f"got {checks.stale_cache_position(uncropped, text, judged={0})}"
    )


def test_first_after_marks_the_first_draft_call_of_each_round():
    drafts = [call(1, 0, [1], started=t) for t in (0.0, 1.0, 2.0, 4.0, 5.0)]
    targets = [call(3, 0, [1], started=t) for t in (3.0, 6.0)]
    assert checks.first_after(drafts, targets) == {3}, (
        "only the draft call starting at 4.0 is the first after a target call (3.0; none follows 6.0): {3} expected, "
        f"got {checks.first_after(drafts, targets)}"
    )


def test_a_decode_that_never_ends_stops_with_a_message_naming_the_empty_round(notebook):
    """A loop whose rounds add nothing (its errors swallowed, too) is stopped by the target's forward count."""

    class Stuck(notebook.SpeculativeDecoder):
        def speculative_decode(self, prompt, max_tokens=100, num_speculative_tokens=4):
            ids = self.target_tokenizer(prompt, return_tensors="pt").input_ids
            while True:
                try:
                    self.target_model(input_ids=ids)
                except Exception:
                    pass

    with pytest.raises(NoProgress, match="a round that emits no token") as excinfo:
        checks.check_exact(Stuck)
    assert "max_tokens=30" in str(excinfo.value), f"the message should give the budget: {excinfo.value}"


def test_a_call_that_never_returns_stops_at_the_time_limit_naming_the_call(notebook):
    """A visible check's call that loops without a forward is stopped by the runner's limit, which names it."""

    class Spinning(notebook.SpeculativeDecoder):
        def speculative_decode(self, prompt, max_tokens=100, num_speculative_tokens=4):
            while True:
                try:
                    pass
                except Exception:
                    pass

    with pytest.raises(CheckTimeout, match=r"speculative_decode \(prompt .*\) used 1 s of CPU"):
        checks.check_exact(checks.LocalRunner(Spinning, seconds=1))


def test_a_call_that_waits_on_nothing_stops_at_the_clocks_backstop(notebook):
    """A call that sleeps uses no CPU: the clock stops it at WALL_FACTOR times the limit."""

    class Sleeping(notebook.SpeculativeDecoder):
        def speculative_decode(self, prompt, max_tokens=100, num_speculative_tokens=4):
            time.sleep(3600)

    seconds = 0.2
    with pytest.raises(CheckTimeout, match=rf"had not returned after {seconds * WALL_FACTOR:g} s"):
        checks.check_exact(checks.LocalRunner(Sleeping, seconds=seconds))


def test_a_visible_checks_limit_counts_cpu_so_a_loaded_machine_does_not_reach_it():
    """0.4 s of CPU under a limit of 0.8 s, on a core shared with two spinning processes (about 1.2 s on the clock):
    a limit on the clock, as the kit had it, stops it; the limit on CPU does not."""

    def work() -> None:
        until = time.thread_time() + 0.4
        while time.thread_time() < until:
            pass

    def expired(signum, frame):
        raise TimeoutError

    with one_busy_core(spinners=2):
        started = time.monotonic()
        with _time_limit(0.8, []):
            work()
        took = time.monotonic() - started
        previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, 0.8)
        try:
            with pytest.raises(TimeoutError):
                work()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    assert took > 0.8, f"the load should have stretched 0.4 s of CPU past 0.8 s on the clock; it took {took:.2f} s"


def test_the_clocks_backstop_waits_out_the_time_a_loaded_machine_withholds_a_core():
    """0.2 s of CPU under a limit of 0.3 s on a core shared with 19 busy loops: about 4 s on the clock, past the
    backstop's 3 s, of which it waited for its core most; the backstop counts that out and the call returns."""
    with one_busy_core(spinners=19):
        started = time.monotonic()
        with _time_limit(0.3, []):
            until = time.thread_time() + 0.2
            while time.thread_time() < until:
                pass
        took = time.monotonic() - started
    assert took > 0.3 * WALL_FACTOR, f"the load should have stretched the call past the backstop; it took {took:.1f} s"


def test_speed_test_names_the_pairs_grading_times(monkeypatch):
    """What the speed test tells students about grading matches the pairs grading picks."""
    from specdec_kit.checks.speed import GRADING_PAIRS
    from specdec_kit.models.loading import default_pair

    monkeypatch.setenv("SPECDEC_GRADING", "1")
    for device in ("cpu", "cuda"):
        pair = default_pair(device, timing=True)
        assert f"{pair} on a {'GPU' if device == 'cuda' else 'CPU'}" in GRADING_PAIRS, \
            f"grading times {pair} on {device}, but the speed test says {GRADING_PAIRS!r}"


@pytest.mark.slow  # times three methods on synthetic-small: about half a minute
@pytest.mark.release
def test_speed_test_prints_its_plan_then_its_ratio(notebook, capsys):
    """Before timing: the pair, k, prompts, tokens, repeats and the bar; after: the ratio, on a pass too."""
    checks.check_speedup(notebook.CachedSpeculativeDecoder, min_ratio=0.0)  # the bar is not what this tests
    printed = capsys.readouterr().out
    plan, ratio, verdict = (printed.index(words) if words in printed else -1
                            for words in ("speed test: ", "x HF assisted generation, ", "passed: "))
    assert -1 < plan < ratio < verdict, f"the plan, then the measured ratio, then the verdict; printed:\n{printed}"
    for words in (f"k={checks.SPEEDUP_K}", f"{checks.SPEEDUP_TOKENS} new tokens", "synthetic-small",
                  "at least 0.00x required"):
        assert words in printed, f"the speed test should print {words!r}; printed:\n{printed}"


def test_same_call_twice_reaches_a_cache_that_holds_all_of_the_input(notebook):
    """The solution passes; a cached helper whose branch for a cache holding all of the input feeds nothing fails."""
    from specdec_course.core.oracle import ORACLE
    from specdec_kit.protocol.probes import ProbeError

    decoder = notebook.CachedSpeculativeDecoder
    checks.check_same_call_twice(decoder, answers=ORACLE)
    original = decoder.cached_prefix

    def full_cache_fed_nothing(self, role, input_ids):
        cache, held = self.caches[role]
        if cache is not None and held.shape[1] == input_ids.shape[1]:
            return cache, held.shape[1]  # forgets to feed the last position again
        return original(self, role, input_ids)

    decoder.cached_prefix = full_cache_fed_nothing
    with pytest.raises((checks.CheckFailed, ProbeError, RuntimeError)):  # in a notebook: the student's own error
        checks.check_same_call_twice(decoder, answers=ORACLE)


def test_a_timing_waits_for_anothers_lock_a_bounded_time_then_goes_on(tmp_path, monkeypatch):
    """A process that holds the machine's timing lock and never lets go delays a timing by `wait` seconds, no more."""
    import subprocess
    import sys

    from specdec_kit import zoo

    monkeypatch.setattr(zoo, "cache_root", lambda: tmp_path)
    hold = (f"import time\nfrom filelock import FileLock\nlock = FileLock({str(tmp_path / 'timing.lock')!r})\n"
            "lock.acquire()\nprint('held', flush=True)\ntime.sleep(600)\n")
    holder = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with checks.timing_lock(wait=1):
            waited = time.monotonic() - started
        assert 0.9 < waited < 10, f"waited {waited:.1f} s for a lock held forever, with a bound of 1 s"
    finally:
        holder.kill()
        holder.wait()
