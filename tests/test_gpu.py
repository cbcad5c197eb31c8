"""On the device the demo is built for: CUDA, in float32, bfloat16 and float16. Skipped without a
GPU.

    # on a machine with CUDA
    python3 -m pytest -m gpu
    # the same checks on the CPU (slow, for a dry run)
    OUROBOROS_GPU_TEST_DEVICE=cpu python3 -m pytest -m gpu

Every method is compared with the target's own generate() through the engine's verdict: float32 must
be identical; in 16 bits a difference must be a float tie (the target's two best tokens within
rounding) at a position where the reference itself sits at one. Each reference is checked as the CPU
tests check theirs (gpu_checks.reference_ties). Nothing is taken from what a test asked for: the
device and dtype of every model are read from the forwards it really ran during the run, and the
speculative methods must have drafted, had drafts accepted and committed more than one token per
target forward.
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

from conftest import ARCHITECTURES, build_model, noisy_copy
from gpu_checks import (
    assert_computed_in,
    assert_noise_as_on_the_cpu,
    assert_parameters_on,
    assert_placed_as_mapped,
    assert_speculates,
    recording,
    reference_ties,
    same_device,
)
from ouroboros_core import Engine, load_engine
from ouroboros_core.tree import DraftTree, forward_tree, new_cache
from pairs import save_tiny_pair

DEVICE = os.environ.get("OUROBOROS_GPU_TEST_DEVICE", "cuda")
ON_GPU = torch.device(DEVICE).type == "cuda"
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(ON_GPU and not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PROMPTS = [
    "def add(a, b):\n    return a + b\n",
    "import os\nimport sys\n\nclass Config:\n",
    "for i in range(3):\n    print(i)\nfor i in range(3):\n",
]
METHODS = ("vanilla", "speculative", "ouroboros")


def gpu_engine(models, tokenizer, arch, dtype, draft_device=DEVICE) -> Engine:
    target = build_model(arch, models.eos_id, seed=ARCHITECTURES.index(arch)).to(DEVICE, dtype)
    draft = noisy_copy(
        build_model(arch, models.eos_id, seed=ARCHITECTURES.index(arch)), 0.015, seed=5
    )
    return Engine(target, draft.to(draft_device, dtype), tokenizer)


def greedy(engine, prompt, max_new_tokens) -> tuple[list[int], set[int]]:
    """The target's own greedy generate() output, checked as the CPU tests check theirs, and the
    positions where it sits at a 16-bit tie (none in float32, where a reference that close to a tie
    fails the test)."""
    prompt_ids = engine.encode(prompt)
    ids = torch.tensor([prompt_ids], device=engine.target.get_input_embeddings().weight.device)
    with torch.no_grad():
        out = engine.target.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=engine.tokenizer.eos_token_id,
        )
    reference = out[0, ids.shape[1] :].tolist()
    return reference, reference_ties(engine.target, prompt_ids, reference)


def assert_matches(engine, prompt, reference, ties, output, what) -> None:
    """Identical to the reference, or (in 16 bits) departing from it first at one of its ties."""
    verdict = engine.verdict(prompt, reference, output)
    assert verdict.kind == "identical" or (
        verdict.kind == "float tie" and verdict.first_difference in ties
    ), (what, prompt, verdict, sorted(ties))


def assert_every_method_matches_generate(
    engine, prompts, max_new_tokens=24, *, target, draft
) -> None:
    """target, draft: the (device, dtype) each must compute in."""
    for prompt in prompts:
        reference, ties = greedy(engine, prompt, max_new_tokens)
        for method in METHODS:
            with recording(engine) as computed:
                result = engine.generate(prompt, method, max_new_tokens)
            assert_computed_in(computed, "target", *target)
            if method == "vanilla":
                assert not computed.ran("draft"), "vanilla ran the draft"
            else:
                assert_computed_in(computed, "draft", *draft)
            stats = result.stats
            assert_speculates(
                method, stats.drafted_tokens, stats.accepted_tokens, stats.tokens_per_forward
            )
            assert_matches(engine, prompt, reference, ties, result.token_ids, method)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_method_matches_generate(models, tokenizer, arch, dtype):
    place = (DEVICE, DTYPES[dtype])
    assert_every_method_matches_generate(
        gpu_engine(models, tokenizer, arch, DTYPES[dtype]), PROMPTS, target=place, draft=place
    )


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_target_on_the_gpu_and_draft_on_the_cpu(models, tokenizer, arch):
    engine = gpu_engine(models, tokenizer, arch, torch.float32, draft_device="cpu")
    assert_parameters_on(engine.target, DEVICE, torch.float32)
    assert_parameters_on(engine.draft, "cpu", torch.float32)
    assert_every_method_matches_generate(
        engine, PROMPTS[:2], target=(DEVICE, torch.float32), draft=("cpu", torch.float32)
    )


def test_the_sampling_noise_on_the_device_is_the_cpus():
    """Every lane's sample rests on position_noise being the same on any device: on a GPU it runs
    the tensor path, which never runs in the CPU suite's engines, so it is held here to the CPU's
    bits over a large grid."""
    assert_noise_as_on_the_cpu(DEVICE)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_sampling_is_reproducible_and_valid(models, tokenizer, arch):
    engine = gpu_engine(models, tokenizer, arch, torch.float32)
    for method in METHODS:
        a = engine.generate(PROMPTS[0], method, 16, temperature=0.8, seed=3)
        b = engine.generate(PROMPTS[0], method, 16, temperature=0.8, seed=3).token_ids
        assert (
            a.token_ids == b
            and len(b) == 16
            and all(0 <= t < engine.target.config.vocab_size for t in b)
        ), method
        assert_speculates(
            method, a.stats.drafted_tokens, a.stats.accepted_tokens, a.stats.tokens_per_forward
        )


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_tree_forward_equals_plain_forwards(eos_id, arch):
    model = build_model(arch, eos_id, seed=7, attn="sdpa").to(DEVICE)
    prefix, trunk, branches = [5, 9, 33, 2, 7, 8, 1], [11, 12], [[21, 22], [31]]
    cache = new_cache(model)
    forward_tree(model, cache, prefix[:-2])
    logits = forward_tree(model, cache, prefix[-2:], DraftTree.of(trunk, branches))
    assert same_device(logits.device, DEVICE) and logits.dtype == torch.float32

    def plain(tokens):
        with torch.no_grad():
            return model(input_ids=torch.tensor([tokens], device=DEVICE)).logits[0]

    torch.testing.assert_close(logits[:3], plain(prefix + trunk)[-3:], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(
        logits[3:5], plain(prefix + trunk + [21, 22])[-2:], rtol=1e-4, atol=1e-4
    )
    torch.testing.assert_close(logits[5], plain(prefix + trunk + [31])[-1], rtol=1e-4, atol=1e-4)


def test_device_map_auto_spreads_the_target(tmp_path):
    """accelerate places the target; the test reads where its layers went and where each computed.
    The draft is the target's own weights, loaded apart, so that nearly every draft is accepted
    through the mapped target."""
    folder = save_tiny_pair(tmp_path) / "target"
    engine = load_engine(str(folder), str(folder), DEVICE, dtype="float32", device_map="auto")
    prompt = PROMPTS[0]
    reference, ties = greedy(engine, prompt, 24)
    for method in METHODS:
        with recording(engine) as computed:
            result = engine.generate(prompt, method, 24)
        assert_placed_as_mapped(engine.target, computed, DEVICE)
        assert_computed_in(computed, "target", DEVICE, torch.float32)
        if method != "vanilla":
            assert_computed_in(computed, "draft", DEVICE, torch.float32)
        assert_speculates(
            method,
            result.stats.drafted_tokens,
            result.stats.accepted_tokens,
            result.stats.tokens_per_forward,
        )
        assert_matches(engine, prompt, reference, ties, result.token_ids, method)


@pytest.fixture(scope="module")
def embedded():
    return load_engine("demo", device=DEVICE)


def test_the_embedded_pair_runs_in_float32_and_matches_generate(embedded):
    place = (DEVICE, torch.float32)  # its preset's dtype on every device
    assert_every_method_matches_generate(embedded, PROMPTS, 48, target=place, draft=place)


def test_the_embedded_pair_in_bfloat16_departs_only_at_float_ties():
    """bfloat16 asked for beats the preset's float32: a preset that overrode the request would
    compute in float32 and fail here."""
    engine = load_engine("demo", device=DEVICE, dtype="bfloat16")
    from ouroboros_core.tools.bench import humaneval_prompts

    place = (DEVICE, torch.bfloat16)
    assert_every_method_matches_generate(
        engine, [p["prompt"] for p in humaneval_prompts(4)], 64, target=place, draft=place
    )


def test_sampled_races_in_16_bits_part_only_at_rounding_boundaries():
    """Sampled, the lanes may part where two tokens' keyed scores (tempered score plus the
    position's noise) lie within rounding of each other; the verdict must call every such difference
    a rounding boundary, none a mismatch, and a lane drawn with other noise a mismatch."""
    from ouroboros_core.tools.bench import humaneval_prompts

    engine = load_engine("demo", device=DEVICE, dtype="bfloat16")
    sampling = {"temperature": 0.8, "top_p": 0.95}
    kinds = []
    for item in humaneval_prompts(6):
        for seed in (1, 2, 3):
            vanilla, ouroboros = (
                engine.generate(item["prompt"], method, 40, seed=seed, **sampling).token_ids
                for method in ("vanilla", "ouroboros")
            )
            kinds.append(
                engine.verdict(item["prompt"], vanilla, ouroboros, seed=seed, **sampling).kind
            )
        other = engine.generate(item["prompt"], "ouroboros", 40, seed=1000, **sampling).token_ids
        if other != vanilla:
            assert (
                engine.verdict(item["prompt"], vanilla, other, seed=3, **sampling).kind
                == "mismatch"
            )
    assert set(kinds) <= {"identical", "rounding boundary"}, kinds


# The embedded pair's preset names float32, so bfloat16 shows whether the app passed OUROBOROS_DTYPE
# on. Left unset, OUROBOROS_DEVICE means CUDA where there is one, so on a GPU host the race also
# runs on the CPU: an app that dropped the variable would compute on the GPU and fail.
APP_PLACES = [(DEVICE, "bfloat16")] + ([("cpu", "bfloat16")] if ON_GPU else [])


@pytest.mark.parametrize("device, dtype", APP_PLACES)
def test_the_apps_race_on_the_device(monkeypatch, device, dtype):
    for name in ("OUROBOROS_PRESET", "OUROBOROS_TARGET", "OUROBOROS_DRAFT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OUROBOROS_DEVICE", device)
    monkeypatch.setenv("OUROBOROS_DTYPE", dtype)
    monkeypatch.delitem(sys.modules, "app", raising=False)
    app = importlib.import_module("app")
    with monkeypatch.context() as loading:
        if torch.device(device).type == "cpu" and not torch.cuda.is_available():
            # On a CPU-only host the CPU is also the default: pretend a GPU while the pair loads, so
            # that an app that dropped OUROBOROS_DEVICE would reach for CUDA and fail to load, as on
            # a GPU host.
            loading.setattr(torch.cuda, "is_available", lambda: True)
        engine = app.get_engine()
    with recording(engine) as computed:
        final = list(app.race_api(PROMPTS[0], 32))[-1]
    for role in ("target", "draft"):
        assert_computed_in(computed, role, device, DTYPES[dtype])
    for method, lane in final.items():
        stats = lane["stats"]
        assert_speculates(
            method, stats["drafted_tokens"], stats["accepted_tokens"], stats["tokens_per_forward"]
        )
    reference, ties = greedy(engine, PROMPTS[0], 32)
    for method, lane in final.items():
        assert_matches(engine, PROMPTS[0], reference, ties, lane["token_ids"], method)
    lanes_agree = final["ouroboros"]["token_ids"] == final["vanilla"]["token_ids"]
    verdict = final["ouroboros"]["verdict"]  # the app's own, against its vanilla lane
    assert verdict["kind"] == ("identical" if lanes_agree else "float tie"), verdict
