"""One verdict for "same output": two token sequences from the same target and prompt are identical, differ
at a float tie (either token is the target's greedy choice), or mismatch (a bug).

In 16-bit floats a forward over many tokens rounds differently from a forward over one, so where the
target's two best tokens score the same, or one rounding step apart, the argmax can fall either way between
a plain decode and a verified draft. The engine measures the margin itself with one more target forward.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from .verify import input_device

SIXTEEN_BIT = (torch.bfloat16, torch.float16)
# The check's own forward (prompt and common prefix in one pass) has a third shape, so its scores may sit one
# rounding step away from those either run saw: a gap of 0 or 1 step there reads as up to 2 steps here.
TIE_STEPS = 2


@dataclass(frozen=True)
class OutputVerdict:
    kind: str  # "identical", "float tie" or "mismatch"
    first_difference: int | None  # index of the first new token that differs; None when identical
    margin: float | None  # the target's score gap between the two tokens chosen there
    dtype: str  # the target's dtype, for the explanation

    def to_dict(self) -> dict:
        out = asdict(self)
        del out["dtype"]
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


@torch.no_grad()
def output_verdict(target, prompt_ids: list[int], a: list[int], b: list[int]) -> OutputVerdict:
    """Compare output b with output a (new tokens of `target` for the same prompt; a is the reference).

    A float tie needs both tokens at the first difference to be the target's best within rounding, and every
    token of b after it to be the target's best within rounding given b's own prefix: b is then a greedy
    output too. One teacher-forced forward over the prompt and b measures it all.
    """
    dtype = str(target.dtype).replace("torch.", "")
    a, b = list(a), list(b)
    at = first_difference(a, b)
    if at is None:
        return OutputVerdict("identical", None, None, dtype)
    if at == min(len(a), len(b)):  # one output stops where the other goes on: not a choice between two tokens
        return OutputVerdict("mismatch", at, None, dtype)
    ids = torch.tensor([list(prompt_ids) + b[:-1]], device=input_device(target))
    rows = target(input_ids=ids, logits_to_keep=len(b) - at).logits[0]  # (len(b) - at, V): predicting b[at:]
    margin = abs(float(rows[0, a[at]]) - float(rows[0, b[at]]))
    if not within_rounding(rows[0], [a[at], b[at]], target.dtype):
        return OutputVerdict("mismatch", at, margin, dtype)
    for offset, token in enumerate(b[at + 1 :], start=1):
        if not within_rounding(rows[offset], [token], target.dtype):
            return OutputVerdict("mismatch", at + offset, float(rows[offset].max()) - float(rows[offset, token]), dtype)
    return OutputVerdict("float tie", at, margin, dtype)


def explain(verdict: OutputVerdict, name: str = "Ouroboros") -> str:
    """The verdict in plain words, for a page or a log."""
    if verdict.kind == "identical":
        return "identical outputs, token for token"
    if verdict.kind == "float tie":
        return (f"identical up to token {verdict.first_difference}, where the target's two best tokens scored "
                f"the same within {verdict.dtype} rounding (gap {verdict.margin:g}); either is its greedy choice")
    gap = "" if verdict.margin is None else f" (score gap {verdict.margin:g}, not a rounding tie)"
    return f"{name} departs from the target's greedy output at token {verdict.first_difference}{gap}"
