"""The events the decode loop yields. Renderers (app, CLI, benchmark) format them; the core never
does."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum

from .theory import per_token_acceptance


class Source(str, Enum):
    """How a committed or drafted token came to be."""

    TARGET = "target"  # the target's own token (argmax or sample) after the accepted drafts
    DRAFT = "draft"  # proposed by the draft model
    POOL = "pool"  # proposed from a phrase pool entry (draft lookahead window or a target verdict)
    # proposed by looking the phrase up in the prompt or the text so far, or walking the target's
    # stored answers to other requests (lookup.AnswerStore)
    PROMPT = "prompt"


@dataclass(frozen=True)
class Token:
    id: int
    # for committed tokens, the exact piece of output text it completes ("" mid-character)
    text: str
    source: Source


@dataclass(frozen=True)
class Stats:
    new_tokens: int
    target_forwards: int
    drafted_tokens: int  # tokens on the verified path: the trunk, plus the walked branch
    accepted_tokens: int  # drafted tokens the target kept
    seconds: float
    draft_seconds: float
    verify_seconds: float
    rejected_steps: int = 0  # steps in which the target rejected a drafted token on the walked path

    @property
    def tokens_per_forward(self) -> float:
        return self.new_tokens / self.target_forwards if self.target_forwards else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    @property
    def per_token_acceptance(self) -> float:
        """The chance each drafted token stands given the ones before it did
        (theory.per_token_acceptance)."""
        return per_token_acceptance(self.accepted_tokens, self.rejected_steps)

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "tokens_per_forward": round(self.tokens_per_forward, 4),
            "acceptance_rate": round(self.acceptance_rate, 4),
            "per_token_acceptance": round(self.per_token_acceptance, 4),
            "tokens_per_second": round(self.tokens_per_second, 3),
        }


@dataclass(frozen=True)
class StepEvent:
    """One propose -> verify -> commit round of the loop (one target forward)."""

    index: int
    # the path the target walked: trunk, or its accepted head and the walked branch
    drafted: tuple[Token, ...]
    branches: tuple[tuple[Token, ...], ...]  # every branch appended to the trunk for this forward
    accepted: tuple[Token, ...]  # drafted tokens committed, in order
    rejected: tuple[Token, ...]  # drafted tokens on the walked path after the first mismatch
    target_token: Token | None  # the target's own token; None when a limit stopped the step early
    draft_ms: float
    verify_ms: float
    elapsed_s: float  # this request's compute so far (drafting + verifying), device synchronised
    trunk: tuple[Token, ...] = ()  # every trunk token the target checked, each with its source
    attach: tuple[
        int, ...
    ] = ()  # per branch: how many trunk tokens it follows (len(trunk): the whole trunk)
    trunk_accepted: int = 0  # leading trunk tokens the target kept
    branch: int | None = None  # the branch walked on from there, if one matched

    @property
    def committed(self) -> tuple[Token, ...]:
        return self.accepted + ((self.target_token,) if self.target_token is not None else ())

    def to_dict(self) -> dict:
        def toks(seq):
            return [{"id": t.id, "text": t.text, "source": t.source.value} for t in seq]

        return {
            "type": "step",
            "index": self.index,
            "drafted": toks(self.drafted),
            "branches": [toks(b) for b in self.branches],
            "accepted": toks(self.accepted),
            "rejected": toks(self.rejected),
            "target_token": toks([self.target_token])[0] if self.target_token else None,
            "draft_ms": round(self.draft_ms, 3),
            "verify_ms": round(self.verify_ms, 3),
            "elapsed_s": round(self.elapsed_s, 5),
            "trunk": toks(self.trunk),
            "attach": list(self.attach),
            "trunk_accepted": self.trunk_accepted,
            "branch": self.branch,
        }


@dataclass(frozen=True)
class DoneEvent:
    """The last event of a stream."""

    token_ids: tuple[int, ...]  # new tokens only
    text: str
    stats: Stats
    stop_reason: str  # "max_new_tokens", "eos" or "cancelled"

    def to_dict(self) -> dict:
        return {
            "type": "done",
            "token_ids": list(self.token_ids),
            "text": self.text,
            "stop_reason": self.stop_reason,
            "stats": self.stats.to_dict(),
        }


Event = StepEvent | DoneEvent


@dataclass(frozen=True)
class Result:
    token_ids: list[int]
    text: str
    stats: Stats
    stop_reason: str
    events: list[StepEvent]
