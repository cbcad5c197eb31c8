"""What every engine test checks of a finished stream, and the prompts they share."""

from __future__ import annotations

import pytest

from ouroboros_core import Source, StepEvent

PROMPTS = [
    "def add(a, b):\n    return a + b\n",
    "import os\nimport sys\n\nclass Config:\n",
    "# 日本語のコメント 😀 émoji\nvalue = '中文'\n",
]
REPETITIVE_PROMPTS = [
    "x = 1\nx = 1\nx = 1\nx = 1\n",
    "self.a = a\nself.b = b\nself.a = a\nself.b = b\n",
    "for i in range(3):\n    print(i)\nfor i in range(3):\n    print(i)\n",
]
N = 16


def ids(tokens):
    return [t.id for t in tokens]


def ids_and_sources(tokens):
    # Drafted tokens carry display text; committed ones carry output pieces, so compare ids and
    # sources.
    return [(t.id, t.source) for t in tokens]


def check_tree(step) -> None:
    """The step's tree as the inspector shows it: the walked path is the trunk, or the trunk's
    accepted head and the branch hanging there; what was accepted is that path's head."""
    assert 0 <= step.trunk_accepted <= len(step.trunk) and len(step.attach) == len(step.branches)
    assert all(0 <= at <= len(step.trunk) for at in step.attach)
    head = ids(step.trunk[: step.trunk_accepted])
    if step.branch is None:
        assert ids(step.drafted) == ids(step.trunk)
    else:
        assert step.attach[step.branch] == step.trunk_accepted
        assert ids(step.drafted) == head + ids(step.branches[step.branch])
    assert ids(step.accepted) == ids(step.drafted)[: len(step.accepted)]
    if (
        step.branch is None
    ):  # the whole trunk held, or the target's token differs from it and from every branch
        assert len(step.accepted) <= step.trunk_accepted


def check_events(result, tokenizer, method: str, max_new_tokens: int) -> None:
    """The invariants every finished stream must satisfy."""
    steps = result.events
    assert all(isinstance(step, StepEvent) for step in steps)
    assert [step.index for step in steps] == list(range(len(steps)))
    output = result.token_ids
    position = 0
    for number, step in enumerate(steps):
        last = number == len(steps) - 1
        committed = step.committed
        assert committed[: len(step.accepted)] == step.accepted
        if step.target_token is not None:
            assert committed[-1] == step.target_token and len(committed) == len(step.accepted) + 1
            assert step.target_token.source == Source.TARGET
        else:
            assert last, "only a step cut short by a limit lacks the target's token"
        # Accepted tokens are the head of the walked path, rejected ones its tail.
        assert ids_and_sources(step.accepted) == ids_and_sources(step.drafted[: len(step.accepted)])
        check_tree(step)
        assert all(t.source != Source.TARGET for t in step.drafted)
        if step.rejected:
            assert step.rejected == step.drafted[len(step.drafted) - len(step.rejected) :]
            assert all(t.text == tokenizer.decode([t.id]) for t in step.drafted)
        if not last:
            assert len(step.accepted) + len(step.rejected) == len(step.drafted)
        assert ids(committed) == output[position : position + len(committed)]
        # A rejected token never appears at its position in the output.
        if step.rejected and position + len(step.accepted) < len(output):
            assert step.rejected[0].id != output[position + len(step.accepted)]
        if method == "vanilla":
            assert step.drafted == () and step.branches == () and len(committed) == 1
        position += len(committed)
        assert step.elapsed_s >= 0 and step.draft_ms >= 0 and step.verify_ms >= 0
    assert position == len(output)
    assert [i for step in steps for i in ids(step.committed)] == output

    pieces = "".join(t.text for step in steps for t in step.committed)
    assert pieces == result.text
    if result.stop_reason != "cancelled":
        assert result.text == tokenizer.decode(output, skip_special_tokens=True)

    stats = result.stats
    assert stats.new_tokens == len(output)
    assert stats.target_forwards == len(steps)
    assert stats.tokens_per_forward == pytest.approx(len(output) / len(steps))
    assert stats.drafted_tokens == sum(len(step.drafted) for step in steps)
    assert stats.accepted_tokens == sum(len(step.accepted) for step in steps)
    # Drafting and verifying are parts of the request's compute time, which may also count loop
    # overhead.
    assert stats.seconds >= stats.draft_seconds + stats.verify_seconds - 1e-9
    assert steps[-1].elapsed_s == pytest.approx(stats.seconds)
    assert [s.elapsed_s for s in steps] == sorted(s.elapsed_s for s in steps)
    if result.stop_reason == "max_new_tokens":
        assert len(output) == max_new_tokens
    else:
        assert len(output) <= max_new_tokens


def run(engine, prompt, method, max_new_tokens=N, **options):
    result = engine.generate(prompt, method, max_new_tokens, **options)
    check_events(result, engine.tokenizer, method, max_new_tokens)
    return result
