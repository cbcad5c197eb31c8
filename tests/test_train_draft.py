"""train_draft's training on a tiny target: the draft it saves, and a run stopped part-way that the
same command takes up from its checkpoint, ending with the very weights of a run never stopped; a
checkpoint written for other rows is refused, and none is left once the draft is saved."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

import ouroboros_core.tools.train_draft as train_draft
from conftest import build_model
from ouroboros_core.tools.train_checkpoint import CHECKPOINT
from ouroboros_core.tools.train_draft import DraftTraining, train

STEPS = 6


def rows(count: int, seed: int, split: str) -> list[dict]:
    rng = random.Random(seed)
    return [
        {
            "id": f"{split}:writing:{i}",
            "ids": [rng.randrange(3, 60) for _ in range(rng.randrange(10, 16))],
            "prompt_tokens": 4,
            "temperature": 0.0,
        }
        for i in range(count)
    ]


@pytest.fixture
def setup(tmp_path, monkeypatch, eos_id, tokenizer):
    """Samples and held-out files, and the preset's target stood in for by a tiny llama."""
    target = build_model("llama", eos_id, seed=7, layers=3)
    monkeypatch.setattr(
        "ouroboros_core.models.load_target_of", lambda preset, log: (target, tokenizer)
    )
    samples, heldout = tmp_path / "samples.jsonl", tmp_path / "heldout.jsonl"
    for path, made in ((samples, rows(24, 1, "train")), (heldout, rows(4, 2, "heldout"))):
        path.write_text("".join(json.dumps(row) + "\n" for row in made))
    return tmp_path, samples, heldout


def cfg(epochs: float) -> DraftTraining:
    # batches of 64 padded tokens: 24 rows of 10-15 tokens make 6 batches an epoch
    return DraftTraining(
        layers=1,
        epochs=epochs,
        lr=3e-3,
        warmup=2,
        eval_every=2,
        batch_tokens=64,
        checkpoint_every=2,
    )


def weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def stopped_after(steps: int, monkeypatch, config, samples, heldout, out) -> None:
    """A training killed as it begins step steps + 1, its checkpoint left in `out`."""
    real_step, taken = train_draft.train_step, []

    def step(*args):
        if len(taken) == steps:
            raise KeyboardInterrupt
        taken.append(1)
        return real_step(*args)

    monkeypatch.setattr(train_draft, "train_step", step)
    with pytest.raises(KeyboardInterrupt):
        train(config, [samples], heldout, out, log=lambda *a: None)
    monkeypatch.setattr(train_draft, "train_step", real_step)
    assert (out / CHECKPOINT).is_file()


def test_a_stopped_training_goes_on_from_its_checkpoint_to_the_same_draft(setup, monkeypatch):
    tmp, samples, heldout = setup
    whole = train(cfg(2), [samples], heldout, tmp / "whole", log=lambda *a: None)
    assert whole["steps"] == 2 * STEPS and not (tmp / "whole" / CHECKPOINT).exists()

    # killed during step 8: steps 1-6 are in the checkpoint
    stopped_after(7, monkeypatch, cfg(2), samples, heldout, tmp / "again")
    assert torch.load(tmp / "again" / CHECKPOINT, weights_only=False)["step"] == 6
    said = []
    again = train(cfg(2), [samples], heldout, tmp / "again", log=said.append)
    assert f"going on from step 6 of {2 * STEPS}" in said[1]
    first, second = weights(tmp / "whole"), weights(tmp / "again")
    assert first.keys() == second.keys()
    assert all(torch.equal(first[name], second[name]) for name in first)
    # the records of the steps before the stop are kept: the same history and curve as unbroken
    strip = lambda record: {k: v for k, v in record.items() if k != "elapsed_s"}  # noqa: E731
    assert [strip(r) for r in again["history"]] == [strip(r) for r in whole["history"]]
    elapsed = [record["elapsed_s"] for record in again["history"]]
    assert elapsed == sorted(elapsed) and again["wall_s"] >= elapsed[-1]  # counted across the stop
    assert again["heldout_curve"] == whole["heldout_curve"]
    assert not (tmp / "again" / CHECKPOINT).exists()


