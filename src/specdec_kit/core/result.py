"""What `speculative_decode` returns, and the one definition of acceptance every figure uses.

    result = decoder.speculative_decode(prompt)     # a DecodeResult
    result.acceptance().rate, result.acceptance().alpha  # accepted / proposed; Leviathan et al.'s alpha
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Acceptance:
    """How the drafts of one or more decodes fared (`+` adds decodes up).

    A rejection is a round that accepted fewer drafts than it proposed, except a final round that ended the
    text at EOS (its drafts after EOS were never emitted, not rejected). A round that proposed no draft (the
    budget left room for the target's token only) counts toward neither. Bonus and correction tokens are
    the target's, never drafts. Every rate is None when nothing was there to count.
    """

    proposed: int = 0
    accepted: int = 0
    rejections: int = 0
    rounds: int = 0
    tokens: int = 0

    @property
    def rate(self) -> float | None:
        """Accepted draft tokens / proposed draft tokens."""
        return self.accepted / self.proposed if self.proposed else None

    @property
    def alpha(self) -> float | None:
        """Leviathan et al.'s per-token acceptance: accepted / (accepted + rejections). Drafts after a
        rejection are never verified, so `rate` is lower than alpha."""
        return self.accepted / (self.accepted + self.rejections) if self.accepted + self.rejections else None

    @property
    def tokens_per_round(self) -> float | None:
        return self.tokens / self.rounds if self.rounds else None

    def __add__(self, other: Acceptance) -> Acceptance:
        return Acceptance(self.proposed + other.proposed, self.accepted + other.accepted,
                          self.rejections + other.rejections, self.rounds + other.rounds, self.tokens + other.tokens)


def acceptance(proposed: list[int], accepted: list[int], tokens: int, ended_at_eos: bool) -> Acceptance:
    """The Acceptance of one decode from its per-round counts, its number of new tokens and whether EOS ended it."""
    rejections = sum(a < p for a, p in zip(accepted, proposed))
    if ended_at_eos and accepted and accepted[-1] < proposed[-1]:
        rejections -= 1
    return Acceptance(sum(proposed), sum(accepted), rejections, len(proposed), tokens)


def accepted_by_position(proposed: list[list[int]], accepted: list[list[int]], k: int) -> list[float | None]:
    """For draft positions i = 1..k over decodes' per-round counts: of the rounds that proposed at least i drafts,
    the fraction that accepted at least i (None where no round proposed i). If each draft were accepted with
    probability alpha independently of the others, position i's fraction would be alpha^i."""
    rounds = [(p, a) for ps, acs in zip(proposed, accepted) for p, a in zip(ps, acs)]
    fractions = []
    for i in range(1, k + 1):
        reached = [a for p, a in rounds if p >= i]
        fractions.append(sum(a >= i for a in reached) / len(reached) if reached else None)
    return fractions


@dataclass(frozen=True)
class DecodeResult:
    """The outcome of one speculative decode.

    `text` is the decoded continuation (new tokens only) and `token_ids` its ids. Per round,
    `proposed[i]` draft tokens were proposed and `accepted[i]` of them were emitted; each round also
    emits the target's own token (the correction or the bonus token) unless EOS ended the text inside
    the accepted draft. So `len(token_ids) == sum(accepted) + (rounds that emitted a target token)`.
    """

    text: str
    token_ids: list[int]
    proposed: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)

    def __str__(self) -> str:
        return self.text

    @property
    def rounds(self) -> int:
        return len(self.proposed)

    def acceptance(self, eos_ids: set[int] = frozenset()) -> Acceptance:
        """This decode's Acceptance; `eos_ids` tell a final round cut short by EOS from a rejection."""
        ended_at_eos = bool(self.token_ids) and self.token_ids[-1] in eos_ids
        return acceptance(self.proposed, self.accepted, len(self.token_ids), ended_at_eos)

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted draft tokens / proposed draft tokens (None if none was proposed)."""
        return self.acceptance().rate

    @property
    def tokens_per_round(self) -> float | None:
        return self.acceptance().tokens_per_round
