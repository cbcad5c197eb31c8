"""A draft that reads the target's state (models.STATE_PROJECTION): the target's output layer's
input as tree.StateTap keeps it, the lean forward adding its projection to the first kept row, the
runner handing it over only to the forward it belongs to, the engine lossless with it, and a
projection that does not fit refused at load."""

from __future__ import annotations

import copy
import threading

import pytest
import torch
from conftest import build_model, noisy_copy

from ouroboros_core import Engine
from ouroboros_core.tree import new_cache
from ouroboros_core.lean import lean_draft
from ouroboros_core.load_report import LoadError
from ouroboros_core.models import (
    STATE_PROJECTION,
    check_state_width,
    load_model,
    read_projection,
)
from ouroboros_core.tree import DraftTree, StateTap, forward_tree

PROMPT = "def add(a, b):\n    return"


def state_fed(draft, seed: int = 5, scale: float = 2.0):
    """A copy of the draft with a random projection of the target's state (as wide as its own)."""
    fed = copy.deepcopy(draft)
    width = fed.config.hidden_size
    generator = torch.Generator().manual_seed(seed)
    fed.state_projection = torch.randn(width, width, generator=generator) * scale / width**0.5
    return fed


def test_the_tap_keeps_the_rows_the_output_layer_read_in_this_thread(eos_id):
    target = build_model("llama", eos_id, seed=2)  # its own: a tap stays on the model
    tap = StateTap(target)
    tree = DraftTree.of([7, 8], [[9, 10]])
    logits = forward_tree(target, new_cache(target), [3, 4, 5, 6], tree)
    states = torch.stack([tap.row(row) for row in range(len(logits))])
    with torch.no_grad():  # (this call is the output layer's too: the tap keeps its input next)
        torch.testing.assert_close(target.lm_head(states), logits)
    forward_tree(target, new_cache(target), [3, 4, 5, 6], tree)
    mine = tap.row(0).clone()
    other = threading.Thread(target=forward_tree, args=(target, new_cache(target), [11, 12]))
    other.start()
    other.join()
    assert torch.equal(tap.row(0), mine)  # another thread's forward kept its own rows


def test_the_lean_forward_adds_the_projected_state_to_the_first_kept_row_alone(eos_id):
    draft = state_fed(build_model("llama", eos_id, seed=3))
    lean = lean_draft(draft, exact=True)
    assert lean is not None and lean.projection is draft.state_projection
    state = torch.randn(draft.config.hidden_size, generator=torch.Generator().manual_seed(1))
    tree = DraftTree.of([], [[20, 21]], [0])
    plain = forward_tree(lean, lean.new_cache(), [3, 4, 5], tree)
    fed = forward_tree(lean, lean.new_cache(), [3, 4, 5], tree, state)
    with torch.no_grad():
        moved = draft.lm_head(draft.state_projection @ state)
    torch.testing.assert_close(fed[0], plain[0] + moved, atol=1e-4, rtol=1e-4)
    assert torch.equal(fed[1:], plain[1:])


def test_the_runner_hands_the_state_only_to_the_forward_after_the_text_it_follows(eos_id):
    from ouroboros_core.trunk import DraftRunner

    draft = state_fed(build_model("llama", eos_id, seed=3))
    runner = DraftRunner(lean_draft(draft, exact=True))
    plain = DraftRunner(lean_draft(build_model("llama", eos_id, seed=3), exact=True))
    text = [3, 4, 5, 6]
    runner.follow(text, torch.ones(draft.config.hidden_size))
    assert not torch.equal(runner.forward(text)[0], plain.forward(text)[0])
    # a trunk token later in the step: the target has no state there yet
    assert torch.equal(runner.forward(text + [9])[0], plain.forward(text + [9])[0])
    runner.follow(text + [9], None)  # a step whose verification kept no state: none is read
    assert torch.equal(runner.forward(text + [9])[0], plain.forward(text + [9])[0])


@pytest.mark.parametrize("options", [{}, {"temperature": 0.9, "seed": 4}], ids=["greedy", "0.9"])
def test_a_state_fed_draft_changes_what_is_drafted_never_what_is_written(
    eos_id, tokenizer, options
):
    target = build_model("llama", eos_id, seed=2)  # its own: a tap stays on the model
    draft = noisy_copy(target, 0.015, seed=100)
    fed = Engine(target, state_fed(draft), tokenizer)
    plain = Engine(target, draft, tokenizer)
    with_state = fed.generate(PROMPT, "ouroboros", 40, **options)
    without = plain.generate(PROMPT, "ouroboros", 40, **options)
    vanilla = plain.generate(PROMPT, "vanilla", 40, **options)
    assert with_state.token_ids == without.token_ids == vanilla.token_ids
    # classic speculative decoding reads the state too (its runner follows each step)
    speculative = fed.generate(PROMPT, "speculative", 40, **options)
    assert speculative.token_ids == vanilla.token_ids
    plain_speculative = plain.generate(PROMPT, "speculative", 40, **options)
    drafted = lambda result: [event.drafted for event in result.events]  # noqa: E731
    assert drafted(speculative) != drafted(plain_speculative)
    assert fed.state_tap is not None and plain.state_tap is None
    trunks = lambda result: [event.trunk for event in result.events]  # noqa: E731
    # The first step drafts before the target has run: no state yet, the same trunk.
    assert trunks(with_state)[0] == trunks(without)[0]
    assert trunks(with_state) != trunks(without)


def test_the_state_handed_over_is_the_targets_one_position_before_the_newest_token(
    eos_id, tokenizer, monkeypatch
):
    from ouroboros_core.trunk import DraftRunner

    target = build_model("llama", eos_id, seed=2)
    engine = Engine(target, state_fed(noisy_copy(target, 0.015, seed=100)), tokenizer)
    handed, real = [], DraftRunner.follow

    def follow(runner, committed, state):
        handed.append((list(committed), state.clone()))
        real(runner, committed, state)

    monkeypatch.setattr(DraftRunner, "follow", follow)
    result = engine.generate(PROMPT, "ouroboros", 40)
    assert len(handed) == len(result.events) - (result.stop_reason is not None)
    with torch.no_grad():
        for committed, state in handed:
            hidden = target.model(input_ids=torch.tensor([committed])).last_hidden_state[0]
            torch.testing.assert_close(state, hidden[-2], atol=1e-4, rtol=1e-4)


def test_a_projection_that_does_not_fit_is_refused_at_load(tmp_path, eos_id):
    from safetensors.torch import save_file

    draft = build_model("llama", eos_id, seed=3)
    draft.save_pretrained(tmp_path)
    width = draft.config.hidden_size
    save_file({"weight": torch.zeros(width + 1, width)}, tmp_path / STATE_PROJECTION)
    with pytest.raises(LoadError, match=f"{width} rows"):
        load_model(tmp_path, torch.device("cpu"), torch.float32, False)
    (tmp_path / STATE_PROJECTION).write_text("not safetensors")
    with pytest.raises(LoadError, match="not a safetensors file"):
        read_projection(tmp_path / STATE_PROJECTION, draft)
    save_file({"weight": torch.ones(width, 2 * width)}, tmp_path / STATE_PROJECTION)
    loaded = load_model(tmp_path, torch.device("cpu"), torch.float32, False)
    assert loaded.state_projection.shape == (width, 2 * width)
    with pytest.raises(LoadError, match="trained for another target"):
        check_state_width(build_model("llama", eos_id, seed=4), loaded)
