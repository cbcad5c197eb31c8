"""The decode loop's events (ouroboros_core/events.py) on their own, no model loaded: what each
token source is called, the figures Stats derives (and what they read with nothing to divide by),
which tokens a step commits, and the plain, JSON-ready dicts the CLI and the app write out."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ouroboros_core.events import DoneEvent, Event, Result, Source, Stats, StepEvent, Token


def stats(**changes) -> Stats:
    figures = dict(
        new_tokens=12,
        target_forwards=5,
        drafted_tokens=16,
        accepted_tokens=7,
        seconds=2.0,
        draft_seconds=0.75,
        verify_seconds=1.25,
        rejected_steps=3,
    )
    return Stats(**{**figures, **changes})


def step(**changes) -> StepEvent:
    trunk = (Token(5, "a", Source.DRAFT), Token(6, "b", Source.DRAFT), Token(7, "c", Source.POOL))
    parts = dict(
        index=2,
        drafted=trunk,
        branches=((Token(8, "x", Source.PROMPT), Token(9, "", Source.PROMPT)),),
        accepted=trunk[:2],
        rejected=trunk[2:],
        target_token=Token(11, "d", Source.TARGET),
        draft_ms=1.23456,
        verify_ms=7.891011,
        elapsed_s=0.123456789,
        trunk=trunk,
        attach=(1,),
        trunk_accepted=2,
        branch=None,
    )
    return StepEvent(**{**parts, **changes})


def test_each_source_is_named_by_the_lowercase_word_the_renderers_and_json_read():
    assert {source.value for source in Source} == {"target", "draft", "pool", "prompt"}
    assert Source("pool") is Source.POOL and Source("target") is Source.TARGET
    # A str enum: it compares equal to its word and is written to JSON as that word.
    assert Source.DRAFT == "draft" and json.dumps([Source.PROMPT]) == '["prompt"]'
    with pytest.raises(ValueError):
        Source("DRAFT")


def test_tokens_and_events_are_frozen_values():
    token = Token(3, "ab", Source.DRAFT)
    with pytest.raises(dataclasses.FrozenInstanceError):
        token.id = 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        step().index = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats().new_tokens = 1
    # Equal by value, so a token can be looked up in a set or a dict.
    assert token == Token(3, "ab", Source.DRAFT) and token != Token(3, "ab", Source.POOL)
    assert len({token, Token(3, "ab", Source.DRAFT)}) == 1
    assert step() == step() and hash(step()) == hash(step())


def test_tokens_per_forward_divides_the_new_tokens_by_the_target_forwards():
    assert stats(new_tokens=12, target_forwards=5).tokens_per_forward == 2.4
    assert stats(new_tokens=5, target_forwards=5).tokens_per_forward == 1.0
    # No forward yet (a request cancelled before its first): 0, never a ZeroDivisionError.
    assert stats(new_tokens=0, target_forwards=0).tokens_per_forward == 0.0


def test_acceptance_rate_is_the_share_of_drafted_tokens_the_target_kept():
    assert stats(drafted_tokens=16, accepted_tokens=7).acceptance_rate == 7 / 16
    assert stats(drafted_tokens=4, accepted_tokens=4).acceptance_rate == 1.0
    # Vanilla drafts nothing: 0, not a division by zero.
    assert stats(drafted_tokens=0, accepted_tokens=0).acceptance_rate == 0.0


def test_per_token_acceptance_counts_one_failure_per_rejecting_step():
    # 7 kept, 3 steps that each rejected once: 7 of 10 judged tokens stood.
    assert stats(accepted_tokens=7, rejected_steps=3).per_token_acceptance == 0.7
    # rejected_steps defaults to 0: with nothing rejected every judged token stood.
    figures = Stats(4, 2, 4, 4, 1.0, 0.5, 0.5)
    assert figures.rejected_steps == 0 and figures.per_token_acceptance == 1.0
    assert stats(accepted_tokens=0, rejected_steps=0).per_token_acceptance == 0.0


@pytest.mark.parametrize(
    "new_tokens,seconds,rate", [(12, 2.0, 6.0), (3, 0.5, 6.0), (12, 0.0, 0.0), (12, -1.0, 0.0)]
)
def test_tokens_per_second_is_zero_when_no_time_was_measured(new_tokens, seconds, rate):
    assert stats(new_tokens=new_tokens, seconds=seconds).tokens_per_second == rate


def test_stats_dict_holds_every_field_as_measured_and_the_figures_rounded():
    figures = stats(new_tokens=10, target_forwards=3, drafted_tokens=9, accepted_tokens=2)
    figures = dataclasses.replace(figures, seconds=3.0, draft_seconds=0.123456789)
    assert figures.to_dict() == {
        "new_tokens": 10,
        "target_forwards": 3,
        "drafted_tokens": 9,
        "accepted_tokens": 2,
        "seconds": 3.0,
        "draft_seconds": 0.123456789,  # the measured fields are never rounded
        "verify_seconds": 1.25,
        "rejected_steps": 3,
        "tokens_per_forward": 3.3333,  # 10 / 3 to 4 places
        "acceptance_rate": 0.2222,  # 2 / 9
        "per_token_acceptance": 0.4,  # 2 / (2 + 3)
        "tokens_per_second": 3.333,  # 10 / 3.0 to 3 places
    }
    assert json.loads(json.dumps(figures.to_dict())) == figures.to_dict()


def test_a_step_commits_its_accepted_drafts_then_the_targets_own_token():
    event = step()
    assert [t.id for t in event.committed] == [5, 6, 11]
    assert event.committed[-1].source is Source.TARGET
    # A limit stopped the step before the target's token: only the accepted drafts are committed.
    assert step(target_token=None).committed == event.accepted
    assert step(accepted=(), rejected=event.drafted).committed == (event.target_token,)
    assert step(accepted=(), target_token=None).committed == ()


def test_a_step_dict_writes_tokens_as_plain_dicts_with_the_sources_word():
    written = step(branch=0).to_dict()
    assert written == {
        "type": "step",
        "index": 2,
        "drafted": [
            {"id": 5, "text": "a", "source": "draft"},
            {"id": 6, "text": "b", "source": "draft"},
            {"id": 7, "text": "c", "source": "pool"},
        ],
        "branches": [
            [{"id": 8, "text": "x", "source": "prompt"}, {"id": 9, "text": "", "source": "prompt"}]
        ],
        "accepted": [
            {"id": 5, "text": "a", "source": "draft"},
            {"id": 6, "text": "b", "source": "draft"},
        ],
        "rejected": [{"id": 7, "text": "c", "source": "pool"}],
        "target_token": {"id": 11, "text": "d", "source": "target"},
        "draft_ms": 1.235,  # milliseconds to 3 places
        "verify_ms": 7.891,
        "elapsed_s": 0.12346,  # seconds to 5 places
        "trunk": written["drafted"],
        "attach": [1],
        "trunk_accepted": 2,
        "branch": 0,
    }
    # The source is written as its word, never as the enum's name ("Source.DRAFT").
    assert type(written["drafted"][0]["source"]) is str
    assert json.loads(json.dumps(written)) == written


def test_a_step_without_a_target_token_or_a_tree_writes_none_and_empty_lists():
    bare = StepEvent(
        index=0,
        drafted=(),
        branches=(),
        accepted=(),
        rejected=(),
        target_token=None,
        draft_ms=0.0,
        verify_ms=2.0,
        elapsed_s=0.002,
    )
    assert (bare.trunk, bare.attach, bare.trunk_accepted, bare.branch) == ((), (), 0, None)
    written = bare.to_dict()
    assert written["target_token"] is None and written["branch"] is None
    assert written["trunk"] == [] and written["attach"] == [] and written["branches"] == []
    assert json.loads(json.dumps(written)) == written


def test_the_done_dict_nests_the_stats_dict_and_lists_the_new_token_ids():
    figures = stats()
    done = DoneEvent(token_ids=(5, 6, 11), text="abd", stats=figures, stop_reason="eos")
    assert done.to_dict() == {
        "type": "done",
        "token_ids": [5, 6, 11],
        "text": "abd",
        "stop_reason": "eos",
        "stats": figures.to_dict(),
    }
    assert json.loads(json.dumps(done.to_dict())) == done.to_dict()


def test_an_event_is_a_step_or_the_done_event_and_nothing_else():
    done = DoneEvent((), "", stats(), "cancelled")
    assert isinstance(step(), Event) and isinstance(done, Event)
    assert not isinstance(Token(1, "a", Source.TARGET), Event)
    assert not isinstance(Result([], "", stats(), "eos", []), Event)
    # Renderers tell them apart by the dict's "type".
    assert {step().to_dict()["type"], done.to_dict()["type"]} == {"step", "done"}