def test_a_checkpoint_written_for_other_rows_is_refused_and_kept(setup, monkeypatch):
    """Other training rows; other held-out rows (they score the curve it carries) likewise."""
    tmp, samples, heldout = setup
    stopped_after(3, monkeypatch, cfg(1), samples, heldout, tmp / "out")
    samples.write_text(samples.read_text() + json.dumps(rows(1, 9, "train")[0]) + "\n")
    with pytest.raises(SystemExit, match="other settings or other rows"):
        train(cfg(1), [samples], heldout, tmp / "out", log=lambda *a: None)
    assert (tmp / "out" / CHECKPOINT).is_file()
    samples.write_text("".join(samples.read_text().splitlines(keepends=True)[:-1]))
    heldout.write_text(heldout.read_text() + json.dumps(rows(1, 8, "heldout")[0]) + "\n")
    with pytest.raises(SystemExit, match="other settings or other rows"):
        train(cfg(1), [samples], heldout, tmp / "out", log=lambda *a: None)


def test_a_draft_grown_by_layers_computes_what_it_did_until_it_trains(eos_id):
    from ouroboros_core.tools.draft_start import cut_target, grown

    target = build_model("llama", eos_id, seed=7, layers=4).eval()
    draft = cut_target(target, 1).eval()
    bigger = grown(draft, target, 3).eval()
    tied = lambda model: model.lm_head.weight is model.model.embed_tokens.weight  # noqa: E731
    assert bigger.config.num_hidden_layers == 3 and tied(bigger) == tied(draft)
    ids = torch.randint(3, 60, (2, 9))
    with torch.no_grad():
        assert torch.allclose(bigger(ids).logits, draft(ids).logits, atol=1e-6)
    new = bigger.model.layers[2]
    assert torch.equal(new.mlp.up_proj.weight, target.model.layers[2].mlp.up_proj.weight)
    assert not new.self_attn.o_proj.weight.any() and not new.mlp.down_proj.weight.any()


def test_the_embeddings_train_only_when_asked(setup):
    from ouroboros_core.tools.draft_start import cut_target

    tmp, samples, heldout = setup
    quiet = lambda *a: None  # noqa: E731
    for asked in (False, True):
        out = tmp / f"embeddings-{asked}"
        train(dataclasses_replace(cfg(0.5), train_embeddings=asked), [samples], heldout, out, quiet)
        start = cut_target(train_draft_target(), 1)
        before = start.model.embed_tokens.weight.detach()
        after = weights(out)["model.embed_tokens.weight"].float()
        assert torch.equal(after, before.to(torch.bfloat16).float()) != asked


def dataclasses_replace(config, **changes):
    import dataclasses

    return dataclasses.replace(config, **changes)


def train_draft_target():
    from ouroboros_core.models import load_target_of

    return load_target_of("smollm2", None)[0]  # the stand-in the setup fixture put there


