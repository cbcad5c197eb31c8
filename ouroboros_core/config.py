"""Frozen configs for sampling and for each method's knobs, validated once at the boundary.

Each knob is defined once, as its config's field (`knob`): its default, the range the engine
accepts, its CLI help and, for the few a visitor may set, the page's range, label and one-line
explanation. The CLI's flags, the page's sliders and every request's checks read them (`knobs`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, fields

METHODS = ("vanilla", "speculative", "ouroboros")


class ConfigError(ValueError):
    """A setting outside its allowed values; the message names the setting and the range."""


def check_int(name: str, value, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{name} must be a whole number from {low} to {high}, got {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"{name} must be from {low} to {high}, got {value}")


def check_float(name: str, value, low: float, high: float, *, low_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a number from {low} to {high}, got {value!r}")
    if value > high or value < low or (low_open and value == low):
        allowed = f"above {low} and at most {high}" if low_open else f"from {low} to {high}"
        raise ConfigError(f"{name} must be {allowed}, got {value}")


@dataclass(frozen=True)
class OnPage:
    """Where a visitor may set a knob: the page's range (narrower than the engine's; /race refuses
    outside it too), the slider's label, which the page's refusals name the knob by, the line
    under the slider, and the slider's step."""

    low: int | float
    high: int | float
    label: str
    info: str
    step: int | float = 1


@dataclass(frozen=True)
class Knob:
    """One knob, as its config field declares it (`knob`)."""

    name: str
    default: int | float | bool | None  # None: unset (a knob that may be left so)
    low: float | None  # the range the engine accepts (None for a switch: true or false)
    high: float | None
    kind: type  # bool, int or float: what a set value must be
    low_open: bool  # the range excludes `low` itself
    cli: str | None  # its --flag's help; None: no flag (or another method's knob gives the flag)
    page: OnPage | None  # None: neither on the page nor in /race

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def check(self, value) -> None:
        if value is None and self.default is None:
            return
        if self.kind is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"{self.name} must be true or false, got {value!r}")
        elif self.kind is int:
            check_int(self.name, value, self.low, self.high)
        else:
            check_float(self.name, value, self.low, self.high, low_open=self.low_open)


def knob(
    default,
    low=None,
    high=None,
    *,
    kind: type | None = None,
    low_open: bool = False,
    cli: str | None = None,
    page: OnPage | None = None,
):
    """A config field that is a knob: its default, the engine's range [low, high] (low_open: above
    low), its CLI flag's help and, where a visitor may set it, its place on the page. kind: the
    type a value must have, the default's unless that is None (a knob that may be left unset)."""
    if kind is None and default is None:
        raise TypeError("a knob whose default is None needs its kind")
    settings = {
        "low": low,
        "high": high,
        "kind": kind or type(default),
        "low_open": low_open,
        "cli": cli,
        "page": page,
    }
    return field(default=default, metadata={"knob": settings})


def knobs(config_type) -> dict[str, Knob]:
    """A config's knobs by name, in the order its fields declare them."""
    return {
        f.name: Knob(f.name, f.default, **f.metadata["knob"])
        for f in fields(config_type)
        if "knob" in f.metadata
    }


def check_knobs(config) -> None:
    """Check every knob of a frozen config; a number of another numeric type (numpy's, say) is kept
    as the knob's own int or float, so that the config compares, hashes and prints as usual."""
    for name, setting in knobs(type(config)).items():
        value = getattr(config, name)
        setting.check(value)
        if setting.kind in (int, float) and value is not None and type(value) is not setting.kind:
            object.__setattr__(config, name, setting.kind(value))


