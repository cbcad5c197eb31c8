"""One verdict for "same output": two token sequences from the same target and prompt are identical, differ
at a float tie (greedy: either token is the target's greedy choice), differ at a rounding boundary (sampled:
either token is the target's sample at that position's draw), or mismatch (a bug).

In 16-bit floats a forward over many tokens rounds differently from a forward over one. Greedy: where the
target's two best tokens score the same, or one rounding step apart, the argmax can fall either way between a
plain decode and a verified draft. Sampled: a token is drawn where the position's fixed uniform falls in the
cumulative distribution (tokens in vocabulary order), and rounding moves every slice of it a little; where the
draw lies that close to the edge between two slices, either token is the target's sample. The engine measures
it itself with one more target forward.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from .verify import input_device, nucleus

SIXTEEN_BIT = (torch.bfloat16, torch.float16)
# The check's own forward (prompt and common prefix in one pass) has a third shape, so its scores may sit one
# rounding step away from those either run saw: a gap of 0 or 1 step there reads as up to 2 steps here.
TIE_STEPS = 2


CALM = ("identical", "float tie", "rounding boundary")  # the kinds that are the target's own output


@dataclass(frozen=True)
class OutputVerdict:
    kind: str  # "identical", "float tie", "rounding boundary" or "mismatch"
    first_difference: int | None  # index of the first new token that differs; None when identical
    # Greedy: the target's score gap between the two tokens chosen there. Sampled: how far the position's draw
    # lies outside the reference token's slice of the cumulative distribution (0 inside it), in this forward.
    margin: float | None
    dtype: str  # the target's dtype, for the explanation
    sampled: bool = False  # the outputs were sampled (the margin is then a distance in probability)

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
    """The distance between neighbouring values of `dtype` around `magnitude` (one unit in the last place)."""
    exponent = math.floor(math.log2(magnitude)) if magnitude > 0 else 0
    return torch.finfo(dtype).eps * 2.0 ** exponent


def within_rounding(scores: torch.Tensor, tokens: list[int], dtype: torch.dtype) -> bool:
    """Whether every one of `tokens` scores within TIE_STEPS rounding steps of the best score (V,): either could
    be the argmax of a forward of another shape. Never in float32, whose rounding is far below any real gap."""
    if dtype not in SIXTEEN_BIT:
        return False
    best = float(scores.max())
    chosen = [float(scores[token]) for token in tokens]
    tolerance = TIE_STEPS * rounding_step(dtype, max(abs(best), *map(abs, chosen)))
    return all(best - score <= tolerance for score in chosen)


def rounding_steps(scores: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """TIE_STEPS rounding steps of `dtype` around each score (V,), as float64."""
    magnitude = scores.double().abs().clamp(min=torch.finfo(dtype).tiny)
    return TIE_STEPS * torch.finfo(dtype).eps * torch.exp2(torch.floor(torch.log2(magnitude)))


def drawable(scores: torch.Tensor, tokens: list[int], temperature: float, top_p: float, draw: float,
             dtype: torch.dtype) -> bool:
    """Whether each of `tokens` could be the target's sample at uniform `draw` in a forward of another shape.

    Every score (V,) may move by TIE_STEPS rounding steps. A token's slice of the cumulative distribution
    (vocabulary order, as verify.target_tokens draws) ends latest when it and the tokens before it weigh most
    and those after it least, and starts earliest the other way round; a token the nucleus keeps only in some
    roundings weighs nothing at its least. Never in float32, whose rounding is far below any real gap."""
    if dtype not in SIXTEEN_BIT:
        return False
    scores = scores.double() / temperature
    steps = rounding_steps(scores * temperature, dtype) / temperature
    top = float(scores.max())
    least, most = torch.exp(scores - steps - top), torch.exp(scores + steps - top)
    if top_p < 1.0:  # kept in some rounding: the mass ranked above it can be below top_p; in every one: always
        order = scores.argsort(descending=True)
        share_least, share_most = (least / most.sum())[order], (most / least.sum())[order]
        maybe, surely = torch.zeros_like(scores, dtype=torch.bool), torch.zeros_like(scores, dtype=torch.bool)
        maybe[order] = share_least.cumsum(0) - share_least < top_p
        surely[order] = share_most.cumsum(0) - share_most < top_p
        least, most = least * surely, most * maybe
    up_to_most, up_to_least = most.cumsum(0), least.cumsum(0)  # mass up to and including each token
    total_most, total_least = float(up_to_most[-1]), float(up_to_least[-1])
    for token in tokens:
        if float(most[token]) == 0.0:
            return False
        end = float(up_to_most[token] / (up_to_most[token] + total_least - up_to_least[token]))
        before_least, before_most = up_to_least[token] - least[token], up_to_most[token] - most[token]
        start = float(before_least / (before_least + total_most - before_most))
        if not start <= draw < end:
            return False
    return True


def slice_distance(scores: torch.Tensor, token: int, temperature: float, top_p: float, draw: float) -> float:
    """How far `draw` lies outside `token`'s slice of the cumulative distribution in this forward (0 inside)."""
    probs = nucleus(torch.softmax(scores.double() / temperature, dim=-1), top_p)
    probs = probs / probs.sum()
    end = float(probs[: token + 1].sum())
    return max(0.0, end - float(probs[token]) - draw, draw - end)


