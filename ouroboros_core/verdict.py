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


@torch.no_grad()
def output_verdict(target, prompt_ids: list[int], a: list[int], b: list[int]) -> OutputVerdict:
    """Compare two outputs (new tokens only) of `target` for the same prompt."""
    dtype = str(target.dtype).replace("torch.", "")
    at = first_difference(list(a), list(b))
    if at is None:
        return OutputVerdict("identical", None, None, dtype)
    if at == min(len(a), len(b)):  # one output stops where the other goes on: not a choice between two tokens
        return OutputVerdict("mismatch", at, None, dtype)
    ids = torch.tensor([list(prompt_ids) + list(a[:at])], device=input_device(target))
    scores = target(input_ids=ids, logits_to_keep=1).logits[0, -1]  # (V,), in the target's own dtype
    best = float(scores.max())
    chosen = (float(scores[a[at]]), float(scores[b[at]]))
    margin = abs(chosen[0] - chosen[1])
    tolerance = TIE_STEPS * rounding_step(target.dtype, max(abs(best), *map(abs, chosen)))
    tie = target.dtype in SIXTEEN_BIT and all(best - score <= tolerance for score in chosen)
    return OutputVerdict("float tie" if tie else "mismatch", at, margin, dtype)


def explain(verdict: OutputVerdict, name: str = "Ouroboros") -> str:
    """The verdict in plain words, for a page or a log."""
    if verdict.kind == "identical":
        return "identical outputs, token for token"
    if verdict.kind == "float tie":
        return (f"identical up to token {verdict.first_difference}, where the target's two best tokens scored "
                f"the same within {verdict.dtype} rounding (gap {verdict.margin:g}); either is its greedy choice")
    gap = "" if verdict.margin is None else f" (score gap {verdict.margin:g}, not a rounding tie)"
    return f"{name} departs from the target's greedy output at token {verdict.first_difference}{gap}"
