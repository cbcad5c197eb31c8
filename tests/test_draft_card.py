"""The draft card's words on the target's state (tools/draft_card.py): none for a draft that does
not read it; for one that does, its agreement without it, how many answers had states, and what the
latest stage learned from them."""

from __future__ import annotations

from ouroboros_core.tools.draft_card import state_parts


def summary(fed: int, answers: int, learn: str | None) -> dict:
    config = {"epochs": 1} if learn is None else {"epochs": 1, "learn": learn}
    curve = [{"agreement": 0.4, "without_states": 0.377}]
    return {
        "answers_with_states": fed,
        "answers": answers,
        "config": config,
        "heldout_curve": curve,
    }


def test_a_draft_without_the_targets_state_says_nothing_of_it():
    assert state_parts(False, summary(0, 10, None)) == {"state": "", "after": "after"}


def test_the_card_tells_how_many_answers_had_states_and_what_was_learned_from_them():
    plain = state_parts(True, summary(7518, 8298, None))["state"]
    assert "37.7% agreement without it" in plain
    assert "states for 7,518 of its 8,298 answers" in plain and "--learn" not in plain
    chances = state_parts(True, summary(7518, 8298, "chances"))["state"]
    assert "`--learn chances`" in chances and "all the target's\n  chances" in chances
    choice = state_parts(True, summary(10, 10, "choice"))["state"]
    assert "`--learn choice`" in choice and "states for" not in choice
    assert (
        state_parts(True, summary(10, 10, "written"))["state"]
        == state_parts(True, summary(10, 10, None))["state"]
    )
