"""An end-of-sequence token inside an accepted multi-token block, on the trunk and on a branch,
greedy and sampled: the stream, the result and generate() agree, and nothing after the EOS is
emitted (issue 27)."""

from __future__ import annotations

import pytest
import torch

from conftest import check_margin
from engine_checks import check_events
from ouroboros_core import DoneEvent, Engine, Result, StepEvent, load_engine
from ouroboros_core.packed import unpacked
from test_acceptance import PAIR_PROMPTS, SAMPLING


@pytest.fixture(scope="module")
def engine() -> Engine:
    """The embedded pair in float32."""
    return load_engine("demo", device="cpu", dtype="float32")


def accepted_inside_a_block(result, on_branch: bool) -> tuple[int, int]:
    """(position in the output, token) of the first token that a step accepted after at least one
    other token of the same step, drafted on the trunk (or on the walked branch, after at least one
    of its tokens), and that the output has not held before."""
    position = 0
    for step in result.events:
        for j, token in enumerate(step.accepted):
            on_walked_branch = step.branch is not None and j > step.trunk_accepted
            if j >= 1 and on_walked_branch == on_branch and (on_branch or j < step.trunk_accepted):
                if token.id not in result.token_ids[: position + j]:
                    return position + j, token.id
        position += len(step.committed)
    raise AssertionError(
        f"no step accepted a new token inside a {'branch' if on_branch else 'trunk'} block"
    )


def with_eos(engine: Engine, eos: int) -> Engine:
    """The same pair with `eos` as its end-of-sequence token."""
    config = engine.target.generation_config
    saved, config.eos_token_id = config.eos_token_id, eos
    try:
        other = Engine(engine.target, engine.draft, engine.tokenizer, defaults=engine.defaults)
    finally:
        config.eos_token_id = saved
    assert other.eos == {eos}
    return other


def stream_and_generate(
    engine, prompt, method, max_new_tokens, options
) -> tuple[list[StepEvent], Result]:
    """The events of one stream and the result of one generate() for the same request, checked to
    agree."""
    events = list(engine.stream(prompt, method, max_new_tokens, **options))
    result = engine.generate(prompt, method, max_new_tokens, **options)
    check_events(result, engine.tokenizer, method, max_new_tokens)
    steps, done = events[:-1], events[-1]
    assert isinstance(done, DoneEvent) and all(isinstance(step, StepEvent) for step in steps)
    timeless = [
        {k: v for k, v in s.to_dict().items() if k not in ("draft_ms", "verify_ms", "elapsed_s")}
        for s in steps + result.events
    ]
    assert timeless[: len(steps)] == timeless[len(steps) :], method
    assert (list(done.token_ids), done.text, done.stop_reason) == (
        result.token_ids,
        result.text,
        result.stop_reason,
    )
    return steps, result


def pair_generate(engine, prompt: str, max_new_tokens: int, eos: int) -> list[int]:
    """The target's own greedy generate() with `eos` as its end token, checked to be far from
    ties."""
    prompt_ids = engine.encode(prompt)
    input_ids = torch.tensor([prompt_ids])
    with torch.no_grad(), unpacked(engine.target):
        out = engine.target.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos,
            pad_token_id=eos,
        )
    new_ids = out[0, len(prompt_ids) :].tolist()
    check_margin(engine.target, prompt_ids, new_ids)
    return new_ids


EOS_CASES = {
    # The prompt and sampling options of a plain run; the first new token it accepts inside a block
    # becomes the EOS.
    ("trunk", "greedy"): (PAIR_PROMPTS[0], {}),
    ("trunk", "sampled"): (PAIR_PROMPTS[0], {**SAMPLING, "seed": 1}),
    ("branch", "greedy"): (PAIR_PROMPTS[2], {}),
    ("branch", "sampled"): (PAIR_PROMPTS[2], {**SAMPLING, "seed": 3}),
}


@pytest.mark.parametrize("where, mode", list(EOS_CASES), ids=["-".join(case) for case in EOS_CASES])
def test_an_eos_inside_an_accepted_block_ends_every_view_there(engine, where, mode):
    prompt, options = EOS_CASES[where, mode]
    methods = ("speculative", "ouroboros") if where == "trunk" else ("ouroboros",)
    max_new_tokens = 32
    for method in methods:
        plain = engine.generate(prompt, method, max_new_tokens, **options)
        position, eos = accepted_inside_a_block(plain, on_branch=where == "branch")
        eos_engine = with_eos(engine, eos)
        steps, result = stream_and_generate(eos_engine, prompt, method, max_new_tokens, options)
        # Up to the EOS the text is the plain run's; the EOS ends it, and no step emits anything
        # after it.
        assert result.token_ids == plain.token_ids[: position + 1], method
        assert result.stop_reason == "eos" and result.token_ids.count(eos) == 1, method
        last = steps[-1]
        assert last.target_token is None and last.committed[-1].id == eos, method
        # Not vacuous: the EOS was a drafted token accepted after others in the same step, where
        # asked.
        assert len(last.accepted) > 1 and last.accepted[-1].id == eos, method
        # Nothing after an EOS is verified: the step drafted nothing past it (on the trunk or a
        # branch), rejected nothing, and no branch of its tree goes on after one.
        assert [t.id for t in last.drafted] == [
            t.id for t in last.accepted
        ] and not last.rejected, method
        assert all(eos not in [t.id for t in branch[:-1]] for branch in last.branches), method
        if where == "trunk":
            assert last.branch is None and last.trunk_accepted == len(last.accepted), method
        else:
            assert last.branch is not None and len(last.accepted) - last.trunk_accepted > 1, method
        if options:
            _, vanilla = stream_and_generate(eos_engine, prompt, "vanilla", max_new_tokens, options)
            assert vanilla.token_ids == result.token_ids and vanilla.stop_reason == "eos", method
        else:
            assert result.token_ids == pair_generate(engine, prompt, max_new_tokens, eos), method
