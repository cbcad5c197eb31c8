"""The engine: one target and one draft sharing a tokenizer, and the requests they decode.

`Engine.stream` checks a request, encodes its prompt and picks the method's drafter; the decode loop
itself (propose -> verify -> commit -> emit, the same for every method) is decode.py's.
"""

from __future__ import annotations

import secrets
from dataclasses import fields
from typing import Iterator

from .attention import use_tree_attention
from .cpu import watched
from .config import ConfigError, OuroborosConfig, build_configs, check_int
from .decode import DecodeLoop, TokenTexts
from .drafters import Ouroboros, Speculative, Vanilla
from .events import Event, Result, StepEvent
from .lean import lean_draft
from .packed import pack_linears
from .phrases import PhrasePool
from .sampling import Sampler
from .tree import StateTap
from .verdict import OutputVerdict, output_verdict


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


def vocabulary_bounds(target, draft) -> tuple[int | None, int | None]:
    """(target_only, draft_only): the first token id only the target, or only the draft, has an
    embedding for; None where the two vocabularies end together (the loop then checks no ids).

    A target may pad its vocabulary past its draft's (Qwen2.5 7B: 152,064 rows, its 0.5B draft
    151,936), or the other way round: neither model is ever fed a token it has no embedding for."""
    target_vocab = target.get_input_embeddings().num_embeddings
    draft_vocab = target_vocab
    if draft is not None:
        draft_vocab = draft.get_input_embeddings().num_embeddings
    target_only = draft_vocab if target_vocab > draft_vocab else None
    draft_only = target_vocab if draft_vocab > target_vocab else None
    return target_only, draft_only


def check_prompt(prompt) -> None:
    """A prompt is text with a non-blank character that encodes as UTF-8."""
    if not isinstance(prompt, str):
        raise ConfigError(f"prompt must be text, got {type(prompt).__name__}")
    if not prompt.strip():
        raise ConfigError("prompt is empty: give at least one non-blank character")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as err:
        # a lone surrogate, e.g. half of an emoji from a broken client
        raise ConfigError(
            f"prompt is not valid Unicode text: a lone surrogate "
            f"(U+{ord(prompt[err.start]):04X}) at character {err.start}"
        ) from None


def pick_drafter(engine, method: str, method_config, sampler: Sampler, pool: PhrasePool | None):
    """The method's drafter for one request (a fresh phrase pool unless the caller keeps one)."""
    if method == "vanilla":
        return Vanilla()
    if method == "speculative":
        return Speculative(engine.draft_forward(), method_config, sampler)
    if pool is None:
        pool = PhrasePool(method_config.guess_set, method_config.pool_size)
    store = getattr(engine.draft, "answer_store", None)
    return Ouroboros(
        engine.draft_forward(), method_config, pool, engine.max_context, sampler, store
    )


