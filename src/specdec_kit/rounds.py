"""Every round of one decode, as the kit saw it: what the draft proposed, what the target kept, what it added.

    rounds = record_rounds(decoder, "The future of", max_tokens=40, num_speculative_tokens=4)
    rounds            # in Jupyter or Colab: one line per round, as self-contained HTML
    rounds.save("rounds.html")

`record_rounds` runs the decoder's `speculative_decode` (`speculative_sample` when sampling settings are given) with
forward recorders on both models, and builds the rounds from the `DecodeResult` and the forwards alone, so it needs
nothing of the decoder's own making: a round's verify forward feeds the text the target's cache lacks and then that
round's drafts, so its last `proposed[r]` ids are the drafts, accepted or not; the next round's forwards show how much
of each cache the rollback kept.
"""

from __future__ import annotations

import contextlib
import html
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .no_progress import DROPPED, EITHER, LATE, no_token_cause
from .result import DecodeResult
from .timing import ForwardCall, ForwardRecorder

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


def record_rounds(decoder, prompt: str, max_tokens: int = 40, num_speculative_tokens: int = 4,
                  **sampling) -> Rounds:
    """Decode `prompt` with `decoder`, recording both models' forwards, and return its rounds."""
    models = {"target": decoder.target_model, "draft": getattr(decoder, "draft_model", None)}
    with contextlib.ExitStack() as stack:
        calls = {role: stack.enter_context(ForwardRecorder(model, record_ids=True))
                 for role, model in models.items() if model is not None}
        if sampling:
            result = decoder.speculative_sample(prompt, max_tokens, num_speculative_tokens, **sampling)
        else:
            result = decoder.speculative_decode(prompt, max_tokens, num_speculative_tokens)
    tokenizer = decoder.target_tokenizer
    prompt_ids = tokenizer(prompt).input_ids
    return build_rounds(prompt_ids, result, calls.get("target", []), calls.get("draft", []), max_tokens,
                        eos_ids(decoder.target_model, tokenizer), tokenizer.decode)


def build_rounds(prompt_ids: list[int], result: DecodeResult, target: list[ForwardCall], draft: list[ForwardCall],
                 max_tokens: int, eos: set[int], decode: Callable[[list[int]], str]) -> Rounds:
    """The rounds of `result` from the target's and the draft's forwards (one target forward a round)."""
    one_each = len(target) == len(result.proposed)
    note = "" if one_each else (f"the target ran {len(target)} forwards in {len(result.proposed)} rounds, not one a "
                                "round: the drafts could not be read off them")
    rounds, position = [], 0
    caching = {"target": any(c.cached_tokens for c in target), "draft": any(c.cached_tokens for c in draft)}
    for r, (proposed, accepted) in enumerate(zip(result.proposed, result.accepted)):
        drafts = [] if proposed == 0 else None
        added = accepted + 1  # without the forwards: the accepted drafts and one target token
        forwards, caches = {}, {"target": None, "draft": None}  # not seen without one target forward a round
        if one_each:
            call, later = target[r], target[r + 1] if r + 1 < len(target) else None
            if proposed and call.input_ids is not None and len(call.input_ids) >= proposed:
                drafts = list(call.input_ids[-proposed:])
            if later:  # what the round added: up to the text the next round continues (its cache and feed, less
                # that round's drafts)
                added = later.cached_tokens + later.new_tokens - result.proposed[r + 1] - len(prompt_ids) - position
            start = target[r - 1].started if r else float("-inf")
            next_draft = next((c for c in draft if c.started > call.started), None)
            forwards = {"target": 1, "draft": sum(start < c.started < call.started for c in draft)}
            caches = {"target": later and later.cached_tokens if caching["target"] else None,  # none kept: no cache
                      "draft": next_draft and next_draft.cached_tokens if caching["draft"] else None}
        emitted = result.token_ids[position:position + max(added, 0)]
        position += len(emitted)
        rounds.append(Round(drafts, proposed, accepted, emitted[accepted] if len(emitted) > accepted else None,
                            forwards, caches))
    ended = ("EOS" if result.token_ids and result.token_ids[-1] in eos else
             "budget" if len(result.token_ids) >= max_tokens else "")
    return Rounds(list(prompt_ids), result, rounds, ended, decode, note)


