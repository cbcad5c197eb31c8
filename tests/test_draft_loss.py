"""The draft's loss and score (tools/draft_loss.py) on a tiny model: the head scores the draft's
vocabulary alone, a next token outside it is a miss and no loss, the target's own chances count
where given or read from its states, training lowers the loss, and agreement is told per kind of
request."""

from __future__ import annotations

import random

import pytest
import torch

from conftest import build_model
from ouroboros_core.tools.draft_loss import Head, answer_loss, batches, evaluate, kind_of
from ouroboros_core.tools.target_states import answer_states


@pytest.fixture(scope="module")
def model(eos_id):
    return build_model("llama", eos_id, seed=5)


def rows_for(vocab: int, count: int, seed: int, kind: str) -> list[dict]:
    rng = random.Random(seed)
    return [
        {
            "id": f"heldout:{kind}:{i}",
            "ids": [rng.randrange(vocab) for _ in range(12)],
            "prompt_tokens": 4,
            "temperature": 0.0,
        }
        for i in range(count)
    ]


def test_kinds_come_from_the_row_or_its_broad_id():
    assert kind_of({"id": "train:writing:3"}) == "writing"
    assert kind_of({"id": "heldout:translation:0"}) == "translation"
    assert kind_of({"id": "train:12:json.dumps"}) == "code"  # chat_requests' own ids
    assert kind_of({"id": "heldout0:pip.main"}) == "code"
    assert kind_of({"id": "x", "kind": "math"}) == "math"


def test_the_head_scores_its_vocabulary_alone(model):
    full = model.lm_head.weight.shape[0]
    head = Head.of(model, [3, 9, 1])
    assert head.ids.tolist() == [1, 3, 9]
    assert torch.equal(head.weight, model.lm_head.weight.detach()[[1, 3, 9]])
    assert head.index[9] == 2 and head.index[2] == -1 and len(head.index) == full
    assert len(Head.of(model).ids) == full
    # a trained output layer is read afresh, with its gradient; a frozen one once
    assert head.frozen is None and head.weight.requires_grad
    model.lm_head.weight.requires_grad_(False)
    try:
        frozen = Head.of(model, [3, 9, 1])
        assert frozen.weight is frozen.weight and not frozen.weight.requires_grad
    finally:
        model.lm_head.weight.requires_grad_(True)


def test_a_next_token_outside_the_vocabulary_is_a_miss_and_no_loss(model):
    row = {"ids": [5, 6, 7, 8, 2, 2, 2], "prompt_tokens": 4}
    # the answer's tokens (8 -> 2, 2, 2) are outside this head: every guess misses, no loss
    loss, hits, count, each = answer_loss(model, [row], 0, Head.of(model, [5, 6, 7]))
    assert (loss, hits, count) == (None, 0, 3) and not each.any()
    with_it = Head.of(model, [2, 5, 6, 7])
    loss, hits, count, _ = answer_loss(model, [row], 0, with_it)
    assert loss is not None and loss.item() > 0 and count == 3


def test_the_targets_own_first_choice_is_the_right_guess_where_given(model):
    row = {"ids": [5, 6, 7, 8, 9], "prompt_tokens": 3}
    head = Head.of(model)
    with torch.no_grad():
        _, _, _, each = answer_loss(model, [row], 0, head)
        logits = model(input_ids=torch.tensor([row["ids"]])).logits[0, 2:4]
    guesses = logits.argmax(-1).tolist()
    taught = {**row, "teacher_ids": [[g, 1] for g in guesses], "teacher_p": [[0.9, 0.1]] * 2}
    with torch.no_grad():
        loss, hits, count, _ = answer_loss(model, [taught], 0, head)
    assert (hits, count) == (2, 2) and loss.item() > 0


def test_the_targets_states_make_its_own_choice_and_chances_what_is_learned(model):
    # the model stands for the target too: its states over a sampled answer (as target_states
    # writes them) name its own first choice at each position but the last, whose is not written
    sampled = {"ids": [5, 6, 7, 8, 9, 10, 11], "prompt_tokens": 3}
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([sampled["ids"]])).logits[0, 2:6]
        hidden = model.model(input_ids=torch.tensor([sampled["ids"]])).last_hidden_state[0]
    sampled["states"] = answer_states(sampled, hidden)
    plain = {"ids": [3, 4, 5, 6, 7], "prompt_tokens": 3}  # no states: its written tokens
    guesses, written = logits.argmax(-1), torch.tensor(sampled["ids"][3:])
    assert not torch.equal(guesses[:3], written[:3])  # the answer is not the model's own
    head = Head.of(model)
    with torch.no_grad():
        _, _, _, as_written = answer_loss(model, [sampled, plain], 0, head)
        choice, _, count, chosen = answer_loss(model, [sampled, plain], 0, head, learn="choice")
        chances, _, _, _ = answer_loss(model, [sampled, plain], 0, head, learn="chances")
    assert count == 6
    assert torch.equal(as_written[:4], guesses == written)
    assert chosen[:3].all() and chosen[3] == (guesses[3] == written[3])
    assert torch.equal(chosen[4:], as_written[4:])
    # chances: half the cross-entropy, plus the model's own entropy where the state is known
    entropy = -(logits[:3].softmax(-1) * logits[:3].log_softmax(-1)).sum(-1).mean()
    assert chances.item() == pytest.approx(0.5 * choice.item() + entropy.item(), rel=1e-4)


def test_training_lowers_the_loss_and_agreement_is_told_per_kind(eos_id):
    model = build_model("llama", eos_id, seed=6)
    vocab = model.config.vocab_size
    # a pattern to learn: each answer counts up from its last request token
    rows = []
    for i in range(24):
        start = (i * 7) % (vocab - 20)
        rows.append(
            {"id": f"train:math:{i}", "ids": list(range(start, start + 12)), "prompt_tokens": 4}
        )
    held = rows_for(vocab, 3, 1, "writing") + [
        {**rows[0], "id": "heldout:math:0", "temperature": 0.0}
    ]
    head = Head.of(model)
    before = evaluate(model, held, 0, 4096, head)
    assert set(before["by_kind"]) == {"writing", "math"}
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = None
    for _ in range(60):
        for batch in batches(rows, 4096, random.Random(0)):
            loss, _, _, _ = answer_loss(model, batch, 0, head)
            first = first if first is not None else loss.item()
            loss.backward()
            optimiser.step()
            optimiser.zero_grad()
    after = evaluate(model, held, 0, 4096, head)
    assert loss.item() < 0.5 * first
    assert after["by_kind"]["math"] > before["by_kind"]["math"]
    assert after["by_kind"]["math"] >= 0.75