class Engine:
    """One target and one draft sharing a tokenizer; decodes prompts by any method, one request at
    a time per call (all request state lives in the call, so one engine serves many callers in
    turn)."""

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
        """defaults: per method, options used where a request gives none (a preset's settings for
        this device)."""
        self.target = target.eval()
        # a float32 target on a CPU: its few-row forwards through packed weights
        pack_linears(self.target)
        # on a CPU, a tree's rows read the key/value heads uncopied
        use_tree_attention(self.target)
        self.draft = draft.eval() if draft is not None else None
        self.tokenizer = tokenizer
        self.name = name
        # where the target's weights came from, in words (load_engine's)
        self.target_source: str | None = None
        self.chat = chat and tokenizer.chat_template is not None  # wrap prompts as a user turn
        self.eos = eos_ids(target, tokenizer)
        self.target_only, self.draft_only = vocabulary_bounds(target, draft)
        self.max_context = min(context_limit(m) for m in (target, draft) if m is not None)
        # a drafted token's text on its own, for display (decode.TokenTexts)
        self.token_text = TokenTexts(tokenizer)
        # a cpu.BusyWatch that keeps torch's threads fit for a busy machine while a request
        # decodes (load_engine sets one on a CPU); None: the caller manages threads (the app)
        self.watch = None
        self._draft_forward = None  # the draft as drafters call it: see draft_forward()
        self.state_tap: StateTap | None = None  # there, where the draft reads the target's state
        self.defaults = {method: dict(options) for method, options in (defaults or {}).items()}
        for method, options in self.defaults.items():
            build_configs(method, options)  # a bad preset fails here, not on a visitor's request

    def draft_forward(self):
        """The draft as the drafters run it: its lean forward where that gives the draft's own
        logits (checked once, on the first request, so that start-up touches no device), else the
        model itself."""
        if self._draft_forward is None:
            lean = lean_draft(self.draft, exact=self.draft is self.target)
            self._draft_forward = lean or self.draft
            if lean is not None and lean.projection is not None:
                self.state_tap = StateTap(self.target)
        return self._draft_forward

    def new_pool(self, **options) -> PhrasePool:
        """A phrase pool to keep warm across one caller's requests (pass it as `pool=`)."""
        allowed = sorted(f.name for f in fields(OuroborosConfig))
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise ConfigError(
                f"unknown pool option(s): {', '.join(unknown)}; allowed: {', '.join(allowed)}"
            )
        cfg = OuroborosConfig(**options)
        return PhrasePool(cfg.guess_set, cfg.pool_size)

    def encode(self, prompt, raw: bool = False) -> list[int]:
        """The prompt's ids: for a chat pair a user's turn through the chat template, unless `raw`
        (the text as it is, for a caller who writes the template, or a completion, themselves)."""
        check_prompt(prompt)
        if self.chat and not raw:
            turn = [{"role": "user", "content": prompt}]
            text = self.tokenizer.apply_chat_template(
                turn, tokenize=False, add_generation_prompt=True
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
        """Validate the request now, then return the generator of its events (StepEvent...,
        DoneEvent).

        raw: send the prompt as it is, not as a chat turn (see encode).
        stop: anything with is_set() (a threading.Event); the loop checks it before every step.
        pool: a PhrasePool kept across requests (Ouroboros only); by default each request has its
        own.
        """
        options = {**self.defaults.get(method, {}), **options}
        sampling, method_config = build_configs(method, options)
        check_int("max_new_tokens", max_new_tokens, 1, max(1, self.max_context - 1))
        ids = self.encode(prompt, raw)
        room = self.max_context - max_new_tokens
        if len(ids) > room:
            raise ConfigError(
                f"prompt is {len(ids)} tokens; with max_new_tokens={max_new_tokens} the model's "
                f"context of {self.max_context} tokens leaves room for at most {max(room, 0)} "
                "prompt tokens"
            )
        if method != "vanilla" and self.draft is None:
            raise ConfigError(f"method {method!r} needs a draft model; this engine has none")
        sampler = Sampler(sampling.temperature, sampling.top_p, request_seed(sampling))
        drafter = pick_drafter(self, method, method_config, sampler, pool)
        events = DecodeLoop(self, drafter, sampler).run(ids, max_new_tokens, stop)
        return events if self.watch is None else watched(events, self.watch)

    def generate(
        self, prompt: str, method: str = "ouroboros", max_new_tokens: int = 128, **options
    ) -> Result:
        steps = []
        for event in self.stream(prompt, method, max_new_tokens, **options):
            if isinstance(event, StepEvent):
                steps.append(event)
            else:
                stop_reason = event.stop_reason
                return Result(list(event.token_ids), event.text, event.stats, stop_reason, steps)
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
        """Whether two outputs (new token ids) of this target for `prompt`, greedy or sampled with
        these settings, are identical, part at a float tie or a rounding boundary, or mismatch; one
        extra target forward at the first difference measures it."""
        ids = self.encode(prompt, raw)
        return output_verdict(self.target, ids, list(a), list(b), temperature, top_p, seed)