def test_a_draft_learns_to_read_the_target_states_written_for_its_answers(setup, monkeypatch):
    """target_states writes each answer's states in parts; train_draft --states learns a projection
    from zeros on the answers that have them (the others left out, said), and saves it apart."""
    import ouroboros_core.tools.target_states as target_states
    from ouroboros_core.models import STATE_PROJECTION, load_model, load_target_of

    tmp, samples, heldout = setup
    target, tokenizer = load_target_of("smollm2", None)
    monkeypatch.setattr(target_states, "PART_ROWS", 10)
    for path in (samples, heldout):
        rows_of = target_states.load_rows([path])
        for number in range(0, len(rows_of), 10):
            if path == heldout or number != 10:  # the samples' second part is missing
                where = target_states.part_path(tmp / "states" / path.stem, number // 10)
                where.parent.mkdir(parents=True, exist_ok=True)
                target_states.write_part(target, rows_of[number : number + 10], 0, where, 64)
    written = target_states.load_rows([samples])
    assert target_states.read_states(tmp / "states" / samples.stem, written) == 14
    row = written[0]
    with torch.no_grad():
        hidden = target.model(input_ids=torch.tensor([row["ids"]])).last_hidden_state[0]
    start = row["prompt_tokens"] - 2  # position p reads the state at p - 1
    expected = hidden[start : len(row["ids"]) - 2]
    # a padded batch and one row may sum in other orders (AVX-512 kernels do): a bfloat16 step apart
    bfloat16_step = dict(rtol=2**-7, atol=1e-4)
    torch.testing.assert_close(row["states"].float(), expected, **bfloat16_step)
    one_off = hidden[start + 1 : len(row["ids"]) - 1]
    assert not torch.allclose(row["states"].float(), one_off, **bfloat16_step)
    said = []
    config = DraftTraining(**{**cfg(1).__dict__, "states": str(tmp / "states")})
    summary = train(config, [samples], heldout, tmp / "fed", log=said.append)
    assert "10 of 24 answers have no states" in " ".join(map(str, said))
    assert summary["answers"] == 14
    first, last = summary["heldout_curve"][0], summary["heldout_curve"][-1]
    assert first["agreement"] == first["without_states"]  # the projection starts at zero
    draft = load_model(tmp / "fed", torch.device("cpu"), torch.float32, False)
    assert (tmp / "fed" / STATE_PROJECTION).is_file() and draft.state_projection.abs().sum() > 0
    assert "without_states" in last
    assert not any("state_projection" in name for name in weights(tmp / "fed"))


def test_answers_without_states_train_without_one_when_kept(setup, monkeypatch):
    """--stateless-too: the answers whose states are not written stay in training (said so) and
    read a zero state there, as a step's later guesses run; the others read theirs."""
    import ouroboros_core.tools.target_states as target_states
    from ouroboros_core.models import load_target_of

    tmp, samples, heldout = setup
    target, _ = load_target_of("smollm2", None)
    monkeypatch.setattr(target_states, "PART_ROWS", 10)
    for path, parts in ((samples, [1]), (heldout, [0])):  # the samples: rows 10-19 only
        rows_of = target_states.load_rows([path])
        for number in parts:
            where = target_states.part_path(tmp / "states" / path.stem, number)
            where.parent.mkdir(parents=True, exist_ok=True)
            target_states.write_part(target, rows_of[number * 10 : number * 10 + 10], 0, where, 64)
    fed = []
    real_step = train_draft.train_step

    def step(draft, batch, *args):
        fed.extend("states" in row for row in batch)
        return real_step(draft, batch, *args)

    monkeypatch.setattr(train_draft, "train_step", step)
    said = []
    config = DraftTraining(**{**cfg(1).__dict__, "states": str(tmp / "states")})
    config = DraftTraining(**{**config.__dict__, "stateless_too": True})
    summary = train(config, [samples], heldout, tmp / "fed", log=said.append)
    assert "14 of 24 answers have no states" in " ".join(map(str, said))
    assert "kept, without a state" in " ".join(map(str, said))
    assert summary["answers"] == 24 and summary["answers_with_states"] == 10
    assert fed.count(True) == 10 and fed.count(False) == 14  # one epoch: each answer once
    # the held-out answers are read as answers_of reads them by default: only those with states
    assert len(train_draft.answers_of(config, samples, log=said.append)) == 10


def test_the_targets_choice_is_learned_from_its_states_when_asked(setup, monkeypatch, capsys):
    """--learn choice (or chances) reads the target's states: refused without --states; with them,
    every step learns as asked, and the draft it saves says so."""
    import ouroboros_core.tools.target_states as target_states
    from ouroboros_core.models import load_target_of

    tmp, samples, heldout = setup
    argv = ["--samples", str(samples), "--heldout", str(heldout), "--out", str(tmp / "x")]
    with pytest.raises(SystemExit):
        train_draft.main([*argv, "--learn", "choice"])
    assert "--learn choice reads the target's states: give --states" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # two soft losses of the same chances would stack
        train_draft.main([*argv, "--states", str(tmp), "--learn", "chances", "--teacher-k", "8"])
    assert "--learn chances already learns all the target's chances" in capsys.readouterr().err
    target, _ = load_target_of("smollm2", None)
    for path in (samples, heldout):
        where = target_states.part_path(tmp / "states" / path.stem, 0)
        where.parent.mkdir(parents=True, exist_ok=True)
        target_states.write_part(target, target_states.load_rows([path]), 0, where, 64)
    learned = []
    real_step = train_draft.train_step

    def step(*args):
        learned.append(args[-1])
        return real_step(*args)

    monkeypatch.setattr(train_draft, "train_step", step)
    config = DraftTraining(**{**cfg(1).__dict__, "states": str(tmp / "states"), "learn": "choice"})
    summary = train(config, [samples], heldout, tmp / "chosen", log=lambda *_: None)
    assert learned == ["choice"] * summary["steps"] and summary["config"]["learn"] == "choice"
