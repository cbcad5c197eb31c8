"""One verdict for "same output": two token sequences from the same target and prompt are identical,
differ at a float tie (greedy: either token is the target's greedy choice), differ at a rounding
boundary (sampled: either token is the target's sample at that position's noise), or mismatch (a
bug).

A forward over many tokens rounds differently from a forward over one: in 16-bit floats by whole
rounding steps, in float32 by far less, yet not never (the default pair's float32 logits on a 2-core
AVX-512 CPU moved by 4e-5 between the two shapes, and two tokens 6e-6 apart fell the other way:
docs/ARCHITECTURE.md, *Lossless, in detail*). Greedy: where the target's two best tokens score the
same, or within that movement, the argmax can fall either way between a plain decode and a verified
draft. Sampled: the sample is the token whose tempered score plus the position's fixed noise for it
is highest (sampling.position_noise); where two tokens' keyed scores lie within rounding of each
other, either is the target's sample. The engine measures it itself with one more target forward.

How far a score can move between forward shapes depends on the CPU or GPU: one whose 16-bit matrix
units (AMX, tensor cores) take one path for a single row and another for many sums the same products
in another order through every layer, so the logits move by more than the last rounding. So the
verdict measures it: the same position's scores from a one-token forward (plain decoding's shape)
beside the check's own, and a score may move by that much, or by TIE_STEPS rounding steps, whichever
is more.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from .sampling import keyed_scores, position_noise
from .tree import input_device

SIXTEEN_BIT = (torch.bfloat16, torch.float16)
# The check's own forward (prompt and common prefix in one pass) has a third shape, so its scores
# may sit one rounding step away from those either run saw: a gap of 0 or 1 step there reads as up
# to 2 steps here.
TIE_STEPS = 2


CALM = ("identical", "float tie", "rounding boundary")  # the kinds that are the target's own output


@dataclass(frozen=True)
class OutputVerdict:
    kind: str  # "identical", "float tie", "rounding boundary" or "mismatch"
    first_difference: int | None  # index of the first new token that differs; None when identical
    # Greedy: the target's score gap between the two tokens chosen there. Sampled: how far the
    # reference token's keyed score (tempered score plus noise) lies below the highest one there (0:
    # it is the sample), this forward.
    margin: float | None
    dtype: str  # the target's dtype, for the explanation
    sampled: bool = False  # the outputs were sampled (the margin is then a gap in keyed scores)
    # 16-bit: the most any score moved between the check's forward and a one-token forward at the
    # first difference (measured there); None where not measured (float32, identical outputs)
    spread: float | None = None

    def to_dict(self) -> dict:
        out = asdict(self)
        del out["dtype"], out["sampled"]
        return out


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def rounding_step(dtype: torch.dtype, magnitude: float) -> float:
    """The distance between neighbouring values of `dtype` around `magnitude` (one unit in the last
    place)."""
    exponent = math.floor(math.log2(magnitude)) if magnitude > 0 else 0
    return torch.finfo(dtype).eps * 2.0**exponent


def within_rounding(
    scores: torch.Tensor, tokens: list[int], dtype: torch.dtype, spread: float = 0.0
) -> bool:
    """Whether every one of `tokens` scores within reach of the best score (V,): TIE_STEPS rounding
    steps, or twice the measured `spread` (each of the two tokens may move by it), whichever is
    more; either could be the argmax of a forward of another shape."""
    best = float(scores.max())
    chosen = [float(scores[token]) for token in tokens]
    tolerance = max(TIE_STEPS * rounding_step(dtype, max(abs(best), *map(abs, chosen))), 2 * spread)
    return all(best - score <= tolerance for score in chosen)


def rounding_steps(scores: torch.Tensor, dtype: torch.dtype, spread: float = 0.0) -> torch.Tensor:
    """How far each score (V,) may move in a forward of another shape, as float64: TIE_STEPS
    rounding steps of `dtype` around it, or the measured `spread`, whichever is more."""
    magnitude = scores.double().abs().clamp(min=torch.finfo(dtype).tiny)
    steps = TIE_STEPS * torch.finfo(dtype).eps * torch.exp2(torch.floor(torch.log2(magnitude)))
    return steps.clamp(min=spread)


def nucleus_bounds(
    scores: torch.Tensor, temperature: float, top_p: float, dtype: torch.dtype, spread: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which tokens (V,) the nucleus keeps in some rounding of the scores, and which in every
    rounding: each score may move by TIE_STEPS rounding steps, and a token is kept where the mass
    ranked above it is below top_p."""
    scores = scores.double()
    everyone = torch.ones_like(scores, dtype=torch.bool)
    if top_p >= 1.0:
        return everyone, everyone
    steps = rounding_steps(scores, dtype, spread)
    top = float(scores.max()) / temperature
    least, most = (
        torch.exp((scores - steps) / temperature - top),
        torch.exp((scores + steps) / temperature - top),
    )
    order = (scores / temperature).argsort(descending=True)
    share_least, share_most = (least / most.sum())[order], (most / least.sum())[order]
    maybe, surely = torch.zeros_like(everyone), torch.zeros_like(everyone)
    maybe[order] = share_least.cumsum(0) - share_least < top_p
    surely[order] = share_most.cumsum(0) - share_most < top_p
    return maybe, surely


