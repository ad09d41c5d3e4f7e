"""A check's verdict when it fails: `CheckFailed`, with what was expected, what came back and where to look.

    require(got == expected, f"... {got} ... {expected}: fix ...")   # raises CheckFailed(message) otherwise
"""

from __future__ import annotations

from ..core.tracebacks import render


class CheckFailed(AssertionError):
    """A check's verdict: what was expected, what came back, and where to look.

    In a notebook only the student's frames show (`tracebacks`); `rounds`, when a check sets it, holds the decode's
    rounds and correct decoding's (`rounds.Rounds`, yours then expected) for the test cell to draw."""

    rounds: tuple | None = None

    def _render_traceback_(self) -> list[str]:
        return render(self)


def require(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)
