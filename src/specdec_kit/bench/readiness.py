"""Whether a notebook's decoders are ready to be timed: each decodes one prompt on the tiny pair as its target does.

    decoder = checked_decoder(CachedSpeculativeDecoder, TARGET, DRAFT, device="cpu")   # or a NotReady stand-in
    finished({"SpeculativeSampler": SpeculativeSampler}, ["sampling"])                # False, saying what to finish

`preflight` runs before the benchmark loads its pair (`bench.compare`), so that an unfinished or wrong decoder fails
in seconds with a `NotReadyError` that names the method still to write and the test to pass first; the notebook's
demo cells use `checked_decoder` and `finished` so that none fails on a name an earlier cell never defined.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import zoo
from ..core.no_progress import NoProgress
from ..core.timing import Observer
from ..core.tracebacks import library_name, render
from .runners import DECODER_METHODS

# Before anything heavy, each decoder to be timed decodes this on the tiny pair (seconds on a CPU).
PREFLIGHT_PROMPT, PREFLIGHT_TOKENS, PREFLIGHT_K = "The future of Artificial Intelligence is", 12, 3


class NotReadyError(ValueError):
    """A notebook's decoder cannot be benchmarked yet: on the tiny pair it fails or gives other tokens."""

    def _render_traceback_(self) -> list[str]:
        return render(self)


# The test that shows each class works, named where a demo cell finds it unfinished.
PASS_FIRST = {"SpeculativeDecoder": "test_exact", "CachedSpeculativeDecoder": "test_cached_exact",
              "SpeculativeSampler": "test_sampling", "PromptLookupDecoder": "test_lookup",
              "AdaptiveSpeculativeDecoder": "test_adaptive"}


def preflight(decoder_classes: dict[str, type], methods, say: Callable[[str], None] | None = print) -> None:
    """Each decoder that `methods` time must decode one prompt on the tiny pair as the target does, before
    the benchmark loads its pair: an unfinished or wrong decoder fails in seconds, saying what to do."""
    from transformers.utils import logging as hf_logging

    from ..models.baseline import zoo_greedy

    expected = list(zoo_greedy("tiny", PREFLIGHT_PROMPT, PREFLIGHT_TOKENS))
    for name in dict.fromkeys(DECODER_METHODS[m] for m in methods if m in DECODER_METHODS):
        try:
            bars = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()  # loading bars for a seconds-long check would drown its line
            try:
                decoder = decoder_classes[name](*(str(p) for p in zoo.materialize("tiny")), device="cpu")
            finally:
                if bars:
                    hf_logging.enable_progress_bar()
            with Observer(decoder, lambda event: None) as observer:  # only to stop a decode that never ends
                observer.expect_tokens(PREFLIGHT_TOKENS)
                sampler = name == DECODER_METHODS["sampling"]
                decode = decoder.speculative_sample if sampler else decoder.speculative_decode
                got = list(decode(PREFLIGHT_PROMPT, PREFLIGHT_TOKENS, PREFLIGHT_K).token_ids)
        except NotImplementedError as e:
            raise NotReadyError(f"{name} is not finished: {unfinished(e)} still raises NotImplementedError. "
                                f"Write it and pass {PASS_FIRST.get(name, 'the tests of its part')} first; this cell "
                                "runs finished decoders") from None
        except (Exception, NoProgress) as e:
            raise NotReadyError(f"{name} failed on the tiny pair before running here: {type(e).__name__}: {e}. "
                                f"Pass {PASS_FIRST.get(name, 'the tests of its part')} first") from e
        if sampler:  # sampled tokens follow the target only in distribution: check the budget alone
            if len(got) != PREFLIGHT_TOKENS and got[-1:] != [decoder.target_tokenizer.eos_token_id]:
                raise NotReadyError(f"{name} returned {len(got)} tokens for max_tokens={PREFLIGHT_TOKENS} on the "
                                    "tiny pair: pass test_sampling first")
        elif got != expected:
            raise NotReadyError(f"{name} does not give the target's greedy tokens on the tiny pair (got {got}, "
                                f"expected {expected}): pass test_exact first")
        if say:
            say(f"{name} decodes the tiny pair {'within its budget' if sampler else 'as its target does'}: "
                "benchmarking it")


def unfinished(error: BaseException) -> str:
    """The student's method that raised `error` (the innermost frame of their own code), as `Class.name()`."""
    tb, name = error.__traceback__, ""
    while tb is not None:
        if library_name(tb.tb_frame.f_code.co_filename) is None:
            code = tb.tb_frame.f_code
            name = getattr(code, "co_qualname", code.co_name)  # Python 3.11 names the class too
        tb = tb.tb_next
    return f"{name}()" if name and not name.startswith("<") else "one of its methods"


class NotReady:
    """Stands in for a decoder that `preflight` found unfinished: any use of it raises the NotReadyError that says
    what to finish first, so that every cell that uses it says so (and none fails on a name never defined)."""

    def __init__(self, error: NotReadyError):
        self._error = error

    def __getattr__(self, name: str):
        raise NotReadyError(str(self._error))

    def __repr__(self) -> str:
        return f"<not ready: {self._error}>"


def finished(decoder_classes: dict[str, type], methods, say: Callable[[str], None] = print) -> bool:
    """Whether every decoder that `methods` time passes `preflight` (seconds, on the tiny pair); where one does not,
    `say` says in one line which and what to finish first, so that a bonus part's demo skips its benchmark instead of
    failing the notebook's run."""
    try:
        preflight(decoder_classes, methods, say=None)
    except NotReadyError as e:
        say(f"Skipped until it is finished: {e}")
        return False
    return True


def checked_decoder(decoder_class: type, target: str, draft: str, device: str = "cpu", **init):
    """`decoder_class(target, draft, device=device, **init)` once it decodes the tiny pair as its target does
    (`preflight`, seconds); until then a `NotReady` stand-in that says what to finish first wherever it is used."""
    try:
        preflight({decoder_class.__name__: decoder_class}, [m for m, name in DECODER_METHODS.items()
                                                            if name == decoder_class.__name__], say=None)
    except NotReadyError as e:
        return NotReady(e)
    return decoder_class(target, draft, device=device, **init)
