"""The one verdict for "same output": identical, a float tie, or a mismatch. Ties are made on
purpose (two tokens with the same output row score exactly the same) and real mismatches come from
a wrong token or a broken acceptance rule; in float32 a tie is allowed only within the rounding and
the score movement between forward shapes that the check measures, far below any real gap."""

from __future__ import annotations

import copy

import pytest
import torch

import ouroboros_core.decode as decode_module
from conftest import build_model
from ouroboros_core import Engine
from ouroboros_core.verdict import explain, output_verdict, rounding_step, within_rounding
from ouroboros_core.tree import Acceptance

PROMPT = "def add(a, b):\n    return a + b\n"


def test_rounding_step_is_one_unit_in_the_last_place():
    # the gap measured at GPU ties, logits in [4, 8)
    assert rounding_step(torch.bfloat16, 5.0) == 0.03125
    assert rounding_step(torch.bfloat16, 1.0) == 2**-7
    assert rounding_step(torch.float16, 5.0) == 2**-8
    assert rounding_step(torch.float32, 5.0) == pytest.approx(4 * 2**-23)


def test_the_tie_rule_holds_at_two_rounding_steps_and_not_at_three():
    step = rounding_step(torch.bfloat16, 5.0)  # 0.03125: scores between 4 and 8
    for steps, tie in ((0, True), (1, True), (2, True), (3, False), (20, False)):
        scores = torch.tensor([5.0, 5.0 - steps * step, 1.0], dtype=torch.bfloat16)
        assert within_rounding(scores, [0, 1], torch.bfloat16) is tie, steps
    # float32: two of its far smaller steps, or twice the movement measured between shapes
    assert within_rounding(torch.tensor([5.0, 5.0, 1.0]), [0, 1], torch.float32)
    apart = torch.tensor([5.0, 5.0 - 1e-4, 1.0])  # some 200 float32 steps
    assert not within_rounding(apart, [0, 1], torch.float32)
    assert within_rounding(apart, [0, 1], torch.float32, spread=1e-4)
    assert not within_rounding(apart, [0, 1], torch.float32, spread=4e-5)
    assert not within_rounding(
        torch.tensor([5.0, 5.0, 9.0], dtype=torch.bfloat16), [0, 1], torch.bfloat16
    ), "two tokens that tie with each other but not with the best are no tie"


def twin_model(eos_id, tokenizer, dtype):
    """A tiny target whose output rows for its greedy token at `position` and for one other token
    are equal, so the two score exactly the same there: a tie, made on purpose. Returns (model,
    prompt ids, greedy ids, position, twin)."""
    model = build_model("llama", eos_id, seed=3)
    prompt_ids = tokenizer(PROMPT)["input_ids"]
    position = 5
    with torch.no_grad():
        greedy = model.generate(
            torch.tensor([prompt_ids]), do_sample=False, max_new_tokens=12, pad_token_id=eos_id
        )[0, len(prompt_ids) :].tolist()
        chosen = greedy[position]
        twin = next(t for t in range(model.config.vocab_size) if t not in greedy and t != eos_id)
        model.lm_head.weight[twin] = model.lm_head.weight[chosen]
    return model.to(dtype), prompt_ids, greedy, position, twin


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_tie_in_16_bit_is_a_float_tie_with_its_margin(tokenizer, eos_id, dtype):
    model, prompt_ids, greedy, position, twin = twin_model(eos_id, tokenizer, dtype)
    other = greedy[:position] + [twin]
    verdict = output_verdict(model, prompt_ids, greedy, other)
    assert (verdict.kind, verdict.first_difference, verdict.margin) == ("float tie", position, 0.0)
    assert f"identical up to token {position}" in explain(verdict) and str(dtype).split(".")[
        1
    ] in explain(verdict)


def test_a_tie_followed_by_a_token_the_target_would_not_write_is_a_mismatch(tokenizer, eos_id):
    model, prompt_ids, greedy, position, twin = twin_model(eos_id, tokenizer, torch.bfloat16)
    with torch.no_grad():
        scores = (
            model(input_ids=torch.tensor([prompt_ids + greedy[:position] + [twin]]))
            .logits[0, -1]
            .float()
        )
    worst = int(scores.argmin())
    verdict = output_verdict(model, prompt_ids, greedy, greedy[:position] + [twin, worst])
    assert (verdict.kind, verdict.first_difference) == (
        "mismatch",
        position + 1,
    ) and verdict.margin > 1.0


