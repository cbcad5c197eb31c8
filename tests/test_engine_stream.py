"""Streaming from the decode loop: text pieces that always add up to the text, cancellation within
one step, closed generators, and phrase pools kept warm across requests."""

from __future__ import annotations

import threading

import pytest

from engine_checks import N, PROMPTS, REPETITIVE_PROMPTS, ids, run
from ouroboros_core import DoneEvent, StepEvent
from ouroboros_core.decode import TextPieces

# --- text pieces ----------------------------------------------------------------------------------


def test_text_pieces_split_multibyte_characters(tokenizer):
    text = "x = '中文' # 😀 naïve"
    token_ids = tokenizer(text)["input_ids"]
    pieces = TextPieces(tokenizer)
    out = [pieces.push(i) for i in token_ids]
    assert "".join(out) == text == pieces.finish()
    assert "" in out, (
        "a character spread over several tokens hands its earlier tokens an empty piece"
    )
    assert all("\ufffd" not in piece for piece in out)
    assert "😀" in out or any(piece.startswith("😀") or piece.endswith("😀") for piece in out)


def test_multibyte_prompt_keeps_the_piece_invariant(make_engine, models, reference):
    engine = make_engine("qwen2", "noisy")
    prompt = "emoji 😀🐍🎉 and CJK 日本語 中文 한국어\n"
    for method in ("vanilla", "speculative", "ouroboros"):
        result = run(engine, prompt, method, 30)
        assert result.token_ids == reference(models.target("qwen2"), prompt, 30)


# --- streaming, cancellation, warm pools ----------------------------------------------------------


@pytest.mark.parametrize("method", ["vanilla", "speculative", "ouroboros"])
def test_stop_event_cancels_within_one_step(make_engine, method):
    engine = make_engine("llama", "noisy")
    stop = threading.Event()
    stream = engine.stream(PROMPTS[0], method, 50, stop=stop)
    first = next(stream)
    assert isinstance(first, StepEvent)
    stop.set()
    rest = list(stream)
    # The loop checks the flag before every step: the stream ends with no further step.
    assert len(rest) == 1 and isinstance(rest[0], DoneEvent)
    done = rest[0]
    assert done.stop_reason == "cancelled"
    assert list(done.token_ids) == ids(first.committed)
    assert done.text == "".join(t.text for t in first.committed)
    assert done.stats.target_forwards == 1 and done.stats.new_tokens == len(first.committed)


def test_stop_set_before_the_start_gives_an_empty_result(make_engine):
    engine = make_engine("gpt2", "noisy")
    stop = threading.Event()
    stop.set()
    result = engine.generate(PROMPTS[0], "ouroboros", 10, stop=stop)
    assert result.stop_reason == "cancelled"
    assert result.token_ids == [] and result.text == "" and result.events == []
    assert result.stats.new_tokens == 0 and result.stats.target_forwards == 0


def test_closing_the_generator_midway_leaves_the_engine_usable(make_engine, models, reference):
    engine = make_engine("mistral", "noisy")
    stream = engine.stream(PROMPTS[0], "ouroboros", N)
    next(stream)
    next(stream)
    stream.close()
    with pytest.raises(StopIteration):
        next(stream)
    # Two interleaved streams do not share request state.
    a = engine.stream(PROMPTS[0], "ouroboros", N)
    b = engine.stream(PROMPTS[1], "speculative", N)
    events_a, events_b = [next(a)], [next(b)]
    events_a += list(a)
    events_b += list(b)
    assert list(events_a[-1].token_ids) == reference(models.target("mistral"), PROMPTS[0], N)
    assert list(events_b[-1].token_ids) == reference(models.target("mistral"), PROMPTS[1], N)


def test_warm_pool_across_requests_stays_lossless(make_engine, models, reference):
    engine = make_engine("llama", "noisy")
    pool = engine.new_pool()
    assert len(pool) == 0
    first = run(engine, REPETITIVE_PROMPTS[1], "ouroboros", pool=pool)
    assert first.token_ids == reference(models.target("llama"), REPETITIVE_PROMPTS[1], N)
    assert len(pool) > 0
    size = len(pool)
    for prompt in (REPETITIVE_PROMPTS[1], PROMPTS[0]):
        result = run(engine, prompt, "ouroboros", pool=pool)
        assert result.token_ids == reference(models.target("llama"), prompt, N)
    assert len(pool) >= size
    # A bounded warm pool stays within its bounds.
    small = engine.new_pool(guess_set=2, pool_size=10)
    for prompt in PROMPTS:
        result = run(engine, prompt, "ouroboros", pool=small)
        assert result.token_ids == reference(models.target("llama"), prompt, N)
    assert 0 < len(small) <= 10


@pytest.mark.parametrize("method", ["vanilla", "ouroboros"])
def test_the_loop_runs_in_inference_mode_and_leaves_the_callers_mode_alone(
    make_engine, models, reference, method
):
    """The loop's ops run under torch.inference_mode; between events the caller's code sees its own
    grad mode (a caller training something while it streams must still record gradients)."""
    import torch

    engine = make_engine("llama", "noisy")
    seen = []
    real_forward = engine.target.forward

    def watched_forward(*args, **kwargs):
        seen.append(torch.is_inference_mode_enabled())
        return real_forward(*args, **kwargs)

    engine.target.forward = watched_forward
    try:
        events = []
        for event in engine.stream(PROMPTS[0], method, N):
            events.append(event)
            assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
            weight = torch.ones(2, requires_grad=True)
            (weight * 3).sum().backward()  # autograd works between events
            assert weight.grad.tolist() == [3.0, 3.0]
    finally:
        del engine.target.forward
    assert seen and all(seen), "every target forward should run in inference mode"
    assert list(events[-1].token_ids) == reference(models.target("llama"), PROMPTS[0], N)
