"""What a notebook's visible test cell runs: one check on the student's class, in the student's process.

    checks.run_test("test_counts", checks.check_counts, SpeculativeDecoder)
    # test_counts passed: one target forward per round, ... (8 decodes on the scripted pair)

A check that passes prints one line saying what it checked. One that fails raises as it would anywhere (so nbgrader
fails the cell), its traceback showing the student's frames only (`tracebacks`); where it found other tokens or
counts than correct decoding on the `scripted` pair, or a decode there never returned (the rounds it completed), the
cell first draws the decode's rounds above correct
decoding's, the first difference marked (`rounds.compare`): HTML under IPython (Jupyter, Colab, and so the executed
notebook and its feedback page), plain text elsewhere. Only the case that failed is drawn, and only here: the grader
calls the checks themselves (the visible ones and the hidden ones), which draw nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.no_progress import NoProgress
from ..core.tracebacks import ipython_shell
from ..rounds.view import Rounds, compare, compare_text
from .core import LocalRunner

# What each visible test checks, in the words of its passing line (test_speedup prints its own measurement).
CHECKED = {
    "test_loading": "both models kept, in eval mode, with a pad token and in fp32 on the CPU; a draft whose "
                    "tokenizer differs from the target's refused",
    "test_draft_tokens": "the draft model's k greedy tokens, new tokens only, as a tensor of shape [1, k]",
    "test_verify_alignment": "the first rejected draft found at the target's logit L-1+i for draft i, in one "
                             "target forward",
    "test_correction_and_bonus": "the target's correction after a rejection and its bonus token after a full "
                                 "acceptance, from the same forward",
    "test_exact": "the output equals the target's own greedy output for every prompt and k",
    "test_eos_and_budget": "EOS ends the text wherever it falls (and one in the prompt does not); never more than "
                           "max_tokens new tokens",
    "test_counts": "one target forward per round, and each round's proposed and accepted counts equal correct "
                   "decoding's",
    "test_cached_exact": "the cached decoder's output equals the target's own greedy output for every prompt and k",
    "test_cache_use": "no forward re-sends the prefix after the prefill, no cache keeps a rejected draft, and a cache "
                      "holding another text is not used",
    "test_sampling": "the first two sampled tokens follow the target's warped distribution (chi-square tests), and "
                     "both caches are kept and cropped",
    "test_lookup": "the drafts looked up after given sequences, the output against the target's greedy output, and "
                   "the rounds lookup drafting takes on the scripted pair",
    "test_adaptive": "the drafts of every round against correct adaptive k on the scripted pair, and the output "
                     "against the target's greedy output",
}
RUNS = {"load": "constructions", "draft": "drafting calls", "verify": "verifications", "decode": "decodes",
        "sample": "sampled decodes"}


def run_test(test: str, check: Callable, decoder_class: type, **kwargs) -> None:
    """Run `check` (with `kwargs`) on `decoder_class` in this process; print `test`'s line if it passes, draw the
    rounds of the case that failed (where the check gives them) and raise if it fails."""
    runner = LocalRunner(decoder_class)
    try:
        check(runner, **kwargs)
    except (Exception, NoProgress) as e:  # a check's verdict, a decode that never ended, the student's own error
        if getattr(e, "rounds", None) is not None:
            show_rounds(*e.rounds, test=test)
        raise
    print(f"{test} passed: {CHECKED[test]} ({describe_runs(runner.ran)})")


def describe_runs(ran: dict[tuple[str, str], int]) -> str:
    """'8 decodes on scripted; 24 decodes on tiny': what a runner ran, by kind and pair."""
    words = {key: RUNS.get(key[0], key[0]) for key in ran}
    return "; ".join(f"{count} {words[key][:-1] if count == 1 else words[key]} on {key[1]}"
                     for key, count in ran.items())


def show_rounds(yours: Rounds, expected: Rounds, title: str, test: str = "") -> None:
    """The decode's rounds above correct decoding's: displayed as HTML (plain text beside it) under IPython, printed
    as text elsewhere."""
    heading = f"{test}, {title}: your rounds, each above correct decoding's" if test else title
    text = compare_text(yours, expected, heading)
    if ipython_shell() is not None:
        from IPython.display import display

        display({"text/html": compare(yours, expected, heading), "text/plain": text}, raw=True)
    else:
        print(text)