def test_float32_ties_only_within_the_movement_it_measures(tokenizer, eos_id):
    model, prompt_ids, greedy, position, twin = twin_model(eos_id, tokenizer, torch.float32)
    verdict = output_verdict(model, prompt_ids, greedy, greedy[:position] + [twin])
    assert (verdict.kind, verdict.first_difference, verdict.margin) == ("float tie", position, 0.0)
    assert verdict.spread is not None and verdict.spread < 1e-4  # measured, and float32-small
    # The twin's row nudged so that it trails the greedy token by far more than that: no tie.
    with torch.no_grad():
        model.lm_head.weight[twin] *= 0.999
        scores = model(input_ids=torch.tensor([prompt_ids + greedy[:position]])).logits[0, -1]
    gap = float(scores[greedy[position]] - scores[twin])
    assert gap > 1e-4
    verdict = output_verdict(model, prompt_ids, greedy, greedy[:position] + [twin])
    assert verdict.kind == "mismatch" and verdict.margin == pytest.approx(gap, rel=1e-3)


def test_a_token_the_target_does_not_favour_is_a_mismatch(tokenizer, eos_id):
    model, prompt_ids, greedy, position, _ = twin_model(eos_id, tokenizer, torch.bfloat16)
    with torch.no_grad():
        scores = (
            model(input_ids=torch.tensor([prompt_ids + greedy[:position]])).logits[0, -1].float()
        )
    worst = int(scores.argmin())
    verdict = output_verdict(model, prompt_ids, greedy, greedy[:position] + [worst])
    assert verdict.kind == "mismatch" and verdict.margin > 1.0
    assert "departs" in explain(verdict) and "not a rounding tie" in explain(verdict)
    assert output_verdict(model, prompt_ids, greedy, list(greedy)).kind == "identical"
    short = output_verdict(model, prompt_ids, greedy, greedy[:4])
    assert (short.kind, short.first_difference, short.margin) == ("mismatch", 4, None)


@pytest.fixture(scope="module")
def bf16_engine(tokenizer, eos_id):
    target = build_model("llama", eos_id, seed=7).to(torch.bfloat16)
    draft = copy.deepcopy(target)
    with torch.no_grad():
        for param in draft.parameters():
            param.add_(torch.randn_like(param) * 0.02 * param.float().std().to(param.dtype))
    return Engine(target, draft, tokenizer)


def test_16_bit_drafting_departs_only_at_float_ties(bf16_engine):
    prompts = [
        PROMPT,
        "import os\nimport sys\n\nclass Config:\n",
        "for i in range(10):\n    print(i)\n" * 2,
    ]
    for prompt in prompts:
        vanilla = bf16_engine.generate(prompt, "vanilla", 40).token_ids
        for method in ("speculative", "ouroboros"):
            output = bf16_engine.generate(prompt, method, 40, gamma=4).token_ids
            verdict = bf16_engine.verdict(prompt, vanilla, output)
            # Whether a tie falls the other way here depends on rounding; a mismatch never may
            # occur.
            assert verdict.kind in ("identical", "float tie"), (prompt, method, verdict)


def test_a_broken_acceptance_rule_is_a_mismatch_even_in_16_bit(bf16_engine, eos_id, monkeypatch):
    vanilla = bf16_engine.generate(PROMPT, "vanilla", 24).token_ids

    def accept_everything(tree, trunk_tokens, branch_tokens):
        return Acceptance(len(tree.trunk), None, 0, trunk_tokens[len(tree.trunk)])

    monkeypatch.setattr(decode_module, "walk", accept_everything)
    unrelated = build_model("llama", eos_id, seed=99, layers=1).to(torch.bfloat16)
    broken = Engine(bf16_engine.target, unrelated, bf16_engine.tokenizer)
    output = broken.generate(PROMPT, "speculative", 24, gamma=4).token_ids
    verdict = broken.verdict(PROMPT, vanilla, output)
    assert verdict.kind == "mismatch" and verdict.margin > 0.1, verdict