@dataclass(frozen=True)
class SamplingConfig:
    # Knobs as the methods' below are: the engine's checks, the CLI's flags, and the page's and
    # /race's sampling read them.

    # 0 means greedy; above 0 the target samples, drafts must match it.
    temperature: float = knob(
        0.0,
        0.0,
        100.0,
        cli="sample at this temperature (default: greedy)",
        page=OnPage(
            0.0,
            2.0,
            "Temperature",
            "0: greedy. Above 0 both lanes sample, and still write the same text",
            step=0.05,
        ),
    )
    # Nucleus mass kept when sampling.
    top_p: float = knob(
        1.0,
        0.0,
        1.0,
        low_open=True,
        cli="nucleus mass kept when sampling (default 1.0)",
        page=OnPage(
            0.05,
            1.0,
            "Top-p",
            "sample from the smallest set of tokens holding this much probability",
            step=0.05,
        ),
    )
    # Makes a sampled run reproducible (None: a fresh one each request, as the engine draws it).
    seed: int | None = knob(
        None,
        0,
        2**63 - 1,
        kind=int,
        cli="makes a sampled run reproducible (default: a fresh seed each run)",
        page=OnPage(
            0,
            2**31 - 1,
            "Seed",
            "each position's draw comes from the seed and the position alone; empty: a new one "
            "each race, shown after it",
        ),
    )

    def __post_init__(self):
        check_knobs(self)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class SpeculativeConfig:
    # Draft tokens proposed one at a time before each target verification (set by --gamma too).
    gamma: int = knob(4, 1, 64)

    def __post_init__(self):
        check_knobs(self)