def drawable(
    scores: torch.Tensor,
    tokens: list[int],
    temperature: float,
    top_p: float,
    noise: torch.Tensor,
    dtype: torch.dtype,
    spread: float = 0.0,
) -> bool:
    """Whether each of `tokens` could be the target's sample, at this position's noise (V,), in a
    forward of another shape.

    Every score (V,) may move by TIE_STEPS rounding steps or the measured `spread`. A token is the
    sample where its tempered score plus its noise is the highest of the nucleus
    (sampling.keyed_scores): it could be where, rounded up, it reaches the highest that any token
    the nucleus keeps in every rounding has rounded down; a token the nucleus keeps only in some
    roundings counts."""
    scores = scores.double()
    steps = rounding_steps(scores, dtype, spread)
    low, high = (scores - steps) / temperature + noise, (scores + steps) / temperature + noise
    maybe, surely = nucleus_bounds(scores, temperature, top_p, dtype, spread)
    to_beat = float(low.masked_fill(~surely, float("-inf")).max())
    return all(bool(maybe[token]) and float(high[token]) >= to_beat for token in tokens)


def keyed_gap(
    scores: torch.Tensor, token: int, temperature: float, top_p: float, seed: int, position: int
) -> float:
    """How far `token`'s keyed score lies below the best one in this forward (0 when it is the
    sample there); a token the nucleus leaves out here is measured by its score as if kept."""
    keyed = keyed_scores(scores[None], temperature, top_p, seed, [position])[0]
    own = float(scores[token].double()) / temperature + float(
        position_noise(seed, [position], torch.tensor([token], device=scores.device))[0, 0]
    )
    return max(0.0, float(keyed.max()) - own)


@dataclass(frozen=True)
class TargetChoices:
    """The target's scores over b from the first difference on, from one teacher-forced forward
    over the prompt and b, and whether a token there could be its own choice: its greedy one
    (temperature 0) or its sample at that position's noise."""

    rows: torch.Tensor  # (len(b) - at, V): predicting b[at:]
    dtype: torch.dtype
    temperature: float
    top_p: float
    seed: int | None
    positions: range
    noise: torch.Tensor | None
    spread: float  # how far a score moved between two forward shapes at b[at]

    @classmethod
    def measure(cls, target, prompt_ids, b, at, temperature, top_p, seed) -> TargetChoices:
        ids = torch.tensor([list(prompt_ids) + b[:-1]], device=input_device(target))
        rows = target(input_ids=ids, logits_to_keep=len(b) - at).logits[0]
        positions = range(len(prompt_ids) + at, len(prompt_ids) + len(b))
        noise = (
            position_noise(seed, positions, torch.arange(rows.shape[-1], device=rows.device))
            if temperature > 0.0
            else None
        )
        spread = shape_spread(target, ids[0, : len(prompt_ids) + at], rows[0])
        return cls(rows, target.dtype, temperature, top_p, seed, positions, noise, spread)

    def possible(self, offset: int, tokens: list[int]) -> bool:
        """Whether each of tokens could be the target's own choice at b[at + offset]."""
        if self.temperature == 0.0:
            return within_rounding(self.rows[offset], tokens, self.dtype, self.spread)
        return drawable(
            self.rows[offset],
            tokens,
            self.temperature,
            self.top_p,
            self.noise[offset],
            self.dtype,
            self.spread,
        )

    def first_margin(self, a_token: int, b_token: int) -> float:
        """At the first difference: greedy, the score gap between the two tokens; sampled, how far
        the further of the two lies below the sample there (the one any mismatch is about)."""
        if self.temperature > 0.0:
            return max(self.margin(0, a_token), self.margin(0, b_token))
        return self.margin(0, a_token, b_token)

    def margin(self, offset: int, token: int, other: int | None = None) -> float:
        rows = self.rows
        if self.temperature > 0.0:
            return keyed_gap(
                rows[offset], token, self.temperature, self.top_p, self.seed, self.positions[offset]
            )
        return abs(
            float(rows[offset, token])
            - float(rows[offset].max() if other is None else rows[offset, other])
        )