def test_the_apps_race_in_bfloat16_names_its_verdict(monkeypatch):
    # The app as a host would run it with OUROBOROS_DTYPE=bfloat16 on this CPU. HumanEval/3's stub
    # parts at a one-step bfloat16 tie on the AVX-512 machine this was written on; elsewhere it may
    # stay identical. Either way the last message names it, and a mismatch never appears.
    import importlib
    import sys

    from ouroboros_core.tools.bench import humaneval_prompts

    monkeypatch.setenv("OUROBOROS_DTYPE", "bfloat16")
    monkeypatch.delitem(sys.modules, "app", raising=False)
    app = importlib.import_module("app")
    prompt = humaneval_prompts(4)[3]["prompt"]
    final = list(app.race_api(prompt, 24))[-1]
    assert app.get_engine().target.dtype == torch.bfloat16
    verdict, vanilla, ouroboros = (
        final["ouroboros"]["verdict"],
        final["vanilla"],
        final["ouroboros"],
    )
    assert verdict["kind"] in ("identical", "float tie"), verdict
    if verdict["kind"] == "identical":
        assert ouroboros["token_ids"] == vanilla["token_ids"] and verdict["margin"] is None
    else:
        at = verdict["first_difference"]
        assert ouroboros["token_ids"][:at] == vanilla["token_ids"][:at]
        assert ouroboros["token_ids"][at] != vanilla["token_ids"][at]
        # two steps, the tie rule's, or twice the score movement measured on this machine
        allowed = max(2 * rounding_step(torch.bfloat16, 16.0), 2 * verdict["spread"])
        assert 0.0 <= verdict["margin"] <= allowed


class RoundsOneRowApart(torch.nn.Module):
    """The target as a machine whose 16-bit one-row forwards sum in another order than its
    many-row ones (AMX, tensor cores): every score of a one-token forward moves by `shift`, up for
    even token ids and down for odd ones."""

    def __init__(self, model, shift: float):
        super().__init__()
        self.model, self.config, self.shift = model, model.config, shift

    @property
    def dtype(self):
        return self.model.dtype

    def get_input_embeddings(self):
        return self.model.get_input_embeddings()

    def forward(self, input_ids, **kwargs):
        out = self.model(input_ids=input_ids, **kwargs)
        if input_ids.shape[1] == 1:
            signs = 1 - 2 * (torch.arange(out.logits.shape[-1]) % 2)
            out.logits = out.logits + (self.shift * signs).to(out.logits.dtype)
        return out


def test_the_tie_allowance_follows_the_score_movement_the_machine_shows(tokenizer, eos_id):
    model, prompt_ids, greedy, _, _ = twin_model(eos_id, tokenizer, torch.bfloat16)
    with torch.no_grad():
        rows = model(input_ids=torch.tensor([prompt_ids + greedy[:-1]])).logits[0, -len(greedy) :]
    top = rows.float().topk(2)
    gaps = (top.values[:, 0] - top.values[:, 1]).tolist()
    # the first position whose two best tokens lie beyond rounding of each other, though not far
    position = next(at for at, gap in enumerate(gaps[:-4]) if 0.2 < gap < 2.0)
    gap, runner_up = gaps[position], int(top.indices[position, 1])
    # the runner-up, then the target's own greedy tokens after it
    with torch.no_grad():
        after = model.generate(
            torch.tensor([prompt_ids + greedy[:position] + [runner_up]]),
            do_sample=False,
            max_new_tokens=4,
            pad_token_id=eos_id,
        )[0, len(prompt_ids) :].tolist()
    assert output_verdict(model, prompt_ids, greedy, after).kind == "mismatch"
    # A machine whose one-row scores move by more than half the gap could pick either token.
    for shift, kind in ((0.6 * gap, "float tie"), (0.3 * gap, "mismatch")):
        verdict = output_verdict(RoundsOneRowApart(model, shift), prompt_ids, greedy, after)
        assert (verdict.kind, verdict.first_difference) == (kind, position), (shift, verdict)
        assert verdict.spread == pytest.approx(shift, rel=0.1, abs=0.02)
        if kind == "mismatch":
            assert "scores moved by up to" in explain(verdict)
