"""What every check shares: the verdict type and the runner a check's probes go through.

A check takes the decoder class itself (a notebook: its probes run in this process, `LocalRunner`) or any
runner with the same `run(request)` method (grading: `course.isolation.ChildRunner`, in another process).
"""

from __future__ import annotations

from ..probes import ROLES, CaseOutcome, assemble, run_probe, set_threads
from ..result import DecodeResult


class CheckFailed(AssertionError):
    """A check's verdict: what was expected, what came back, and where to look."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


class LocalRunner:
    """Runs probes on a decoder class in this process (a notebook's test cells); exceptions propagate."""

    def __init__(self, decoder_class: type):
        self.decoder_class = decoder_class
        set_threads()

    def run(self, request: dict) -> list[CaseOutcome]:
        events = []
        run_probe(request, self.decoder_class, events.append)
        return assemble(events)


def as_runner(decoder):
    """A runner for `decoder`: a class runs here, anything with `run(request)` is used as it is."""
    return LocalRunner(decoder) if isinstance(decoder, type) else decoder


# ---------------------------------------------------------------------------------------------
# What every judged forward must satisfy


def require_seen_forwards(outcome: CaseOutcome) -> None:
    """Every forward reached the model through its own call, where the kit counts it."""
    for role in ROLES:
        unseen = outcome.unseen(role)
        require(unseen <= 0,
                f"{unseen} forward pass(es) of the {role} model ran without going through the model's own call "
                f"(model.forward(...) called directly, or the model's hooks removed): call it as "
                f"self.{role}_model(...), so that its forward passes can be counted")


def decoded(outcome: CaseOutcome, what: str) -> DecodeResult:
    """The case's DecodeResult, or a failure saying what came back instead."""
    result = outcome.result
    require(result["type"] == "DecodeResult" and result["token_ids"] is not None,
            f"{what}: speculative_decode must return a specdec_kit.DecodeResult, got {result['type']}")
    return DecodeResult("", result["token_ids"], result["proposed"] or [], result["accepted"] or [])
