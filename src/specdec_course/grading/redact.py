"""What a student may read of a failure in the cases the grader keeps hidden: the check's own words, without the
inputs the grader handed the student's code there, nor any token ids.

    inputs = HiddenInputs()
    inputs.add(request)                     # every request of a hidden check, as the grader sends it
    inputs.scrub(message)                   # "k=3, prompt <hidden prompt>: ... (got [...], expected [...])"

Text the student's code wrote never reaches these messages (the hidden cases' answers are read with
`outcomes.assemble(..., redact=True)`); what the checks print of the inputs and of the tokens is taken out here.
Gradescope's `after_published` tests work the same way: a hidden test says that it failed and how, not on what.
"""

from __future__ import annotations

import json
import re

HIDDEN_TEXT = "<hidden prompt>"
HIDDEN_TOKENS = "[...]"
MIN_TEXT = 8  # shorter strings (a word, a pair's name) are the checks' own words as often as an input
# A bracketed list of numbers, or of such lists (token ids, a prefix, samples); `[]` says nothing and stays.
_NUMBERS = re.compile(r"\[\s*[-+]?\d[^\[\]]*\]")
_NESTED = re.compile(r"\[\s*\[\.\.\.\](?:\s*,\s*\[\.\.\.\])*\s*\]")


class HiddenInputs:
    """The texts the grader handed the student's code in its hidden cases, and the scrubbing of messages."""

    def __init__(self):
        self.texts: set[str] = set()

    def add(self, request: dict) -> None:
        self.texts.update(_strings(request.get("cases", [])))

    def add_text(self, text: str) -> None:
        self.texts.add(text)

    def scrub(self, message: str) -> str:
        for text in sorted((t for t in self.texts if len(t) >= MIN_TEXT), key=len, reverse=True):
            for form in _forms(text):
                message = message.replace(form, HIDDEN_TEXT)
        return _without_tokens(message)


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [s for item in value for s in _strings(item)]
    return []


def _forms(text: str) -> list[str]:
    """`text` as a message may show it: a repr (either quote) or JSON string with its quotes, then as written."""
    quoted = [repr(text), json.dumps(text), json.dumps(text, ensure_ascii=False), "'" + repr(text)[1:-1] + "'"]
    return [*dict.fromkeys([*quoted, repr(text)[1:-1], text])]


def _without_tokens(message: str) -> str:
    before = None
    while before != message:
        before = message
        message = _NESTED.sub(HIDDEN_TOKENS, _NUMBERS.sub(HIDDEN_TOKENS, message))
    return message
