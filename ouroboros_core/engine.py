"""The single decode loop: propose -> verify -> commit -> emit, for every method."""

from __future__ import annotations

import time
from dataclasses import fields
from typing import Iterator

import torch

from .cache import cache_length, keep_span, new_cache, truncate
from .config import ConfigError, OuroborosConfig, build_configs, check_int
from .drafters import Ouroboros, Proposal, Speculative, Vanilla
from .events import DoneEvent, Event, Result, Source, Stats, StepEvent, Token
from .pool import PhrasePool
from .verify import forward_tree, input_device, target_tokens, walk_tree


class TextPieces:
    """Splits the decoded output into one piece per committed token.

    A token that ends half-way through a multi-byte character gets "" and the token that completes it
    carries the whole character, so the pieces always concatenate to the decoded output.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix = 0  # a few tokens of left context, so word-boundary spaces decode as in the full text
        self.read = 0
        self.emitted = 0  # characters handed out so far

    def _decode(self, ids) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

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

    def __init__(self, target, draft, tokenizer, *, name: str = "custom", chat: bool = False):
        self.target = target.eval()
        self.draft = draft.eval() if draft is not None else None
        self.tokenizer = tokenizer
        self.name = name
        self.chat = chat and tokenizer.chat_template is not None  # wrap prompts as a user turn
        self.eos = eos_ids(target, tokenizer)
        self.max_context = context_limit(target)
        if draft is not None:
            self.max_context = min(self.max_context, context_limit(draft))
        self._token_texts: dict[int, str] = {}

    def token_text(self, token_id: int) -> str:
        """A drafted token's text on its own, for display (committed tokens get exact pieces instead)."""
        text = self._token_texts.get(token_id)
        if text is None:
            text = self.tokenizer.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)
            self._token_texts[token_id] = text
        return text

    def new_pool(self, **options) -> PhrasePool:
        """A phrase pool to keep warm across one caller's requests (pass it as `pool=`)."""
        allowed = {f.name for f in fields(OuroborosConfig)}
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise ConfigError(f"unknown pool option(s): {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
        cfg = OuroborosConfig(**options)
        return PhrasePool(cfg.guess_set, cfg.pool_size)

    def encode(self, prompt) -> list[int]:
        if not isinstance(prompt, str):
            raise ConfigError(f"prompt must be text, got {type(prompt).__name__}")
        if not prompt.strip():
            raise ConfigError("prompt is empty: give at least one non-blank character")
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError as err:  # a lone surrogate, e.g. half of an emoji from a broken client
            raise ConfigError(f"prompt is not valid Unicode text: a lone surrogate "
                              f"(U+{ord(prompt[err.start]):04X}) at character {err.start}") from None
        if self.chat:
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.tokenizer(prompt)["input_ids"]

    def stream(self, prompt: str, method: str = "ouroboros", max_new_tokens: int = 128, *,
               stop=None, pool: PhrasePool | None = None, **options) -> Iterator[Event]:
        """Validate the request now, then return the generator of its events (StepEvent..., DoneEvent).

        stop: anything with is_set() (a threading.Event); the loop checks it before every step.
        pool: a PhrasePool kept across requests (Ouroboros only); by default each request has its own.
        """
        sampling, method_config = build_configs(method, options)
        check_int("max_new_tokens", max_new_tokens, 1, max(1, self.max_context - 1))
        ids = self.encode(prompt)
        room = self.max_context - max_new_tokens
        if len(ids) > room:
            raise ConfigError(
                f"prompt is {len(ids)} tokens; with max_new_tokens={max_new_tokens} the model's context of "
                f"{self.max_context} tokens leaves room for at most {max(room, 0)} prompt tokens")
        if method != "vanilla" and self.draft is None:
            raise ConfigError(f"method {method!r} needs a draft model; this engine has none")
        if method == "vanilla":
            drafter = Vanilla()
        elif method == "speculative":
            drafter = Speculative(self.draft, method_config)
        else:
            if pool is None:
                pool = PhrasePool(method_config.guess_set, method_config.pool_size)
            drafter = Ouroboros(self.draft, method_config, pool, self.max_context)
        return self._loop(ids, max_new_tokens, sampling, drafter, stop)

    def generate(self, prompt: str, method: str = "ouroboros", max_new_tokens: int = 128, **options) -> Result:
        steps = []
        for event in self.stream(prompt, method, max_new_tokens, **options):
            if isinstance(event, StepEvent):
                steps.append(event)
            else:
                return Result(list(event.token_ids), event.text, event.stats, event.stop_reason, steps)
        raise AssertionError("stream ended without a DoneEvent")

    def _stop_at_eos(self, proposal: Proposal) -> Proposal:
        """Nothing after an end-of-sequence token can be committed, so nothing after it is verified."""
        for i, token in enumerate(proposal.trunk):
            if token in self.eos:
                return Proposal(proposal.trunk[: i + 1], proposal.trunk_sources[: i + 1])
        return proposal

    def _loop(self, ids, max_new_tokens, sampling, drafter, stop) -> Iterator[Event]:
        target, tokenizer = self.target, self.tokenizer
        target_device = input_device(target)
        draft_device = input_device(self.draft) if self.draft is not None else target_device
        generator = None
        if not sampling.greedy:
            generator = torch.Generator()
            if sampling.seed is None:
                generator.seed()
            else:
                generator.manual_seed(sampling.seed)
        cache = new_cache(target)
        committed = list(ids)
        new_ids: list[int] = []
        pieces = TextPieces(tokenizer)
        drafted_total = accepted_total = forwards = 0
        draft_s = verify_s = compute_s = 0.0  # compute_s: whole steps, loop overhead included
        stop_reason = None
        started = time.perf_counter()
        drafter.start(ids)
        compute_s = time.perf_counter() - started
        while stop_reason is None:
            if stop is not None and stop.is_set():
                stop_reason = "cancelled"
                break
            remaining = max_new_tokens - len(new_ids)
            started = time.perf_counter()
            # The target adds one token of its own after the drafts, so drafts get one less than what is left.
            proposal: Proposal = drafter.propose(committed, remaining - 1)
            proposal = self._stop_at_eos(proposal)
            _sync(draft_device)
            drafted_at = time.perf_counter()

            past = cache_length(cache)
            pending = committed[past:]
            trunk, branches = proposal.trunk, proposal.branches
            attach = proposal.branch_attach or None
            logits = forward_tree(target, cache, pending, trunk, branches, attach=attach)
            tokens = target_tokens(logits, sampling.temperature, sampling.top_p, generator)
            branch_tokens, start = [], len(trunk) + 1
            for branch in branches:
                branch_tokens.append(tokens[start : start + len(branch)])
                start += len(branch)
            verdict = walk_tree(trunk, branches, tokens[: len(trunk) + 1], branch_tokens, attach)
            # The cache keeps what was committed except the newest token, which the next forward feeds.
            kept = past + len(pending) + verdict.trunk_accepted
            if verdict.branch is not None:
                span_start = past + len(pending) + len(trunk) + sum(map(len, branches[: verdict.branch]))
                keep_span(cache, kept, span_start, verdict.branch_accepted)
            else:
                truncate(cache, kept)
            _sync(target_device)
            verified_at = time.perf_counter()

            path = [Token(t, self.token_text(t), s) for t, s in zip(trunk, proposal.trunk_sources)]
            accepted_path = path[: verdict.trunk_accepted]
            rejected = path[verdict.trunk_accepted :]
            if verdict.branch is not None:
                source = proposal.branch_sources[verdict.branch]
                branch = [Token(t, self.token_text(t), source) for t in branches[verdict.branch]]
                path = accepted_path + branch  # the walked path: a branch from inside the trunk replaces its tail
                accepted_path += branch[: verdict.branch_accepted]
                rejected = branch[verdict.branch_accepted :]
            drafted_total += len(path)
            forwards += 1

            old_length = len(committed)
            step_tokens = [(t.id, t.source) for t in accepted_path] + [(verdict.next_token, Source.TARGET)]
            committed_tokens = []
            for token_id, source in step_tokens:
                committed_tokens.append(Token(token_id, pieces.push(token_id), source))
                new_ids.append(token_id)
                committed.append(token_id)
                if token_id in self.eos:
                    stop_reason = "eos"
                    break
                if len(new_ids) == max_new_tokens:
                    stop_reason = "max_new_tokens"
                    break
            if stop_reason is None:
                drafter.observe(committed, old_length, proposal, verdict, tokens[: len(trunk) + 1])
            accepted = committed_tokens[: len(accepted_path)]
            target_token = committed_tokens[-1] if len(committed_tokens) > len(accepted_path) else None
            if stop_reason is not None:
                # Hand any unfinished character at the end to the last committed token.
                full = pieces.finish()
                if len(full) > pieces.emitted:
                    last = committed_tokens[-1]
                    tail = Token(last.id, last.text + full[pieces.emitted :], last.source)
                    if target_token is not None:
                        target_token = tail
                    else:
                        accepted = accepted[:-1] + [tail]
                    pieces.emitted = len(full)
            accepted_total += len(accepted)
            draft_s += drafted_at - started
            verify_s += verified_at - drafted_at
            event = StepEvent(
                index=forwards - 1,
                drafted=tuple(path),
                branches=tuple(tuple(Token(t, self.token_text(t), s) for t in b)
                               for b, s in zip(branches, proposal.branch_sources)),
                accepted=tuple(accepted),
                rejected=tuple(rejected),
                target_token=target_token,
                draft_ms=(drafted_at - started) * 1e3,
                verify_ms=(verified_at - drafted_at) * 1e3,
                elapsed_s=compute_s + (time.perf_counter() - started),
            )
            compute_s = event.elapsed_s
            yield event
        stats = Stats(
            new_tokens=len(new_ids),
            target_forwards=forwards,
            drafted_tokens=drafted_total,
            accepted_tokens=accepted_total,
            seconds=compute_s,
            draft_seconds=draft_s,
            verify_seconds=verify_s,
        )
        # Cancelled between steps, an unfinished character at the end stays out of the text.
        text = pieces.finish() if stop_reason != "cancelled" else pieces.finish()[: pieces.emitted]
        yield DoneEvent(tuple(new_ids), text, stats, stop_reason)
