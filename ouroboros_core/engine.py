"""The single decode loop: propose -> verify -> commit -> emit, for every method."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Iterator

import torch

from .attention import use_tree_attention
from .cache import cache_length, keep_span, new_cache, truncate
from .config import ConfigError, OuroborosConfig, build_configs, check_int
from .drafters import Ouroboros, Speculative, Vanilla
from .events import DoneEvent, Event, Result, Source, Stats, StepEvent, Token
from .lean import lean_draft
from .packed import pack_linears
from .pool import PhrasePool
from .proposal import Proposal
from .verdict import OutputVerdict, output_verdict
from .sampling import Sampler
from .verify import Verdict, forward_tree, input_device, row_positions, walk_tree

if TYPE_CHECKING:
    from transformers import DynamicCache


class TextPieces:
    """Splits the decoded output into one piece per committed token.

    A token that ends half-way through a multi-byte character gets "" and the token that completes it
    carries the whole character, so the pieces always concatenate to the decoded output.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix = (
            0  # a few tokens of left context, so word-boundary spaces decode as in the full text
        )
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
        """The end of the text that no piece carries yet (a character left unfinished), now handed out."""
        full = self.finish()
        rest = full[self.emitted :]
        self.emitted = len(full)
        return rest


@dataclass(eq=False)
class Request:
    """One request's state while the loop runs: the tokens so far, the target's cache and the counters."""

    committed: list[int]  # the prompt's ids, then every committed token
    max_new_tokens: int
    cache: DynamicCache  # the target's keys and values for all committed tokens but the newest
    pieces: TextPieces
    devices: tuple[
        torch.device, torch.device
    ]  # (draft's, target's): synchronised before a clock is read
    new_ids: list[int] = field(default_factory=list)
    forwards: int = 0
    drafted: int = 0
    accepted: int = 0
    rejected_steps: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    compute_s: float = 0.0  # whole steps, loop overhead included
    stop_reason: str | None = None  # set once: "eos", "max_new_tokens" or "cancelled"
    draft_blind: bool = (
        False  # a token the draft cannot read was committed: it proposes nothing from then on
    )

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
        if (
            self.stop_reason == "cancelled"
        ):  # stopped between steps: an unfinished character stays out
            text = text[: self.pieces.emitted]
        return DoneEvent(tuple(self.new_ids), text, stats, self.stop_reason)


@dataclass(frozen=True)
class WalkedPath:
    path: list[
        Token
    ]  # drafted tokens on the path the target walked: the trunk, or its head and a branch
    accepted: list[Token]  # its head, which the target kept
    rejected: list[Token]  # its tail after the first mismatch
    trunk: list[Token]  # the whole trunk, as proposed
    verdict: Verdict


def request_seed(sampling) -> int | None:
    """The seed of a sampled request: the one asked for, else a fresh one; None when greedy."""
    if sampling.greedy:
        return None
    return sampling.seed if sampling.seed is not None else secrets.randbits(63)


def eos_ids(model, tokenizer) -> frozenset[int]:
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return frozenset()
    return frozenset([eos] if isinstance(eos, int) else eos)


