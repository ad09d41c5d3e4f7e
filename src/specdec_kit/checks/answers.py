"""The answers the checks compare a decoder with, read as data.

The student package holds no implementation of anything students write, so the visible checks read what
correct decoding does from `answers.json` beside this file: the instructor package's release writes it by
running the visible checks on the solution with its oracle (`specdec_course.authoring.answers`), for exactly the
cases they ask about, and CI checks that it is fresh. The hidden checks pass the oracle itself as `answers`.
Both answer the same questions:

    answers.draft_chain(start, k)                        # the scripted draft's k greedy tokens after `start`
    answers.rounds(start, k, max_tokens)                 # DecodeResult of correct greedy decoding on `scripted`
    answers.lookup(ids, k)                               # LookupAnswer: prompt lookup's drafts after `ids`
    answers.lookup_rounds(ids, expected, k)              # rounds prompt lookup takes to emit `expected`
    answers.adaptive_rounds(start, k, max_tokens, costs, max_k)  # AdaptiveRounds of correct adaptive k
    answers.exact_rounds(pair, prompt, k, max_tokens)    # ExactRounds of correct greedy decoding on another pair

`exact_rounds` is asked only where a test cell draws a decode of `check_exact` that never returned: the release
records it for that check's own cases (`decoding.EXACT_QUESTIONS`), and the grader, which draws nothing, never asks it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, is_dataclass
from functools import cache
from pathlib import Path

from ..core.result import DecodeResult

ANSWERS_FILE = Path(__file__).with_name("answers.json")
FORMAT_VERSION = 1


@dataclass(frozen=True)
class LookupAnswer:
    """Prompt lookup after `ids`: the drafts after the latest and after the earliest (HF's) earlier occurrence of
    the largest matching n-gram (both correct), and those occurrences as (n, start), None where there is none."""

    drafts: tuple[tuple[int, ...], ...]
    matches: tuple[tuple[int, int] | None, ...]


@dataclass(frozen=True)
class AdaptiveRounds:
    """Correct adaptive-k decoding on `scripted`: its result (`proposed`: the drafts of each round), each round's k
    and planned drafts (k capped by max_k and the budget's room), whether it was counted (it
    followed a rejection), and the counts (reached, rejected) after it."""

    result: DecodeResult
    k: tuple[int, ...]
    planned: tuple[int, ...]
    counted: tuple[bool, ...]
    counts: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]


def key(args: tuple) -> str:
    """A question's arguments as the record's key (dataclasses such as ForwardCosts as their fields)."""
    return json.dumps([asdict(a) if is_dataclass(a) else a for a in args])


def to_record(value) -> object:
    """An answer as JSON data."""
    if isinstance(value, DecodeResult):
        return {"token_ids": list(value.token_ids), "proposed": list(value.proposed), "accepted": list(value.accepted)}
    if isinstance(value, AdaptiveRounds):
        return {**asdict(value), "result": to_record(value.result)}
    if isinstance(value, LookupAnswer):
        return asdict(value)
    if isinstance(value, ExactRounds):
        return {"result": to_record(value.result), "drafts": [list(d) for d in value.drafts]}
    return value


def from_record(method: str, record):
    """The answer `to_record` wrote for a question of `method`."""
    if method == "rounds":
        return DecodeResult("", record["token_ids"], record["proposed"], record["accepted"])
    if method == "adaptive_rounds":
        return AdaptiveRounds(from_record("rounds", record["result"]), tuple(record["k"]), tuple(record["planned"]),
                              tuple(record["counted"]),
                              tuple((tuple(r), tuple(j)) for r, j in record["counts"]))
    if method == "exact_rounds":
        return ExactRounds(from_record("rounds", record["result"]), tuple(map(tuple, record["drafts"])))
    if method == "lookup":
        return LookupAnswer(tuple(map(tuple, record["drafts"])),
                            tuple(tuple(m) if m is not None else None for m in record["matches"]))
    return record


@dataclass(frozen=True)
class ExactRounds:
    """Correct greedy speculative decoding on a zoo pair: its result and each round's drafts (the draft model's greedy
    tokens after the text so far)."""

    result: DecodeResult
    drafts: tuple[tuple[int, ...], ...]


class RecordedAnswers:
    """The answers of `answers.json`: the visible checks' cases only."""

    def __init__(self, records: dict):
        self.records = records

    def _answer(self, method: str, *args):
        try:
            return from_record(method, self.records[method][key(args)])
        except KeyError:
            raise LookupError(f"the kit has no recorded answer for {method}{args}: the student package records the "
                              "answers of the visible checks' own cases only, so call the checks with their "
                              "default cases") from None

    def draft_chain(self, start: int, k: int) -> list[int]:
        return self._answer("draft_chain", start, k)

    def rounds(self, start: int, k: int, max_tokens: int) -> DecodeResult:
        return self._answer("rounds", start, k, max_tokens)

    def lookup(self, ids: list[int], k: int) -> LookupAnswer:
        return self._answer("lookup", ids, k)

    def lookup_rounds(self, ids: list[int], expected: list[int], k: int) -> int:
        return self._answer("lookup_rounds", ids, expected, k)

    def adaptive_rounds(self, start: int, k: int, max_tokens: int, costs, max_k: int) -> AdaptiveRounds:
        return self._answer("adaptive_rounds", start, k, max_tokens, costs, max_k)

    def exact_rounds(self, pair: str, prompt: str, k: int, max_tokens: int) -> ExactRounds:
        return self._answer("exact_rounds", pair, prompt, k, max_tokens)


@cache
def recorded() -> RecordedAnswers:
    """The package's recorded answers, read once."""
    if not ANSWERS_FILE.is_file():
        raise FileNotFoundError(f"{ANSWERS_FILE} is missing: reinstall specdec-kit (the course's release writes it)")
    data = json.loads(ANSWERS_FILE.read_text())
    return RecordedAnswers(data["answers"])


def answers_or_recorded(answers):
    """`answers` if given (the grader's oracle), else the recorded ones."""
    return answers if answers is not None else recorded()