@dataclass(frozen=True)
class OuroborosConfig:
    # Defaults: the best of `python -m ouroboros_core bench --sweep` for the embedded pair on a
    # 2-core CPU. Each knob: its default, the engine's range, its CLI help, its place on the page.

    # Draft at least this many tokens (phrase by phrase) before the target verifies.
    gamma: int = knob(
        1,
        1,
        64,
        cli="minimum draft length per target forward",
        page=OnPage(
            1,
            16,
            "gamma (minimum draft length)",
            "draft at least this many tokens before the target checks them",
        ),
    )
    # W: lookahead columns refined in each draft forward (0: none).
    window: int = knob(
        0,
        0,
        64,
        cli="Ouroboros lookahead window columns W",
        page=OnPage(
            0,
            32,
            "window W (lookahead columns)",
            "lookahead columns the draft refines in each forward (0: none; cheap on a GPU)",
        ),
    )
    # N: each column yields a phrase of N-1 tokens after a key token.
    ngram: int = knob(
        6,
        2,
        16,
        cli="Ouroboros n-gram size N (phrases of N-1 tokens)",
        page=OnPage(
            2,
            8,
            "n-gram size N",
            "phrases of N-1 tokens enter the pool, keyed on the token before them",
        ),
    )
    # G: phrases kept per key token in the pool (independent of W).
    guess_set: int = knob(8, 1, 256, cli="Ouroboros phrases kept per key token G")
    # k: pool phrases appended as branches to the target's verification.
    branches: int = knob(
        1,
        0,
        32,
        cli="Ouroboros pool phrases appended as branches k",
        page=OnPage(
            0,
            8,
            "branches k",
            "pool phrases the target verifies beside the draft, in the same forward",
        ),
    )
    # Pool phrases the draft verifies inside its own forward.
    draft_candidates: int = knob(
        2, 0, 32, cli="Ouroboros pool phrases the draft checks inside its own forward (0: none)"
    )
    pool_size: int = knob(50_000, 1, 10_000_000)  # global bound on phrases held by the pool
    prompt_lookup: bool = knob(True)  # also pool the phrases of the prompt and of the text so far
    # Past gamma, the draft goes on while sure of its latest token, up to this many tokens.
    max_trunk: int = knob(6, 1, 64, cli="Ouroboros: the most draft tokens a sure draft goes on to")
    # Sure: its probability for that token is above this (1.0: never).
    extend_above: float = knob(
        0.4,
        0.0,
        1.0,
        cli="Ouroboros: past gamma, draft on while the latest token's probability is above this",
    )
    # Sampled, sure instead: the estimated chance that the whole trunk so far is the target's sample
    # is above this times the tokens a step committed lately.
    extend_chance: float = knob(
        0.16,
        0.0,
        1.0,
        cli="Ouroboros, sampled: draft on while the whole trunk's estimated chance is above this "
        "times the tokens a step committed lately",
    )
    # The draft's next choices (up to 3) whose chance of standing is above this are verified too, as
    # branches in place of its first, with its guess after each where that is likely enough too
    # (1.0: never).
    second_above: float = knob(
        0.1,
        0.0,
        1.0,
        cli="Ouroboros: verify the draft's next choices whose chance of standing is above this "
        "(1: never)",
    )
    # Rows a verification's forward takes at the cost of one (the pending token's counted): where
    # the tree has fewer, the draft's next choices above fill_above fill it up to this many,
    # likeliest first (0: none). How many rows cost what one does depends on the CPU
    # (docs/BENCHMARKS.md, "Free rows filled").
    free_rows: int = knob(
        0,
        0,
        256,
        cli="Ouroboros: rows a verification costs no more than one; a smaller tree is filled up to "
        "this many with the draft's other choices (0: none)",
    )
    fill_above: float = knob(
        0.05,
        0.0,
        1.0,
        cli="Ouroboros: a choice that fills free rows has a chance of standing above this",
    )
    # L: one more branch, up to L tokens that followed the earlier occurrence matching most of the
    # text's last 1-4 tokens in the prompt and text so far (0: none); longer than pool phrases.
    lookup: int = knob(12, 0, 64, cli="Ouroboros context-lookup branch length L (0: none)")
    # While copies stand whole (the text loops), each next copy may be twice as long, up to this
    # many tokens; a copy that falls short brings it back to L (0 or at most L: always L).
    lookup_grow: int = knob(
        0, 0, 256, cli="Ouroboros: a copy's most tokens while whole copies stand (0: always L)"
    )
    # One more branch where the draft's folder stores the target's answers (lookup.AnswerStore):
    # up to this many tokens walked from what those answers most often wrote after the text's last
    # tokens.
    stored_answers: int = knob(
        8, 0, 64, cli="Ouroboros: branch length from the draft folder's stored answers (0: none)"
    )
    # Sampled, the lookup branch (and a pool phrase) ends before the first token whose estimated
    # chance of standing (how far this request's copies, or pool phrases, stood, and how likely the
    # target reaches it) is at most this; a copy parting from the trunk on a token outside the
    # draft's fitted.GUESSES_SCORED best guesses is left out (0: none of this, always L tokens;
    # greedy always keeps L).
    lookup_above: float = knob(
        0.05,
        0.0,
        1.0,
        cli="Ouroboros, sampled: end the lookup branch and pool phrases where a token's estimated "
        "chance of standing is at most this (0: always L tokens)",
    )

    def __post_init__(self):
        check_knobs(self)


SAMPLING_OPTIONS = {f.name for f in fields(SamplingConfig)}
METHOD_CONFIGS = {"vanilla": None, "speculative": SpeculativeConfig, "ouroboros": OuroborosConfig}


def check_method(method) -> str:
    if method not in METHODS:
        raise ConfigError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    return method


def build_configs(
    method: str, options: dict
) -> tuple[SamplingConfig, SpeculativeConfig | OuroborosConfig | None]:
    """Map loose keyword options (from Python, the CLI or the UI) onto the method's frozen
    configs."""
    check_method(method)
    config_type = METHOD_CONFIGS[method]
    own = {f.name for f in fields(config_type)} if config_type else set()
    allowed = SAMPLING_OPTIONS | own
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ConfigError(
            f"unknown option(s) for method {method!r}: {', '.join(unknown)}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )
    sampling = SamplingConfig(**{k: v for k, v in options.items() if k in SAMPLING_OPTIONS})
    method_options = {k: v for k, v in options.items() if k not in SAMPLING_OPTIONS}
    return sampling, (config_type(**method_options) if config_type else None)