def shape_spread(target, prefix: torch.Tensor, row: torch.Tensor) -> float:
    """The most any score (V,) of `row`, the check's scores after `prefix` (T,), moves when the
    same position comes from a one-token forward over a cache of the rest (plain decoding's
    shape)."""
    from .tree import new_cache

    cache = new_cache(target)
    if len(prefix) > 1:
        target(input_ids=prefix[None, :-1], past_key_values=cache, logits_to_keep=1)
    alone = target(input_ids=prefix[None, -1:], past_key_values=cache).logits[0, -1]
    return float((alone.double() - row.double()).abs().max())


@torch.no_grad()
def output_verdict(
    target,
    prompt_ids: list[int],
    a: list[int],
    b: list[int],
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int | None = None,
) -> OutputVerdict:
    """Compare output b with output a (new tokens of `target` for the same prompt; a is the
    reference), decoded greedily (temperature 0) or sampled with these settings and seed.

    A float tie (greedy) needs both tokens at the first difference to be the target's best within
    rounding, and every token of b after it to be the target's best within rounding given b's own
    prefix: b is then a greedy output too. A rounding boundary (sampled) needs the same of the
    target's sample at each position's noise. One teacher-forced forward over the prompt and b
    measures it all.
    """
    dtype = str(target.dtype).replace("torch.", "")
    a, b = list(a), list(b)
    at = first_difference(a, b)
    if at is None:
        return OutputVerdict("identical", None, None, dtype)
    # one output stops where the other goes on: not a choice between two tokens
    if at == min(len(a), len(b)):
        return OutputVerdict("mismatch", at, None, dtype)
    choices = TargetChoices.measure(target, prompt_ids, b, at, temperature, top_p, seed)
    sampled = temperature > 0.0
    spread = choices.spread
    if not choices.possible(0, [a[at], b[at]]):
        return OutputVerdict(
            "mismatch", at, choices.first_margin(a[at], b[at]), dtype, sampled, spread
        )
    for offset, token in enumerate(b[at + 1 :], start=1):
        if not choices.possible(offset, [token]):
            return OutputVerdict(
                "mismatch", at + offset, choices.margin(offset, token), dtype, sampled, spread
            )
    return OutputVerdict(
        "rounding boundary" if sampled else "float tie",
        at,
        choices.first_margin(a[at], b[at]),
        dtype,
        sampled,
        spread,
    )


def explain(verdict: OutputVerdict, name: str = "Ouroboros") -> str:
    """The verdict in plain words, for a page or a log."""
    if verdict.kind == "identical":
        return "identical outputs, token for token"
    moved = (
        f"; scores moved by up to {verdict.spread:.2g} between forward shapes here"
        if verdict.spread
        else ""
    )
    if verdict.kind == "float tie":
        return (
            f"identical up to token {verdict.first_difference}, where the target's two best tokens "
            f"scored the same within {verdict.dtype} rounding (gap {verdict.margin:g}{moved}); "
            "either is its greedy choice"
        )
    if verdict.kind == "rounding boundary":
        return (
            f"identical up to token {verdict.first_difference}, where two tokens' randomised "
            f"scores were equal within {verdict.dtype} rounding (gap {verdict.margin:.2g}{moved}); "
            "either is the target's sample there"
        )
    if verdict.sampled:
        gap = (
            ""
            if verdict.margin is None
            else f" (randomised score gap {verdict.margin:.2g}, beyond rounding{moved})"
        )
        return f"{name} departs from the target's sample at token {verdict.first_difference}{gap}"
    gap = (
        ""
        if verdict.margin is None
        else f" (score gap {verdict.margin:g}, not a rounding tie{moved})"
    )
    return (
        f"{name} departs from the target's greedy output at token {verdict.first_difference}{gap}"
    )
