"""Start-up as Hugging Face Spaces runs it. On ZeroGPU nothing may touch the device outside a function wrapped
by `spaces.GPU`: a stand-in `spaces` module records every model forward and whether it ran inside one.
And a pair too large for the device's free memory is refused before loading, with a message that says why."""

from __future__ import annotations

import functools
import importlib
import sys
import types

import pytest
import torch
from transformers import PreTrainedModel

from ouroboros_core import Engine, LoadError, load_engine
import ouroboros_core.models as models_module

PROMPT = 'def count_words(text):\n    """Count the words in text."""\n'


def stand_in_spaces(gpu, zero_gpu: bool) -> types.ModuleType:
    """The `spaces` package as a Space has it: spaces.GPU, and spaces.config.Config.zero_gpu (True only on ZeroGPU
    hardware; every Gradio Space installs the package)."""
    fake = types.ModuleType("spaces")
    fake.GPU = gpu
    fake.config = types.SimpleNamespace(Config=types.SimpleNamespace(zero_gpu=zero_gpu))
    return fake


@pytest.fixture
def zero_gpu(monkeypatch):
    """Import app.py afresh with a stand-in `spaces`; yield (app, record of forwards: 'inside' / 'outside')."""
    record = {"inside": 0, "outside": 0}
    inside = [False]

    def gpu(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            inside[0] = True
            try:
                yield from fn(*args, **kwargs)
            finally:
                inside[0] = False
        return wrapper

    monkeypatch.setitem(sys.modules, "spaces", stand_in_spaces(gpu, zero_gpu=True))
    monkeypatch.setenv("OUROBOROS_DEVICE", "cpu")  # the CPU suite, also on a machine with CUDA
    monkeypatch.delitem(sys.modules, "app", raising=False)  # restored after the test
    real_call = torch.nn.Module.__call__

    def recording_call(self, *args, **kwargs):
        if isinstance(self, PreTrainedModel):
            record["inside" if inside[0] else "outside"] += 1
        return real_call(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "__call__", recording_call)
    yield importlib.import_module("app"), record


def test_zero_gpu_start_up_runs_no_forward_outside_a_gpu_function(zero_gpu):
    app, record = zero_gpu
    assert app.ZERO_GPU
    app.get_engine()  # what main() does before launching
    assert app.knob_values() == [1, 0, 6, 1]  # the page's first load: the pair's settings, no device work
    assert "Running on **cpu** in **float32**" in app.pair_line()
    assert record == {"inside": 0, "outside": 0}, "start-up touched the device outside spaces.GPU"
    final = list(app.race_api(PROMPT, 8))[-1]
    assert final["ouroboros"]["verdict"]["kind"] == "identical"
    assert record["inside"] > 0 and record["outside"] == 0, record


def never_wrap(fn):
    raise AssertionError("spaces.GPU wrapped a handler on a Space without ZeroGPU")


@pytest.mark.parametrize("installed", ["absent", "a CPU Space's"])
def test_without_zero_gpu_start_up_warms_up(monkeypatch, installed):
    monkeypatch.setenv("OUROBOROS_DEVICE", "cpu")
    monkeypatch.delitem(sys.modules, "app", raising=False)
    # Absent: `import spaces` raises ImportError. A CPU Space's: the package is there, its config says no ZeroGPU.
    monkeypatch.setitem(sys.modules, "spaces", None if installed == "absent" else stand_in_spaces(never_wrap, False))
    app = importlib.import_module("app")
    assert not app.ZERO_GPU and app.DEVICE.executor is not None  # engine calls on the device thread
    calls = []
    real_generate = Engine.generate
    monkeypatch.setattr(Engine, "generate", lambda *a, **k: calls.append(a[1:]) or real_generate(*a, **k))
    engine = app.get_engine()
    assert engine.name == "demo" and engine.target.dtype == torch.float32
    app.get_engine()
    assert calls == [("def warm_up():\n", "ouroboros", 8)], "the warm-up runs once at start-up off ZeroGPU"


def test_a_pair_too_big_for_free_memory_is_refused_before_loading(monkeypatch):
    engine = load_engine(device="cpu", check_memory=False)
    size = {role: sum(p.numel() * p.element_size() for p in model.parameters())  # tied weights once
            for role, model in (("target", engine.target), ("draft", engine.draft))}
    loaded = []
    monkeypatch.setattr(models_module, "free_memory_bytes", lambda device: 8 * 2**20)  # 8 MiB free
    monkeypatch.setattr(models_module, "load_model", lambda *a, **k: loaded.append(a))
    with pytest.raises(LoadError) as caught:
        load_engine(device="cpu")
    # Counted from the safetensors headers, the need matches the loaded models' float32 weights.
    expected = (f"the pair needs about {models_module.size_text(sum(size.values()))} in float32 "
                f"(target {models_module.size_text(size['target'])}, draft {models_module.size_text(size['draft'])}) "
                f"but cpu has 8 MiB free")
    assert expected in str(caught.value) and "OUROBOROS_DTYPE" in str(caught.value)
    assert loaded == [], "nothing is loaded once the pair is known not to fit"