@torch.no_grad()
def output_verdict(target, prompt_ids: list[int], a: list[int], b: list[int], temperature: float = 0.0,
                   top_p: float = 1.0, seed: int | None = None) -> OutputVerdict:
    """Compare output b with output a (new tokens of `target` for the same prompt; a is the reference),
    decoded greedily (temperature 0) or sampled with these settings and seed.

    A float tie (greedy) needs both tokens at the first difference to be the target's best within rounding,
    and every token of b after it to be the target's best within rounding given b's own prefix: b is then a
    greedy output too. A rounding boundary (sampled) needs the same of the target's sample at each position's
    draw. One teacher-forced forward over the prompt and b measures it all.
    """
    from .verify import position_uniform

    dtype = str(target.dtype).replace("torch.", "")
    a, b = list(a), list(b)
    at = first_difference(a, b)
    if at is None:
        return OutputVerdict("identical", None, None, dtype)
    if at == min(len(a), len(b)):  # one output stops where the other goes on: not a choice between two tokens
        return OutputVerdict("mismatch", at, None, dtype)
    ids = torch.tensor([list(prompt_ids) + b[:-1]], device=input_device(target))
    rows = target(input_ids=ids, logits_to_keep=len(b) - at).logits[0]  # (len(b) - at, V): predicting b[at:]

    def draw(offset: int) -> float:
        return position_uniform(seed, len(prompt_ids) + at + offset)

    def possible(offset: int, tokens: list[int]) -> bool:  # each of tokens could be the target's own choice
        if temperature == 0.0:
            return within_rounding(rows[offset], tokens, target.dtype)
        return drawable(rows[offset], tokens, temperature, top_p, draw(offset), target.dtype)

    def margin(offset: int, token: int, other: int | None = None) -> float:
        if temperature > 0.0:
            return slice_distance(rows[offset], token, temperature, top_p, draw(offset))
        return abs(float(rows[offset, token]) - float(rows[offset].max() if other is None else rows[offset, other]))

    sampled = temperature > 0.0
    if not possible(0, [a[at], b[at]]):
        return OutputVerdict("mismatch", at, margin(0, a[at], b[at]), dtype, sampled)
    for offset, token in enumerate(b[at + 1 :], start=1):
        if not possible(offset, [token]):
            return OutputVerdict("mismatch", at + offset, margin(offset, token), dtype, sampled)
    return OutputVerdict("rounding boundary" if sampled else "float tie", at, margin(0, a[at], b[at]), dtype, sampled)


def explain(verdict: OutputVerdict, name: str = "Ouroboros") -> str:
    """The verdict in plain words, for a page or a log."""
    if verdict.kind == "identical":
        return "identical outputs, token for token"
    if verdict.kind == "float tie":
        return (f"identical up to token {verdict.first_difference}, where the target's two best tokens scored "
                f"the same within {verdict.dtype} rounding (gap {verdict.margin:g}); either is its greedy choice")
    if verdict.kind == "rounding boundary":
        return (f"identical up to token {verdict.first_difference}, where that position's random draw fell within "
                f"{verdict.dtype} rounding of the edge between two tokens' probabilities; either is the target's "
                "sample there")
    if verdict.sampled:
        gap = "" if verdict.margin is None else f" (its draw {verdict.margin:.2g} from that token, beyond rounding)"
        return f"{name} departs from the target's sample at token {verdict.first_difference}{gap}"
    gap = "" if verdict.margin is None else f" (score gap {verdict.margin:g}, not a rounding tie)"
    return f"{name} departs from the target's greedy output at token {verdict.first_difference}{gap}"
