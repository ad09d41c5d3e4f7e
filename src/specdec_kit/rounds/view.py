"""The round view: every round of one decode, what the draft proposed, what the target kept, what it added, drawn
as HTML (a table row per round) or as text, alone or over correct decoding's rounds with the first difference named.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..core.no_progress import DROPPED, EITHER, LATE
from ..core.result import DecodeResult

FOLD = 20  # rounds shown before the rest fold away
STYLE = """<style>
.sd-rounds{font:13px/1.7 ui-monospace,Menlo,Consolas,monospace;border-collapse:collapse}
.sd-rounds td{padding:1px 6px;vertical-align:top;white-space:pre-wrap}
.sd-rounds .margin{color:#555;font-size:11px;white-space:nowrap;border-left:1px solid #ddd}
.sd-tok{border-radius:3px;padding:0 2px;margin:0 1px}
.sd-prompt{color:#666;font-style:italic}.sd-accepted{background:#c8f0c8}
.sd-rejected{background:#f6c4c4;text-decoration:line-through}.sd-unverified{color:#aaa;background:#f2f2f2}
.sd-correction{background:#bcd4f6;font-weight:bold}.sd-bonus{background:#e2c8f2;font-weight:bold}
.sd-end{color:#fff;background:#555;font-size:11px}.sd-none{color:#a00;border:1px dashed #a00;font-size:11px}
.sd-rounds tr.expected td{border-bottom:1px solid #eee}.sd-rounds tr.sd-first td{background:#fff6d6}
.sd-rounds tr.sd-first.yours td:first-child{border-left:3px solid #d33}
</style>"""
LEGEND = [("sd-prompt", "prompt (its tail)"), ("sd-accepted", "accepted draft"),
          ("sd-rejected", "first rejected draft"), ("sd-unverified", "drafts after it, never verified"),
          ("sd-correction", "target's correction"), ("sd-bonus", "target's bonus token (all drafts accepted)"),
          ("sd-end", "EOS / budget reached"), ("sd-none", "no token, and why")]
# A round of a decode that never returned which emitted no token, by its cause (`no_progress.no_token_cause`):
NO_TOKEN = {
    LATE: "no token: its verifier's slice of the target's logits starts at L, one position late",
    DROPPED: "no token: the target's own token dropped, its verifier's slice being right",
    EITHER: "no token: the target's own token dropped, or a verifier's slice from L (the rounds do not show which)",
}


@dataclass
class Round:
    drafts: list[int] | None  # what the round proposed, None where the forwards do not show it
    proposed: int
    accepted: int
    target_token: int | None  # the correction or the bonus token; None when EOS ended the text in the drafts
    forwards: dict[str, int]  # forward calls of each model in this round (empty: not seen)
    cache_after: dict[str, int | None]  # positions each cache held after the rollback (None: not seen)
    cause: str = ""  # why it emitted no token, a key of NO_TOKEN, where the decode got stuck in it

    @property
    def bonus(self) -> bool:
        return self.target_token is not None and self.accepted == self.proposed > 0


@dataclass
class Rounds:
    prompt_ids: list[int]
    result: DecodeResult
    rounds: list[Round]
    ended: str  # "EOS", "budget" or "" (neither)
    decode: Callable[[list[int]], str] = field(repr=False)  # ids -> text
    note: str = ""  # why some drafts could not be read off the forwards

    def _repr_html_(self) -> str:
        return render(self)

    def save(self, path: str | Path) -> Path:
        """A self-contained HTML page of these rounds (no script, nothing fetched)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)  # out/ on a first run
        path.write_text(f"<!doctype html><meta charset='utf-8'><title>Rounds</title><body>{render(self)}</body>\n")
        return path


def render(rounds: Rounds) -> str:
    """One table row per round: its tokens by what became of them, and in the margin its counts and caches."""
    lines = [_prompt_row(rounds)] + [_round_row(rounds, number) for number in range(len(rounds.rounds))]
    acceptance = rounds.result.acceptance(set())
    summary = (f"{len(rounds.rounds)} rounds, {len(rounds.result.token_ids)} new tokens, "
               f"{acceptance.accepted} of {acceptance.proposed} drafts accepted"
               + (f"; {html.escape(rounds.note)}" if rounds.note else ""))
    return f"{STYLE}<div class='sd-rounds'>{_legend()}{_folded(lines, 1)}<p>{summary}</p></div>"


def first_difference(got: Rounds, expected: Rounds) -> int | None:
    """The first round where anything differs: its drafts, counts or target token, its forwards or the caches after
    its rollback (where both sides show them), or that one side lacks it; None if none does."""
    return next((i for i, (a, b) in enumerate(zip(got.rounds, expected.rounds)) if _differs(a, b)),
                None if len(got.rounds) == len(expected.rounds) else min(len(got.rounds), len(expected.rounds)))


def _differs(a: Round, b: Round) -> str:
    """What differs between two rounds, in the order the view names it ("" if nothing does)."""
    if _shown(a) != _shown(b):
        return "tokens"
    if a.forwards and b.forwards and a.forwards != b.forwards:
        return "forwards"
    return "caches" if any(None not in (a.cache_after[role], b.cache_after[role]) and
                           a.cache_after[role] != b.cache_after[role] for role in a.cache_after) else ""


def _where(got: Rounds, expected: Rounds, first: int | None) -> str:
    if first is None:
        return "the rounds are the same"
    what = _differs(got.rounds[first], expected.rounds[first]) if first < min(len(got.rounds),
                                                                                len(expected.rounds)) else "tokens"
    describe = {"tokens": _describe, "forwards": _forwards, "caches": _caches}[what]
    return f"first difference: round {first}: {describe(got, first)} where correct decoding {describe(expected, first)}"


def _forwards(rounds: Rounds, number: int) -> str:
    forwards = rounds.rounds[number].forwards
    return f"makes {forwards['target']} target and {forwards['draft']} draft forwards"


def _caches(rounds: Rounds, number: int) -> str:
    held = rounds.rounds[number].cache_after
    return ("keeps " + " and ".join(f"{count} positions in the {role}'s cache" for role, count in held.items()
                                    if count is not None) + " after its rollback")


def compare(got: Rounds, expected: Rounds, title: str = "") -> str:
    """Your rounds over the expected ones, a round each, the first round that differs outlined and named."""
    first = first_difference(got, expected)
    lines = [_prompt_row(got)]
    for number in range(max(len(got.rounds), len(expected.rounds))):
        mark = " sd-first" if number == first else ""
        for who, rounds in (("yours", got), ("expected", expected)):
            row = (_round_row(rounds, number, f"{number} {who}") if number < len(rounds.rounds) else
                   f"<tr class='round'><td class='margin'>{who}</td><td>(no round {number})</td><td></td></tr>")
            lines.append(row.replace("<tr class='round'>", f"<tr class='round {who}{mark}'>", 1))
    where = _where(got, expected, first)
    heading = f"<p><b>{html.escape(title)}</b></p>" if title else ""
    return (f"{STYLE}<div class='sd-rounds'>{heading}{_legend()}<p>{html.escape(where)}</p>"
            f"{_folded(lines, 1 + 2 * max(first or 0, 0))}</div>")


def compare_text(got: Rounds, expected: Rounds, title: str = "", before: int = 3) -> str:
    """`compare` as plain text: the first difference named, then the rounds up to it (`before` rounds ahead of it),
    yours above the expected, each as `[accepted drafts] ~rejected~ (unverified) + target token`."""
    first = first_difference(got, expected)
    lines = [title] if title else []
    lines.append(_where(got, expected, first))
    last = max(len(got.rounds), len(expected.rounds)) - 1 if first is None else first
    start = max(0, last - before)
    if start:
        lines.append(f"(rounds 0 to {start - 1} are the same)")
    for number in range(start, last + 1):
        mark = ">" if number == first else " "
        for who, rounds in (("yours", got), ("expected", expected)):
            lines.append(f"{mark} round {number} {who:<8} {_round_text(rounds, number)}")
    return "\n".join(lines)


def _round_text(rounds: Rounds, number: int) -> str:
    if number >= len(rounds.rounds):
        return "(no such round)"
    r, word = rounds.rounds[number], lambda t: repr(rounds.decode([t]))
    if r.drafts is None:
        drafts = f"({r.proposed} drafts)"
    else:
        drafts = " ".join(word(t) if i < r.accepted else f"~{word(t)}~" if i == r.accepted else f"({word(t)})"
                          for i, t in enumerate(r.drafts)) or "no drafts"
    added = (f"nothing ({NO_TOKEN[r.cause]})" if r.cause in NO_TOKEN else "nothing") if r.target_token is None else \
        f"{word(r.target_token)} ({'bonus' if r.bonus else 'correction'})"
    caches = " ".join(f"{role[0]} {held}" for role, held in r.cache_after.items() if held is not None)
    return f"k={r.proposed} accepted {r.accepted}: {drafts} + {added}" + (f" · caches {caches}" if caches else "")


def _shown(r: Round) -> tuple:
    return r.drafts, r.proposed, r.accepted, r.target_token


def _describe(rounds: Rounds, number: int) -> str:
    if number >= len(rounds.rounds):
        return "has no such round"
    r = rounds.rounds[number]
    drafts = "?" if r.drafts is None else [rounds.decode([t]) for t in r.drafts]
    target = repr(rounds.decode([r.target_token])) if r.target_token is not None else \
        f"nothing ({NO_TOKEN[r.cause]})" if r.cause in NO_TOKEN else "nothing"
    return (f"drafts {drafts}, accepts {r.accepted} and adds {target}"
            + (f" ({'a bonus token' if r.bonus else 'a correction'})" if r.target_token is not None else ""))


def _token(rounds: Rounds, ids: int, kind: str) -> str:
    text = rounds.decode([ids]).replace("\n", "⏎") or "∅"
    return f"<span class='sd-tok {kind}' title='id {ids}'>{html.escape(text)}</span>"


def _prompt_row(rounds: Rounds, tail: int = 12) -> str:
    cut = "… " if len(rounds.prompt_ids) > tail else ""
    tokens = "".join(_token(rounds, i, "sd-prompt") for i in rounds.prompt_ids[-tail:])
    return (f"<tr><td></td><td>{cut}{tokens}</td><td class='margin'>prompt, {len(rounds.prompt_ids)} tokens"
            "</td></tr>")


def _round_row(rounds: Rounds, number: int, label: str = "") -> str:
    r, cells = rounds.rounds[number], []
    if r.drafts is None:
        cells.append(f"<span class='sd-unverified'>({r.proposed} drafts)</span>")
    for i, draft in enumerate(r.drafts or []):
        kind = "sd-accepted" if i < r.accepted else "sd-rejected" if i == r.accepted else "sd-unverified"
        cells.append(_token(rounds, draft, kind))
    if r.target_token is not None:
        cells.append(_token(rounds, r.target_token, "sd-bonus" if r.bonus else "sd-correction"))
    if number == len(rounds.rounds) - 1 and rounds.ended:
        cells.append(f"<span class='sd-tok sd-end'>{rounds.ended}</span>")
    if r.target_token is None and r.cause in NO_TOKEN:
        cells.append(f"<span class='sd-tok sd-none'>{html.escape(NO_TOKEN[r.cause])}</span>")
    caches = " · ".join(f"{role[0]} {held}" for role, held in r.cache_after.items() if held is not None)
    margin = (f"k={r.proposed} accepted {r.accepted}"
              + (f" · forwards t {r.forwards['target']} d {r.forwards['draft']}" if r.forwards else "")
              + (f" · caches {caches}" if caches else ""))
    return (f"<tr class='round'><td class='margin'>{label or number}</td><td>{''.join(cells)}</td>"
            f"<td class='margin'>{margin}</td></tr>")


def _legend() -> str:
    return "<p>" + " ".join(f"<span class='sd-tok {kind}'>{html.escape(words)}</span>" for kind, words in LEGEND) \
        + "</p>"


def _folded(lines: list[str], head: int) -> str:
    """The rows, those after a screenful (and after `head` rows that must show) folded away."""
    shown = max(head, 1 + FOLD)
    table = f"<table class='sd-rounds'>{''.join(lines[:shown])}</table>"
    if len(lines) > shown:
        table += (f"<details><summary>{len(lines) - shown} more rows</summary>"
                  f"<table class='sd-rounds'>{''.join(lines[shown:])}</table></details>")
    return table