def context_limit(model) -> int:
    config = model.config.get_text_config()
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if value:
            return int(value)
    return 1 << 30


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Engine:
    """One target and one draft sharing a tokenizer; decodes prompts by any method, one request at a time
    per call (all request state lives in the call, so one engine serves many callers in turn)."""

    def __init__(
        self,
        target,
        draft,
        tokenizer,
        *,
        name: str = "custom",
        chat: bool = False,
        defaults: dict[str, dict] | None = None,
    ):
        """defaults: per method, options used where a request gives none (a preset's settings for this device)."""
        self.target = target.eval()
        pack_linears(
            self.target
        )  # a float32 target on a CPU: its few-row forwards through packed weights
        use_tree_attention(self.target)  # on a CPU, a tree's rows read the key/value heads uncopied
        self.draft = draft.eval() if draft is not None else None
        self.tokenizer = tokenizer
        self.name = name
        self.target_source: str | None = (
            None  # where the target's weights came from, in words (load_engine's)
        )
        self.chat = chat and tokenizer.chat_template is not None  # wrap prompts as a user turn
        self.eos = eos_ids(target, tokenizer)
        # A target may pad its vocabulary past its draft's (Qwen2.5 7B: 152,064 rows, its 0.5B draft 151,936),
        # or the other way round: neither model is ever fed a token it has no embedding for.
        target_vocab = target.get_input_embeddings().num_embeddings
        draft_vocab = (
            draft.get_input_embeddings().num_embeddings if draft is not None else target_vocab
        )
        # Set only where the two differ, so the loop checks token ids only for such a pair.
        self.target_only = (
            draft_vocab if target_vocab > draft_vocab else None
        )  # ids from here: target alone
        self.draft_only = (
            target_vocab if draft_vocab > target_vocab else None
        )  # ids from here: draft alone
        self.max_context = context_limit(target)
        if draft is not None:
            self.max_context = min(self.max_context, context_limit(draft))
        self._token_texts: dict[int, str] = {}
        self._draft_forward = None  # the draft as drafters call it: see draft_forward()
        self.defaults = {method: dict(options) for method, options in (defaults or {}).items()}
        for method, options in self.defaults.items():
            build_configs(method, options)  # a bad preset fails here, not on a visitor's request

    def draft_forward(self):
        """The draft as the drafters run it: its lean forward where that gives the draft's own logits (checked
        once, on the first request, so that start-up touches no device), else the model itself."""
        if self._draft_forward is None:
            self._draft_forward = (
                lean_draft(self.draft, exact=self.draft is self.target) or self.draft
            )
        return self._draft_forward

    def token_text(self, token_id: int) -> str:
        """A drafted token's text on its own, for display (committed tokens get exact pieces instead)."""
        text = self._token_texts.get(token_id)
        if text is None:
            text = self.tokenizer.decode(
                [token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
            self._token_texts[token_id] = text
        return text

    def new_pool(self, **options) -> PhrasePool:
        """A phrase pool to keep warm across one caller's requests (pass it as `pool=`)."""
        allowed = {f.name for f in fields(OuroborosConfig)}
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise ConfigError(
                f"unknown pool option(s): {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
            )
        cfg = OuroborosConfig(**options)
        return PhrasePool(cfg.guess_set, cfg.pool_size)

    def encode(self, prompt, raw: bool = False) -> list[int]:
        """The prompt's ids: for a chat pair a user's turn through the chat template, unless `raw` (the text as
        it is, for a caller who writes the template, or a completion, themselves)."""
        if not isinstance(prompt, str):
            raise ConfigError(f"prompt must be text, got {type(prompt).__name__}")
        if not prompt.strip():
            raise ConfigError("prompt is empty: give at least one non-blank character")
        try:
            prompt.encode("utf-8")
        except (
            UnicodeEncodeError
        ) as err:  # a lone surrogate, e.g. half of an emoji from a broken client
            raise ConfigError(
                f"prompt is not valid Unicode text: a lone surrogate "
                f"(U+{ord(prompt[err.start]):04X}) at character {err.start}"
            ) from None
        if self.chat and not raw:
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.tokenizer(prompt)["input_ids"]

    def stream(
        self,
        prompt: str,
        method: str = "ouroboros",
        max_new_tokens: int = 128,
        *,
        stop=None,
        pool: PhrasePool | None = None,
        raw: bool = False,
        **options,
    ) -> Iterator[Event]:
        """Validate the request now, then return the generator of its events (StepEvent..., DoneEvent).

        raw: send the prompt as it is, not as a chat turn (see encode).
        stop: anything with is_set() (a threading.Event); the loop checks it before every step.
        pool: a PhrasePool kept across requests (Ouroboros only); by default each request has its own.
        """
        sampling, method_config = build_configs(
            method, {**self.defaults.get(method, {}), **options}
        )
        check_int("max_new_tokens", max_new_tokens, 1, max(1, self.max_context - 1))
        ids = self.encode(prompt, raw)
        room = self.max_context - max_new_tokens
        if len(ids) > room:
            raise ConfigError(
                f"prompt is {len(ids)} tokens; with max_new_tokens={max_new_tokens} the model's context of "
                f"{self.max_context} tokens leaves room for at most {max(room, 0)} prompt tokens"
            )
        if method != "vanilla" and self.draft is None:
            raise ConfigError(f"method {method!r} needs a draft model; this engine has none")
        sampler = Sampler(sampling.temperature, sampling.top_p, request_seed(sampling))
        if method == "vanilla":
            drafter = Vanilla()
        elif method == "speculative":
            drafter = Speculative(self.draft_forward(), method_config, sampler)
        else:
            if pool is None:
                pool = PhrasePool(method_config.guess_set, method_config.pool_size)
            drafter = Ouroboros(
                self.draft_forward(), method_config, pool, self.max_context, sampler
            )
        return self._loop(ids, max_new_tokens, sampler, drafter, stop)

    def generate(
        self, prompt: str, method: str = "ouroboros", max_new_tokens: int = 128, **options
    ) -> Result:
        steps = []
        for event in self.stream(prompt, method, max_new_tokens, **options):
            if isinstance(event, StepEvent):
                steps.append(event)
            else:
                return Result(
                    list(event.token_ids), event.text, event.stats, event.stop_reason, steps
                )
        raise AssertionError("stream ended without a DoneEvent")

    def verdict(
        self,
        prompt: str,
        a,
        b,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        raw: bool = False,
    ) -> OutputVerdict:
        """Whether two outputs (new token ids) of this target for `prompt`, greedy or sampled with these settings,
        are identical, part at a float tie or a rounding boundary, or mismatch; one extra target forward at the
        first difference measures it."""
        return output_verdict(
            self.target, self.encode(prompt, raw), list(a), list(b), temperature, top_p, seed
        )

    def _verifiable(self, proposal: Proposal) -> Proposal:
        """Nothing after an end-of-sequence token can be committed, so nothing after it is verified, on the trunk
        or a branch (a trunk cut at one keeps the branches that hang before it); a drafted token the target has
        no embedding for ends the trunk before it (branches go with the cut)."""
        unknown = self.draft_only
        for i, token in enumerate(proposal.trunk):
            if unknown is not None and token >= unknown:
                return proposal.cut(i)
            if token in self.eos:
                before = [k for k, at in enumerate(proposal.attached()) if at <= i]
                proposal = proposal.cut(i + 1, before)
                break
        if unknown is not None and any(
            token >= unknown for branch in proposal.branches for token in branch
        ):
            return proposal.cut(len(proposal.trunk))
        if any(token in self.eos for branch in proposal.branches for token in branch):
            cut = [
                branch[
                    : next(
                        (j + 1 for j, token in enumerate(branch) if token in self.eos), len(branch)
                    )
                ]
                for branch in proposal.branches
            ]
            proposal = replace(proposal, branches=cut)
        return proposal

    @torch.inference_mode()  # no autograd bookkeeping in any op (no_grad still bumps version counters): ~8% of
    # a target forward on a CPU; entered on every resume, so the caller's code between events runs as before
    def _loop(self, ids, max_new_tokens, sampler, drafter, stop) -> Iterator[Event]:
        """The decode loop: propose -> verify -> commit -> emit, one target forward per step."""
        target_device = input_device(self.target)
        draft_device = input_device(self.draft) if self.draft is not None else target_device
        request = Request(
            list(ids),
            max_new_tokens,
            new_cache(self.target),
            TextPieces(self.tokenizer),
            (draft_device, target_device),
        )
        started = time.perf_counter()
        drafter.start(ids)
        request.compute_s = time.perf_counter() - started
        while request.stop_reason is None:
            if stop is not None and stop.is_set():
                request.stop_reason = "cancelled"
                break
            started = time.perf_counter()
            proposal = self._propose(drafter, request)
            drafted_at = time.perf_counter()
            verdict, trunk_tokens = self._verify(request, proposal, sampler)
            verified_at = time.perf_counter()
            walked = self._walked_path(proposal, verdict)
            old_length = len(request.committed)
            committed_tokens = self._commit(request, walked.accepted, verdict.next_token)
            if request.stop_reason is None:
                drafter.observe(request.committed, old_length, proposal, verdict, trunk_tokens)
            yield self._step_event(
                request,
                proposal,
                walked,
                committed_tokens,
                (drafted_at - started) * 1e3,
                (verified_at - drafted_at) * 1e3,
                started,
            )
        yield request.done_event()

    def _propose(self, drafter, request: Request) -> Proposal:
        # The target adds one token of its own after the drafts, so drafts get one less than what is left.
        if request.draft_blind:
            return Proposal()
        proposal = self._verifiable(drafter.propose(request.committed, request.remaining - 1))
        _sync(request.devices[0])
        return proposal

    def _verify(
        self, request: Request, proposal: Proposal, sampler: Sampler
    ) -> tuple[Verdict, list[int]]:
        """One target forward over the pending tokens, the trunk and its branches; the cache then keeps
        what was committed except the newest token, which the next forward feeds."""
        cache, trunk, branches = request.cache, proposal.trunk, proposal.branches
        attach = proposal.branch_attach or None
        past = cache_length(cache)
        pending = request.committed[past:]
        logits = forward_tree(self.target, cache, pending, trunk, branches, attach=attach)
        positions = (
            []
            if sampler.greedy
            else row_positions(len(request.committed), len(trunk), branches, attach)
        )
        groups = [len(trunk) + 1] + [len(branch) for branch in branches]
        trunk_tokens, *branch_tokens = sampler.row_groups(logits, positions, groups)
        verdict = walk_tree(trunk, branches, trunk_tokens, branch_tokens, attach)
        kept = past + len(pending) + verdict.trunk_accepted
        if verdict.branch is not None:
            span_start = (
                past + len(pending) + len(trunk) + sum(map(len, branches[: verdict.branch]))
            )
            keep_span(cache, kept, span_start, verdict.branch_accepted)
        else:
            truncate(cache, kept)
        _sync(request.devices[1])
        return verdict, trunk_tokens

    def _walked_path(self, proposal: Proposal, verdict: Verdict) -> WalkedPath:
        """The drafted tokens on the path the target walked, split into accepted and rejected."""
        trunk = [
            Token(t, self.token_text(t), s) for t, s in zip(proposal.trunk, proposal.trunk_sources)
        ]
        path, accepted, rejected = (
            trunk,
            trunk[: verdict.trunk_accepted],
            trunk[verdict.trunk_accepted :],
        )
        if verdict.branch is not None:
            source = proposal.branch_sources[verdict.branch]
            branch = [
                Token(t, self.token_text(t), source) for t in proposal.branches[verdict.branch]
            ]
            path = accepted + branch  # a branch from inside the trunk replaces the trunk's tail
            accepted = accepted + branch[: verdict.branch_accepted]
            rejected = branch[verdict.branch_accepted :]
        return WalkedPath(path, accepted, rejected, trunk, verdict)

    def _commit(self, request: Request, accepted: list[Token], next_token: int) -> list[Token]:
        """Commit the accepted drafts and the target's own token, stopping at EOS or max_new_tokens.
        Returns the committed tokens, each with its exact piece of output text."""
        committed_tokens = []
        for token_id, source in [(t.id, t.source) for t in accepted] + [
            (next_token, Source.TARGET)
        ]:
            committed_tokens.append(Token(token_id, request.pieces.push(token_id), source))
            request.new_ids.append(token_id)
            request.committed.append(token_id)
            if self.target_only is not None and token_id >= self.target_only:
                request.draft_blind = (
                    True  # only a padded row of the target's vocabulary, never a real token
                )
            if token_id in self.eos:
                request.stop_reason = "eos"
                break
            if len(request.new_ids) == request.max_new_tokens:
                request.stop_reason = "max_new_tokens"
                break
        if (
            request.stop_reason is not None
        ):  # the last token carries any unfinished character at the end
            last = committed_tokens[-1]
            committed_tokens[-1] = Token(
                last.id, last.text + request.pieces.take_rest(), last.source
            )
        return committed_tokens

    def _step_event(
        self,
        request: Request,
        proposal: Proposal,
        walked: WalkedPath,
        committed_tokens: list[Token],
        draft_ms: float,
        verify_ms: float,
        started: float,
    ) -> StepEvent:
        """Count the step into the request and describe it: what was drafted, kept, rejected and added."""
        accepted = committed_tokens[: len(walked.accepted)]
        target_token = (
            committed_tokens[-1] if len(committed_tokens) > len(walked.accepted) else None
        )
        request.count_step(
            len(walked.path), len(accepted), bool(walked.rejected), draft_ms / 1e3, verify_ms / 1e3
        )
        branches = tuple(
            tuple(Token(t, self.token_text(t), s) for t in branch)
            for branch, s in zip(proposal.branches, proposal.branch_sources)
        )
        request.compute_s += time.perf_counter() - started
        attach = tuple(proposal.branch_attach or [len(proposal.trunk)] * len(branches))
        return StepEvent(
            index=request.forwards - 1,
            drafted=tuple(walked.path),
            branches=branches,
            accepted=tuple(accepted),
            rejected=tuple(walked.rejected),
            target_token=target_token,
            draft_ms=draft_ms,
            verify_ms=verify_ms,
            elapsed_s=request.compute_s,
            trunk=tuple(walked.trunk),
            attach=attach,
            trunk_accepted=walked.verdict.trunk_accepted,
            branch=walked.verdict.branch,
        )
