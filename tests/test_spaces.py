"""Start-up as Hugging Face Spaces runs it. On ZeroGPU nothing may touch the device outside a
function wrapped by `spaces.GPU`: a stand-in `spaces` module records every model forward and whether
it ran inside one. And a pair too large for the device's free memory is refused before loading, with
a message that says why; before that, the Space tool's plan refuses a pair too large for the
hardware and says what a model or the hardware needs (a secret, billing), without touching the
Hub."""

from __future__ import annotations

import functools
import importlib
import sys
import types

import pytest
import torch
from transformers import PreTrainedModel

from huggingface_hub import SpaceHardware

from ouroboros_core import Engine, LoadError, load_engine
import ouroboros_core.models as models_module
from ouroboros_core.tools import space
from ouroboros_core.tools.space_files import upload_set

PROMPT = 'def count_words(text):\n    """Count the words in text."""\n'


def stand_in_spaces(gpu, zero_gpu: bool) -> types.ModuleType:
    """The `spaces` package as a Space has it: spaces.GPU, and spaces.config.Config.zero_gpu (True
    only on ZeroGPU hardware; every Gradio Space installs the package)."""
    fake = types.ModuleType("spaces")
    fake.GPU = gpu
    fake.config = types.SimpleNamespace(Config=types.SimpleNamespace(zero_gpu=zero_gpu))
    return fake


@pytest.fixture
def zero_gpu(monkeypatch):
    """Import app.py afresh with a stand-in `spaces`; yield (app, record of forwards: 'inside' /
    'outside')."""
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
    # The page's first load: the pair's settings, no device work.
    assert app.LOADING.knob_values() == {"gamma": 1, "window": 0, "ngram": 6, "branches": 1}
    assert "Running on **cpu** in **float32**" in app.LOADING.pair_line()
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
    # Absent: `import spaces` raises ImportError. A CPU Space's: the package is there, its config
    # says no ZeroGPU.
    module = None if installed == "absent" else stand_in_spaces(never_wrap, False)
    monkeypatch.setitem(sys.modules, "spaces", module)
    app = importlib.import_module("app")
    assert not app.ZERO_GPU and app.DEVICE.executor is not None  # engine calls on the device thread
    calls = []
    real_generate = Engine.generate
    monkeypatch.setattr(
        Engine, "generate", lambda *a, **k: calls.append(a[1:]) or real_generate(*a, **k)
    )
    engine = app.get_engine()
    assert engine.name == "demo" and engine.target.dtype == torch.float32
    app.get_engine()
    assert calls == [("def warm_up():\n", "ouroboros", 8)], (
        "the warm-up runs once at start-up off ZeroGPU"
    )


def test_a_pair_too_big_for_free_memory_is_refused_before_loading(monkeypatch):
    engine = load_engine("demo", device="cpu", check_memory=False)
    size = {
        role: sum(p.numel() * p.element_size() for p in model.parameters())  # tied weights once
        for role, model in (("target", engine.target), ("draft", engine.draft))
    }
    loaded = []
    monkeypatch.setattr(models_module, "free_memory_bytes", lambda device: 8 * 2**20)  # 8 MiB free
    monkeypatch.setattr(models_module, "load_model", lambda *a, **k: loaded.append(a))
    with pytest.raises(LoadError) as caught:
        load_engine("demo", device="cpu")
    # Counted from the safetensors headers, the need matches the loaded models' float32 weights.
    size_text = models_module.size_text
    expected = (
        f"the pair needs about {size_text(sum(size.values()))} in float32 "
        f"(target {size_text(size['target'])}, draft {size_text(size['draft'])}) "
        f"but cpu has 8 MiB free"
    )
    assert expected in str(caught.value) and "OUROBOROS_DTYPE" in str(caught.value)
    assert loaded == [], "nothing is loaded once the pair is known not to fit"


# --- the Space tool's plan: what the hardware can hold, what a model and the hardware need --------


@pytest.fixture
def no_hub(monkeypatch):
    def explode(*args, **kwargs):
        raise AssertionError("a dry run touched the Hub")

    monkeypatch.setattr(space, "HfApi", explode)
    monkeypatch.setattr(space, "get_token", explode)


@pytest.fixture(scope="module")
def paths() -> set[str]:
    return {f.path for f in upload_set()}


def test_an_8b_pair_on_cpu_basic_is_refused_and_its_gated_models_are_named(no_hub, capsys):
    deploy = [
        "deploy",
        "me/race",
        "--dry-run",
        "--preset",
        "llama-3.1-8b",
        "--hardware",
        "cpu-basic",
    ]
    assert space.main(deploy) == 1
    out, err = capsys.readouterr()
    assert "Hardware: cpu-basic: CPU basic, 2 vCPU, 16 GB RAM" in out
    assert (
        "Fit (an estimate): about 37.1 GB of weights in float32 for cpu-basic's 16 GB of RAM\n"
        in out
    )
    assert (
        "the pair cannot fit: about 37.1 GB of weights in float32, over cpu-basic's 16 GB of "
        "RAM; it would fit l40sx1, a100-large (in bfloat16)"
    ) in err
    assert "--deploy-anyway" in err
    assert (
        "warning: meta-llama/Llama-3.1-8B-Instruct and meta-llama/Llama-3.2-1B-Instruct are "
        "gated on the Hub: the Space needs a secret HF_TOKEN"
    ) in out
    assert "Dry run: nothing was sent" not in out
    assert space.main([*deploy, "--deploy-anyway"]) == 0
    assert "warning: the pair cannot fit" in capsys.readouterr().out


