"""The page's fixed content: the examples, the knobs' explanations and the line naming the pair."""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def examples() -> list[dict]:
    """Prompts labelled by what they show, ordinary code first: when Ouroboros wins, and when it does not."""
    return json.loads((ASSETS / "examples.json").read_text())


EXAMPLES = examples()
# One line per Ouroboros knob, under its slider.
KNOB_INFO = {"gamma": "draft at least this many tokens before the target checks them",
             "window": "lookahead columns the draft refines in each forward (0: none; cheap on a GPU)",
             "ngram": "phrases of N-1 tokens enter the pool, keyed on the token before them",
             "branches": "pool phrases the target verifies beside the draft, in the same forward"}


def pair_description(engine=None) -> str:
    """The pair the host chose and, once it is loaded (`engine`), the device and dtype it runs on."""
    from ouroboros_core.models import presets

    where = ""
    if engine is not None:
        where = f" Running on **{engine.target.device}** in **{str(engine.target.dtype).split('.')[-1]}**."
    if os.environ.get("OUROBOROS_TARGET"):
        return (f"Pair: target `{os.environ['OUROBOROS_TARGET']}`, draft `{os.environ.get('OUROBOROS_DRAFT')}`."
                + where)
    name = os.environ.get("OUROBOROS_PRESET") or "demo"
    preset = presets().get(name)
    if preset is None:
        return f"Pair: `{html.escape(name)}` (unknown preset)"
    return f"Pair **{name}**: target `{preset.target}`, draft `{preset.draft}`: {preset.description}.{where}"
