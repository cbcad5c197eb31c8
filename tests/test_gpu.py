"""On the device the demo is built for: CUDA, in float32, bfloat16 and float16. Skipped without a GPU.

    python3 -m pytest -m gpu                                   # on a machine with CUDA
    OUROBOROS_GPU_TEST_DEVICE=cpu python3 -m pytest -m gpu     # the same checks on the CPU (slow, for a dry run)

Every method is compared with the target's own generate() through the engine's verdict: float32 must be
identical; in 16 bits a difference must be a float tie (the target's two best tokens within rounding).
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

from conftest import ARCHITECTURES, build_model, noisy_copy
from ouroboros_core import Engine, load_engine
from ouroboros_core.verify import forward_tree
from ouroboros_core.cache import new_cache
from pairs import save_tiny_pair

DEVICE = os.environ.get("OUROBOROS_GPU_TEST_DEVICE", "cuda")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PROMPTS = ["def add(a, b):\n    return a + b\n", "import os\nimport sys\n\nclass Config:\n",
           "for i in range(3):\n    print(i)\nfor i in range(3):\n"]
ALLOWED = {torch.float32: {"identical"}, torch.bfloat16: {"identical", "float tie"},
           torch.float16: {"identical", "float tie"}}


def gpu_engine(models, tokenizer, arch, dtype, draft_device=DEVICE) -> Engine:
    target = build_model(arch, models.eos_id, seed=ARCHITECTURES.index(arch)).to(DEVICE, dtype)
    draft = noisy_copy(build_model(arch, models.eos_id, seed=ARCHITECTURES.index(arch)), 0.015, seed=5)
    return Engine(target, draft.to(draft_device, dtype), tokenizer)


def greedy(engine, prompt, max_new_tokens) -> list[int]:
    ids = torch.tensor([engine.encode(prompt)], device=engine.target.device)
    with torch.no_grad():
        out = engine.target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                     max_new_tokens=max_new_tokens, pad_token_id=engine.tokenizer.eos_token_id)
    return out[0, ids.shape[1]:].tolist()


def assert_every_method_matches_generate(engine, prompts, max_new_tokens=24) -> None:
    allowed = ALLOWED[engine.target.dtype]
    for prompt in prompts:
        expected = greedy(engine, prompt, max_new_tokens)
        for method in ("vanilla", "speculative", "ouroboros"):
            output = engine.generate(prompt, method, max_new_tokens).token_ids
            verdict = engine.verdict(prompt, expected, output)
            assert verdict.kind in allowed, (method, prompt, verdict)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_method_matches_generate(models, tokenizer, arch, dtype):
    assert_every_method_matches_generate(gpu_engine(models, tokenizer, arch, DTYPES[dtype]), PROMPTS)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_target_on_the_gpu_and_draft_on_the_cpu(models, tokenizer, arch):
    engine = gpu_engine(models, tokenizer, arch, torch.float32, draft_device="cpu")
    assert engine.draft.device.type == "cpu" and engine.target.device.type == torch.device(DEVICE).type
    assert_every_method_matches_generate(engine, PROMPTS[:2])


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_sampling_is_reproducible_and_valid(models, tokenizer, arch):
    engine = gpu_engine(models, tokenizer, arch, torch.float32)
    for method in ("vanilla", "speculative", "ouroboros"):
        a = engine.generate(PROMPTS[0], method, 16, temperature=0.8, seed=3).token_ids
        b = engine.generate(PROMPTS[0], method, 16, temperature=0.8, seed=3).token_ids
        assert a == b and len(a) == 16 and all(0 <= t < engine.target.config.vocab_size for t in a), method


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_tree_forward_equals_plain_forwards(eos_id, arch):
    model = build_model(arch, eos_id, seed=7, attn="sdpa").to(DEVICE)
    prefix, trunk, branches = [5, 9, 33, 2, 7, 8, 1], [11, 12], [[21, 22], [31]]
    cache = new_cache(model)
    forward_tree(model, cache, prefix[:-2], [], [])
    logits = forward_tree(model, cache, prefix[-2:], trunk, branches)

    def plain(tokens):
        with torch.no_grad():
            return model(input_ids=torch.tensor([tokens], device=DEVICE)).logits[0]

    torch.testing.assert_close(logits[:3], plain(prefix + trunk)[-3:], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(logits[3:5], plain(prefix + trunk + [21, 22])[-2:], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(logits[5], plain(prefix + trunk + [31])[-1], rtol=1e-4, atol=1e-4)


def test_device_map_auto_spreads_the_target(tmp_path):
    folder = save_tiny_pair(tmp_path)
    engine = load_engine(str(folder / "target"), str(folder / "draft"), DEVICE if DEVICE == "cpu" else None,
                         device_map="auto" if DEVICE == "cuda" else None)
    assert_every_method_matches_generate(engine, PROMPTS[:2])


@pytest.fixture(scope="module")
def embedded():
    return load_engine(device=DEVICE)


def test_the_embedded_pair_runs_in_float32_and_matches_generate(embedded):
    assert embedded.target.dtype == torch.float32  # its preset's dtype on every device
    assert_every_method_matches_generate(embedded, PROMPTS, 48)


def test_the_embedded_pair_in_bfloat16_departs_only_at_float_ties():
    engine = load_engine(device=DEVICE, dtype="bfloat16")
    from ouroboros_core.tools.bench import humaneval_prompts

    assert_every_method_matches_generate(engine, [p["prompt"] for p in humaneval_prompts(4)], 64)


def test_the_apps_race_on_the_device(monkeypatch):
    monkeypatch.setenv("OUROBOROS_DEVICE", DEVICE)
    monkeypatch.delitem(sys.modules, "app", raising=False)
    app = importlib.import_module("app")
    engine = app.get_engine()
    assert engine.target.device.type == torch.device(DEVICE).type
    final = list(app.race_api(PROMPTS[0], 32))[-1]
    assert final["ouroboros"]["verdict"]["kind"] == "identical"
    assert final["ouroboros"]["token_ids"] == greedy(engine, PROMPTS[0], 32)
