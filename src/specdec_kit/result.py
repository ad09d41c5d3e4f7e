"""What `speculative_decode` returns."""

from __future__ import annotations

from dataclasses import dataclass, field


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

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens / proposed draft tokens (bonus and correction tokens are not drafts)."""
        total = sum(self.proposed)
        return sum(self.accepted) / total if total else 0.0

    @property
    def tokens_per_round(self) -> float:
        return len(self.token_ids) / self.rounds if self.rounds else 0.0
