"""Frozen configs for each method's knobs, validated once at the boundary."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

METHODS = ("vanilla", "speculative", "ouroboros")


class ConfigError(ValueError):
    """A setting outside its allowed values; the message names the setting and the range."""


def check_int(name: str, value, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be a whole number from {low} to {high}, got {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"{name} must be from {low} to {high}, got {value}")


def check_float(name: str, value, low: float, high: float, *, low_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a number from {low} to {high}, got {value!r}")
    if value > high or value < low or (low_open and value == low):
        allowed = f"above {low} and at most {high}" if low_open else f"from {low} to {high}"
        raise ConfigError(f"{name} must be {allowed}, got {value}")


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0  # 0 means greedy; above 0 the target samples and drafts must match its samples
    top_p: float = 1.0  # nucleus mass kept when sampling
    seed: int | None = None  # makes a sampled run reproducible

    def __post_init__(self):
        check_float("temperature", self.temperature, 0.0, 100.0)
        check_float("top_p", self.top_p, 0.0, 1.0, low_open=True)
        if self.seed is not None:
            check_int("seed", self.seed, 0, 2**63 - 1)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class SpeculativeConfig:
    gamma: int = 4  # draft tokens proposed one at a time before each target verification

    def __post_init__(self):
        _validate_ints(self)


@dataclass(frozen=True)
class OuroborosConfig:
    # Defaults: the best of `python -m ouroboros_core bench --sweep` for the embedded pair on a 2-core CPU.
    gamma: int = 1  # draft at least this many tokens (phrase by phrase) before the target verifies
    window: int = 0  # W: lookahead columns refined in each draft forward (0: none)
    ngram: int = 6  # N: each column yields a phrase of N-1 tokens after a key token
    guess_set: int = 8  # G: phrases kept per key token in the pool (independent of W)
    branches: int = 1  # k: pool phrases appended as branches to the target's verification
    draft_candidates: int = 2  # pool phrases the draft verifies inside its own forward
    pool_size: int = 50_000  # global bound on phrases held by the pool
    prompt_lookup: bool = True  # also pool the phrases of the prompt and of the text so far
    max_trunk: int = 6  # past gamma, the draft goes on while sure of its latest token, up to this many tokens
    extend_above: float = 0.4  # sure: its probability for that token is above this (1.0: never)
    extend_chance: float = 0.16  # sampled, sure instead: the estimated chance that the whole trunk so far is the
    #                              target's sample is above this times the tokens a step committed lately
    second_above: float = 0.1  # the draft's next choices (up to 3) whose chance of standing is above this are
    #                            verified too, as branches in place of its first, with its guess after each
    #                            where that is likely enough too (1.0: never)
    lookup: int = 12  # L: one more branch, up to L tokens that followed the earlier occurrence matching most of
    #                   the text's last 1-4 tokens in the prompt and text so far (0: none); longer than pool phrases
    lookup_above: float = 0.05  # sampled, the lookup branch (and a pool phrase) ends before the first token whose
    #                             estimated chance of standing (how far this request's copies, or pool phrases,
    #                             stood, and how likely the target reaches it) is at most this; a copy parting from
    #                             the trunk on a token outside the draft's 8 best guesses is left out (0: none of
    #                             this, always L tokens; greedy always keeps L)

    def __post_init__(self):
        _validate_ints(self)
        for name in ("extend_above", "extend_chance", "second_above", "lookup_above"):
            check_float(name, getattr(self, name), 0.0, 1.0)
        if not isinstance(self.prompt_lookup, bool):
            raise ConfigError(f"prompt_lookup must be true or false, got {self.prompt_lookup!r}")


RANGES = {
    "gamma": (1, 64),
    "window": (0, 64),
    "ngram": (2, 16),
    "guess_set": (1, 256),
    "branches": (0, 32),
    "draft_candidates": (0, 32),
    "pool_size": (1, 10_000_000),
    "lookup": (0, 64),
    "max_trunk": (1, 64),
}


def _validate_ints(cfg) -> None:
    for f in fields(cfg):
        if f.name in RANGES:
            check_int(f.name, getattr(cfg, f.name), *RANGES[f.name])


SAMPLING_OPTIONS = {f.name for f in fields(SamplingConfig)}
METHOD_CONFIGS = {"vanilla": None, "speculative": SpeculativeConfig, "ouroboros": OuroborosConfig}


def check_method(method) -> str:
    if method not in METHODS:
        raise ConfigError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    return method


def build_configs(method: str, options: dict) -> tuple[SamplingConfig, SpeculativeConfig | OuroborosConfig | None]:
    """Map loose keyword options (from Python, the CLI or the UI) onto the method's frozen configs."""
    check_method(method)
    config_type = METHOD_CONFIGS[method]
    allowed = set(SAMPLING_OPTIONS) | ({f.name for f in fields(config_type)} if config_type else set())
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ConfigError(f"unknown option(s) for method {method!r}: {', '.join(unknown)}; "
                          f"allowed: {', '.join(sorted(allowed))}")
    sampling = SamplingConfig(**{k: v for k, v in options.items() if k in SAMPLING_OPTIONS})
    method_options = {k: v for k, v in options.items() if k not in SAMPLING_OPTIONS}
    return sampling, (config_type(**method_options) if config_type else None)
