"""The page's fixed content: the examples and the line naming the pair (each knob's explanation
is its config field's, in ouroboros_core/config.py)."""

from __future__ import annotations

import html
import json
import os
from dataclasses import asdict
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def chosen_preset() -> str | None:
    """The preset the host chose (OUROBOROS_PRESET, else the default); None for a target and draft
    of its own."""
    from ouroboros_core.models import DEFAULT_PRESET

    if os.environ.get("OUROBOROS_TARGET"):
        return None
    return os.environ.get("OUROBOROS_PRESET") or DEFAULT_PRESET


def examples(preset: str | None = None) -> list[dict]:
    """Prompts labelled by what they show, ordinary ones first: when Ouroboros wins, and when it
    does not. The embedded pair continues code (examples.json); a chat pair answers requests
    (examples-chat.json)."""
    from ouroboros_core.models import presets

    known = presets().get(preset) if preset else None
    code_only = known is not None and not known.chat
    name = "examples.json" if code_only else "examples-chat.json"
    return json.loads((ASSETS / name).read_text())


def prompt_label(preset: str | None = None) -> str:
    """The prompt box's label: a chat pair answers a request; any other pair continues a prompt."""
    from ouroboros_core.models import presets

    known = presets().get(preset) if preset else None
    if known is not None and known.chat:
        return "Your request (sent as a user's chat turn; tick Raw text to send it as it is)"
    return "Prompt"


EXAMPLES = examples(chosen_preset())
PROMPT_LABEL = prompt_label(chosen_preset())


def chosen_preset_entry():
    """The host's preset (a presets.Preset), or None for a pair of the host's own or an unknown
    name."""
    from ouroboros_core.models import presets

    name = chosen_preset()
    return presets().get(name) if name else None


def planned_device() -> str:
    """The device type the pair will load on, as the loader picks it: OUROBOROS_DEVICE, else cuda
    where there is one, else cpu."""
    import torch

    device = os.environ.get("OUROBOROS_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    return device.split(":")[0]


def pair_settings(engine=None) -> dict:
    """The Ouroboros settings a race on `engine` starts from: the pair's own for its device, else
    the engine's defaults; while no pair is loaded yet, the host's preset's own for the device it
    will load on, so the page says the same before and after."""
    from ouroboros_core import OuroborosConfig

    if engine is not None:
        own = engine.defaults.get("ouroboros", {})
    else:
        preset = chosen_preset_entry()
        own = preset.settings.get(planned_device(), {}).get("ouroboros", {}) if preset else {}
    return {**asdict(OuroborosConfig()), **own}


def has_store(engine=None) -> bool:
    """Whether the pair's draft carries the target's stored answers (lookup.AnswerStore): the
    loaded one's, else (while loading) the host's preset's, where its draft is a folder of this
    project."""
    from ouroboros_core.lookup import ANSWERS_FILE

    if engine is not None:
        return getattr(engine.draft, "answer_store", None) is not None
    preset = chosen_preset_entry()
    if preset is None or not preset.draft.startswith("assets/"):
        return False
    return (Path(__file__).resolve().parent.parent / preset.draft / ANSWERS_FILE).exists()


def pair_description(engine=None) -> str:
    """The pair the host chose and, once it is loaded (`engine`), the device and dtype it runs
    on."""
    from ouroboros_core.models import presets

    where = ""
    if engine is not None:
        dtype = str(engine.target.dtype).split(".")[-1]
        where = f" Running on **{engine.target.device}** in **{dtype}**"
        where += f", the target from {engine.target_source}." if engine.target_source else "."
        if engine.chat:
            where += " Prompts go to the target as a user's chat turn; its answer fills the lanes."
    if os.environ.get("OUROBOROS_TARGET"):
        return (
            f"Pair: target `{os.environ['OUROBOROS_TARGET']}`, "
            f"draft `{os.environ.get('OUROBOROS_DRAFT')}`." + where
        )
    name = chosen_preset()
    preset = presets().get(name)
    if preset is None:
        return f"Pair: `{html.escape(name)}` (unknown preset)"
    return (
        f"Pair **{name}**: target `{preset.target}`, draft `{preset.draft}`: "
        f"{preset.description}.{where}"
    )