def test_a_tight_fit_is_a_warning_and_paid_hardware_says_it_bills(paths):
    checks = space.plan_checks({"OUROBOROS_PRESET": "llama-3.1-8b"}, "a10g-small", paths)
    assert checks.lines[-1] == (
        "Fit (an estimate): about 18.5 GB of weights in bfloat16 for "
        "a10g-small's 24 GB of GPU memory"
    )
    assert checks.refusals == []
    assert checks.warnings[0].startswith("the pair's weights take 77% of a10g-small's 24 GB")
    assert checks.warnings[-1].startswith(
        "a10g-small is paid hardware: billed by the minute while the Space runs"
    )
    qwen = {"OUROBOROS_PRESET": "qwen-coder-7b"}
    assert (
        space.plan_checks(qwen, "t4-small", paths)
        .refusals[0]
        .startswith(
            "the pair cannot fit: about 16.2 GB of weights in bfloat16, "
            "over t4-small's 16 GB of GPU memory"
        )
    )
    bf16 = space.plan_checks({**qwen, "OUROBOROS_DTYPE": "bfloat16"}, "cpu-upgrade", paths)
    assert bf16.lines[-1].endswith(
        "about 16.2 GB of weights in bfloat16 for cpu-upgrade's 32 GB of RAM: fits"
    )
    assert bf16.warnings == [
        "cpu-upgrade is paid hardware: billed by the minute while the Space "
        "runs, visitors or not, until it sleeps or is paused; the account "
        "needs a payment method (huggingface.co/settings/billing; prices at "
        "huggingface.co/pricing)"
    ]


def test_the_default_pair_plans_fine_on_cpu_basic(paths):
    default = models_module.presets()[models_module.DEFAULT_PRESET]
    folder = {f"{default.draft}/model.safetensors"}  # as if its folder were tracked
    checks = space.plan_checks({}, "cpu-basic", paths | folder)
    assert checks.refusals == [] and checks.warnings == []
    assert f"target {default.target} (135M parameters, from its configuration)" in checks.lines[0]
    assert checks.lines[-1].endswith("float32 for cpu-basic's 16 GB of RAM: fits")


def test_without_hardware_zero_gpu_or_a_missing_folder_the_plan_says_so(paths):
    unset = space.plan_checks({"OUROBOROS_PRESET": "llama-3.1-8b"}, None, paths)
    assert unset.refusals == []
    assert unset.warnings[0].startswith("if the Space is new (cpu-basic), the pair cannot fit")
    assert unset.warnings[0].endswith("pass --hardware")
    zero = space.plan_checks({"OUROBOROS_PRESET": "demo"}, "zero-a10g", paths)
    assert zero.lines[-1].endswith("float32 for zero-a10g's 70 GB of GPU memory: fits")
    assert zero.refusals == []
    assert "PRO subscription" in zero.warnings[0] and "Python 3.10.13" in zero.warnings[0]
    missing = space.plan_checks(
        {"OUROBOROS_TARGET": "assets/models/nope", "OUROBOROS_DRAFT": "assets/models/draft"},
        "cpu-basic",
        paths,
    )
    assert missing.refusals == [
        "assets/models/nope is a folder the upload set lacks (not here, or "
        "not tracked by git): the Space could not load it"
    ]
    assert space.plan_checks({"OUROBOROS_PRESET": "demo"}, "a100x4", paths).lines == [
        "Fit: not checked (the Hub documents no memory figures for a100x4)"
    ]


def test_a_models_size_comes_from_the_table_its_folder_or_its_name():
    assert space.parameters("meta-llama/Llama-3.1-8B-Instruct") == (
        8_030_261_248,
        "from its configuration",
    )
    assert space.parameters("assets/models/draft") == (
        models_module.parameter_count(models_module.ASSETS / "models" / "draft"),
        "from its safetensors",
    )
    assert space.parameters("someone/Foo-13B-chat") == (13_000_000_000, "guessed from its name")
    assert space.parameters("someone/Bar-v2-350m") == (350_000_000, "guessed from its name")
    assert space.parameters("someone/tiny") == (None, "")
    assert set(space.SPACE_HARDWARE) <= {flavor.value for flavor in SpaceHardware}
    assert space.SPACE_HARDWARE["t4-small"] == space.Hardware("Nvidia T4 small", 4, 15, 16, 1)


def test_a_pair_kept_on_the_cpu_of_gpu_hardware_is_planned_in_float32_in_ram(paths):
    # OUROBOROS_DEVICE=cpu on a T4 Space: the models load into the machine's RAM in float32, not
    # into the GPU's memory in bfloat16.
    pair = {"OUROBOROS_PRESET": "qwen-coder-7b", "OUROBOROS_DEVICE": "cpu"}
    checks = space.plan_checks(pair, "t4-medium", paths)
    assert "of weights in float32 for t4-medium's 30 GB of RAM" in checks.lines[-1], checks.lines
    on_gpu = space.plan_checks({"OUROBOROS_PRESET": "qwen-coder-7b"}, "t4-medium", paths)
    assert "in bfloat16, over t4-medium's 16 GB of GPU memory" in on_gpu.refusals[0]