def eos_ids(model, tokenizer) -> set[int]:
    found = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    found = found if isinstance(found, list) else [found]
    return {i for i in [*found, tokenizer.eos_token_id] if i is not None}


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


def verified_rounds(prompt_ids: list[int], verified: list[dict], decode) -> Rounds:
    """The rounds of a decode that never returned, as its verifier returned them (`no_progress.VerifyCall.record`: the
    text's length, the drafts, n_accepted, next_token), up to the first that added nothing to the text: the rounds
    it completed, and the one it was stuck in, marked with its cause (a token its verifier returned counts as
    dropped there). Forwards and caches are not known."""
    rounds, tokens = [], []
    for number, record in enumerate(verified):
        drafts, next_ids = record.get("drafts") or [], record.get("next") or []
        accepted = min(max(record.get("accepted") or 0, 0), len(drafts))
        later = verified[number + 1]["text"] if number + 1 < len(verified) else None
        stalled = later is not None and later == record.get("text")  # every later round repeats this one
        kept = [] if stalled else next_ids[:1]
        cause = no_token_cause(verified[:number + 1]) if not kept and (stalled or later is None) else ""
        rounds.append(Round(list(drafts), len(drafts), accepted, kept[0] if kept else None, {},
                            {"target": None, "draft": None}, cause))
        tokens += [*drafts[:accepted], *kept]
        if stalled:
            break
    result = DecodeResult("", tokens, [r.proposed for r in rounds], [r.accepted for r in rounds])
    return Rounds(list(prompt_ids), result, rounds, "", decode, "the decode never returned: its rounds as its "
                                                                "verifier returned them, up to the one it was stuck in")


def scripted_rounds(prompt_ids: list[int], expected: DecodeResult, max_tokens: int, decode,
                    cached: bool = True) -> Rounds:
    """Correct decoding's rounds of `expected` on the `scripted` pair, whose draft proposes `draft_next` of the
    token before, whatever came earlier (`zoo.Script`); with the caches a cached decoder keeps when `cached`."""
    from .zoo import scripted_script

    script, text, drafts, position = scripted_script(), list(prompt_ids), [], 0
    for proposed, accepted in zip(expected.proposed, expected.accepted):
        chain, last = [], text[-1]
        for _ in range(proposed):
            last = script.draft_next[last]
            chain.append(last)
        drafts.append(chain)
        emitted = expected.token_ids[position:position + accepted + 1]
        position += len(emitted)
        text += emitted
    return correct_rounds(prompt_ids, expected, drafts, max_tokens, decode, {script.eos_id}, cached)


def correct_rounds(prompt_ids: list[int], expected: DecodeResult, drafts: list[list[int]], max_tokens: int, decode,
                   eos: set[int], cached: bool = True) -> Rounds:
    """Correct decoding's rounds of `expected`, whose round r proposed `drafts[r]`; with the caches a cached decoder
    keeps when `cached`."""
    text, rounds, position = list(prompt_ids), [], 0
    for chain, proposed, accepted in zip(drafts, expected.proposed, expected.accepted):
        emitted = expected.token_ids[position:position + accepted + 1]
        position += len(emitted)
        text += emitted
        # the target's cache holds all but its last token; the draft's also lacks the last draft after a full
        # acceptance (a draft forward feeds the token before the one it proposes)
        full = 0 < proposed == accepted < len(emitted)
        held = {"target": len(text) - 1, "draft": len(text) - 1 - full} if cached else {"target": None, "draft": None}
        rounds.append(Round(list(chain), proposed, accepted, emitted[accepted] if len(emitted) > accepted else None,
                            {"target": 1, "draft": proposed}, held))
    if rounds:
        rounds[-1].cache_after = {"target": None, "draft": None}  # no round follows to show them
    for r, round_ in enumerate(rounds):
        if not any(later.proposed for later in rounds[r + 1:]):
            round_.cache_after["draft"] = None  # no later draft forward shows it
    ended = ("EOS" if expected.token_ids and expected.token_ids[-1] in eos else
             "budget" if len(expected.token_ids) >= max_tokens else "")
    return Rounds(list(prompt_ids), expected, rounds, ended, decode)
