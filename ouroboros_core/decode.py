"""The single decode loop: propose -> verify -> commit -> emit, for every method.

The engine (engine.py) checks a request and picks its drafter; `DecodeLoop.run` then decodes it,
one target forward per step, and yields a StepEvent per step and a DoneEvent at the end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from .tree import (
    Acceptance,
    cache_length,
    forward_tree,
    input_device,
    keep_span,
    new_cache,
    next_token_row,
    walk,
)
from .events import DoneEvent, Event, Source, Stats, StepEvent, Token
from .proposal import Proposal, StepOutcome
from .sampling import Sampler

if TYPE_CHECKING:
    from transformers import DynamicCache


class TextPieces:
    """Splits the decoded output into one piece per committed token.

    A token that ends half-way through a multi-byte character gets "" and the token that completes
    it carries the whole character, so the pieces always concatenate to the decoded output.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        # a few tokens of left context, so word-boundary spaces decode as in the full text
        self.prefix = 0
        self.read = 0
        self.emitted = 0  # characters handed out so far

    def _decode(self, ids) -> str:
        return self.tokenizer.decode(
            ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        before = self._decode(self.ids[self.prefix : self.read])
        after = self._decode(self.ids[self.prefix :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        piece = after[len(before) :]
        self.emitted += len(piece)
        return piece

    def finish(self) -> str:
        """The full decoded text of every token pushed."""
        return self._decode(self.ids)

    def take_rest(self) -> str:
        """The end of the text that no piece carries yet (a character left unfinished), now handed
        out."""
        full = self.finish()
        rest = full[self.emitted :]
        self.emitted = len(full)
        return rest


class TokenTexts:
    """A drafted token's text on its own, for display (committed tokens get exact pieces
    instead), cached per engine."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.texts: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self.texts.get(token_id)
        if text is None:
            text = self.tokenizer.decode(
                [token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
            self.texts[token_id] = text
        return text


@dataclass(eq=False)
class Request:
    """One request's state while the loop runs: the tokens so far, the target's cache and the
    counters."""

    committed: list[int]  # the prompt's ids, then every committed token
    max_new_tokens: int
    cache: DynamicCache  # the target's keys and values for all committed tokens but the newest
    pieces: TextPieces
    # (draft's, target's): synchronised before a clock is read
    devices: tuple[torch.device, torch.device]
    new_ids: list[int] = field(default_factory=list)
    forwards: int = 0
    drafted: int = 0
    accepted: int = 0
    rejected_steps: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    compute_s: float = 0.0  # whole steps, loop overhead included
    stop_reason: str | None = None  # set once: "eos", "max_new_tokens" or "cancelled"
    # a token the draft cannot read was committed: it proposes nothing from then on
    draft_blind: bool = False

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - len(self.new_ids)

    def count_step(
        self, drafted: int, accepted: int, rejected: bool, draft_s: float, verify_s: float
    ) -> None:
        self.forwards += 1
        self.drafted += drafted
        self.accepted += accepted
        self.rejected_steps += rejected
        self.draft_s += draft_s
        self.verify_s += verify_s

    def done_event(self) -> DoneEvent:
        stats = Stats(
            new_tokens=len(self.new_ids),
            target_forwards=self.forwards,
            drafted_tokens=self.drafted,
            accepted_tokens=self.accepted,
            seconds=self.compute_s,
            draft_seconds=self.draft_s,
            verify_seconds=self.verify_s,
            rejected_steps=self.rejected_steps,
        )
        text = self.pieces.finish()
        if self.stop_reason == "cancelled":
            # stopped between steps: an unfinished character stays out
            text = text[: self.pieces.emitted]
        return DoneEvent(tuple(self.new_ids), text, stats, self.stop_reason)


@dataclass(frozen=True)
class WalkedPath:
    # drafted tokens on the path the target walked: the trunk, or its head and a branch
    path: list[Token]
    accepted: list[Token]  # its head, which the target kept
    rejected: list[Token]  # its tail after the first mismatch
    trunk: list[Token]  # the whole trunk, as proposed
    verdict: Acceptance


def verifiable(proposal: Proposal, eos: frozenset[int], draft_only: int | None) -> Proposal:
    """The proposal cut to what can be committed. Nothing after an end-of-sequence token can be, so
    nothing after it is verified, on the trunk or a branch (a trunk cut at one keeps the branches
    that hang before it); a drafted token from `draft_only` on, which the target has no embedding
    for, ends the trunk before it (branches go with the cut)."""
    for i, token in enumerate(proposal.trunk):
        if draft_only is not None and token >= draft_only:
            return proposal.cut(i)
        if token in eos:
            before = [k for k, at in enumerate(proposal.branch_attach) if at <= i]
            proposal = proposal.cut(i + 1, before)
            break
    branch_tokens = [token for branch in proposal.branches for token in branch]
    if draft_only is not None and any(token >= draft_only for token in branch_tokens):
        return proposal.cut(len(proposal.trunk))
    if any(token in eos for token in branch_tokens):
        ends = [
            next((j + 1 for j, token in enumerate(branch) if token in eos), len(branch))
            for branch in proposal.branches
        ]
        cut = [branch[:end] for branch, end in zip(proposal.branches, ends)]
        proposal = replace(proposal, branches=cut)
    return proposal


def walked_path(
    proposal: Proposal, verdict: Acceptance, token_text: Callable[[int], str]
) -> WalkedPath:
    """The drafted tokens on the path the target walked, split into accepted and rejected."""
    trunk = [Token(t, token_text(t), s) for t, s in zip(proposal.trunk, proposal.trunk_sources)]
    path = trunk
    accepted, rejected = trunk[: verdict.trunk_accepted], trunk[verdict.trunk_accepted :]
    if verdict.branch is not None:
        source = proposal.branch_sources[verdict.branch]
        branch = [Token(t, token_text(t), source) for t in proposal.branches[verdict.branch]]
        path = accepted + branch  # a branch from inside the trunk replaces the trunk's tail
        accepted = accepted + branch[: verdict.branch_accepted]
        rejected = branch[verdict.branch_accepted :]
    return WalkedPath(path, accepted, rejected, trunk, verdict)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class DecodeLoop:
    """One request decoded by the engine's target with one drafter and one sampler. The engine
    (engine.Engine) lends its target and draft, tokenizer, end-of-sequence ids, vocabulary bounds
    and token texts."""

    def __init__(self, engine, drafter, sampler: Sampler):
        self.engine, self.drafter, self.sampler = engine, drafter, sampler

    # inference_mode: no autograd bookkeeping in any op (no_grad still bumps version counters), a
    # measurable share of a target forward on a CPU; entered on every resume, so the caller's code
    # between events runs as before
    @torch.inference_mode()
    def run(self, ids: list[int], max_new_tokens: int, stop) -> Iterator[Event]:
        """The decode loop: propose -> verify -> commit -> emit, one target forward per step."""
        engine = self.engine
        target_device = input_device(engine.target)
        draft_device = input_device(engine.draft) if engine.draft is not None else target_device
        cache = new_cache(engine.target)
        pieces = TextPieces(engine.tokenizer)
        request = Request(list(ids), max_new_tokens, cache, pieces, (draft_device, target_device))
        started = time.perf_counter()
        self.drafter.start(ids)
        request.compute_s = time.perf_counter() - started
        while request.stop_reason is None:
            if stop is not None and stop.is_set():
                request.stop_reason = "cancelled"
                break
            started = time.perf_counter()
            proposal = self.propose(request)
            drafted_at = time.perf_counter()
            verdict, trunk_tokens, state = self.verify(request, proposal)
            verified_at = time.perf_counter()
            walked = walked_path(proposal, verdict, engine.token_text)
            old_length = len(request.committed)
            committed_tokens = self.commit(request, walked.accepted, verdict.next_token)
            if request.stop_reason is None:
                self.drafter.observe(
                    StepOutcome(
                        request.committed, old_length, proposal, verdict, trunk_tokens, state
                    )
                )
            times = (started, drafted_at, verified_at)
            yield self.step_event(request, proposal, walked, committed_tokens, times)
        yield request.done_event()

    def propose(self, request: Request) -> Proposal:
        # The target adds one token of its own after the drafts, so drafts get one less than what
        # is left.
        if request.draft_blind:
            return Proposal()
        proposal = self.drafter.propose(request.committed, request.remaining - 1)
        proposal = verifiable(proposal, self.engine.eos, self.engine.draft_only)
        _sync(request.devices[0])
        return proposal

    def verify(self, request: Request, proposal: Proposal) -> tuple[Acceptance, list[int], Any]:
        """One target forward over the pending tokens, the trunk and its branches; the cache then
        keeps what was committed except the newest token, which the next forward feeds. Returns
        the verdict, the target's token after each trunk prefix, and the target's state that chose
        its own next token where the draft reads it (else None)."""
        cache, tree = request.cache, proposal.tree()
        past = cache_length(cache)
        pending = request.committed[past:]
        logits = forward_tree(self.engine.target, cache, pending, tree)
        positions = [] if self.sampler.greedy else tree.row_positions(len(request.committed))
        trunk_tokens, *branch_tokens = self.sampler.row_groups(logits, positions, tree.groups())
        verdict = walk(tree, trunk_tokens, branch_tokens)
        trunk_kept, span_start, span_kept = tree.kept_rows(verdict)
        fed = past + len(pending)  # the tree's first token's place in the cache
        keep_span(cache, fed + trunk_kept, fed + span_start, span_kept)
        tap = self.engine.state_tap
        state = tap.row(next_token_row(tree, verdict)) if tap is not None else None
        _sync(request.devices[1])
        return verdict, trunk_tokens, state

    def commit(self, request: Request, accepted: list[Token], next_token: int) -> list[Token]:
        """Commit the accepted drafts and the target's own token, stopping at EOS or
        max_new_tokens. Returns the committed tokens, each with its exact piece of output text."""
        target_only, eos = self.engine.target_only, self.engine.eos
        committed_tokens = []
        for token_id, source in [(t.id, t.source) for t in accepted] + [
            (next_token, Source.TARGET)
        ]:
            committed_tokens.append(Token(token_id, request.pieces.push(token_id), source))
            request.new_ids.append(token_id)
            request.committed.append(token_id)
            if target_only is not None and token_id >= target_only:
                # only a padded row of the target's vocabulary, never a real token
                request.draft_blind = True
            if token_id in eos:
                request.stop_reason = "eos"
                break
            if len(request.new_ids) == request.max_new_tokens:
                request.stop_reason = "max_new_tokens"
                break
        if request.stop_reason is not None:
            # the last token carries any unfinished character at the end
            last = committed_tokens[-1]
            rest = request.pieces.take_rest()
            committed_tokens[-1] = Token(last.id, last.text + rest, last.source)
        return committed_tokens

    def step_event(
        self,
        request: Request,
        proposal: Proposal,
        walked: WalkedPath,
        committed_tokens: list[Token],
        times: tuple[float, float, float],
    ) -> StepEvent:
        """Count the step into the request and describe it: what was drafted, kept, rejected and
        added. times: when the step started, its draft ended and its verification ended."""
        started, drafted_at, verified_at = times
        draft_ms, verify_ms = (drafted_at - started) * 1e3, (verified_at - drafted_at) * 1e3
        accepted = committed_tokens[: len(walked.accepted)]
        added = len(committed_tokens) > len(walked.accepted)
        rejected = bool(walked.rejected)
        request.count_step(
            len(walked.path), len(accepted), rejected, draft_ms / 1e3, verify_ms / 1e3
        )
        token_text = self.engine.token_text
        branches = tuple(
            tuple(Token(t, token_text(t), s) for t in branch)
            for branch, s in zip(proposal.branches, proposal.branch_sources)
        )
        request.compute_s += time.perf_counter() - started
        attach = tuple(proposal.branch_attach)
        return StepEvent(
            index=request.forwards - 1,
            drafted=tuple(walked.path),
            branches=branches,
            accepted=tuple(accepted),
            rejected=tuple(walked.rejected),
            target_token=committed_tokens[-1] if added else None,
            draft_ms=draft_ms,
            verify_ms=verify_ms,
            elapsed_s=request.compute_s,
            trunk=tuple(walked.trunk),
            attach=attach,
            trunk_accepted=walked.verdict.trunk_accepted,
            branch=walked.verdict.branch,
        )
