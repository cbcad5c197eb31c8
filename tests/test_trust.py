"""LookupTrust on its own: what one verdict adds to its counts, and how many of a copy's tokens it
trusts from those counts and the fitted prior (tests/test_phrases.py follows it through a
request)."""

from __future__ import annotations

import pytest

import ouroboros_core.proposal as trust_module
from ouroboros_core.fitted import TRUST_PRIOR
from ouroboros_core.proposal import LookupTrust


def test_the_counts_hold_one_row_per_matched_length_up_to_the_longest_and_start_at_zero():
    trust = LookupTrust(longest=3, length=5)
    assert trust.kept == [[0] * 5] * 4 and trust.reached == [[0] * 5] * 4
    trust.observe(3, 5, 5)  # the last row is there
    trust.observe(0, 5, 5)  # and so is row 0 (the pool phrases' one row)
    # the rows are separate lists: a verdict on one row leaves the others alone
    assert trust.reached[1] == [0] * 5 and trust.reached[2] == [0] * 5
    trust.observe(6, 5, 1)  # a longer match counts on the longest row
    assert trust.reached[3] == [2, 2, 1, 1, 1] and trust.kept[3] == [2, 1, 1, 1, 1]
    assert trust.row(9) == 3 and trust.row(2) == 2
    assert (
        trust.length(9, 1.0, 5, 0.9) == trust.length(3, 1.0, 5, 0.9) != trust.length(2, 1.0, 5, 0.9)
    )
    with pytest.raises(ValueError, match="matched -1 tokens"):
        trust.observe(-1, 5, 5)


def test_a_verdict_counts_every_token_up_to_the_first_rejected_as_reached():
    trust = LookupTrust(longest=4, length=6)
    trust.observe(2, 5, 3)  # five tokens offered, three stood: the fourth was reached and rejected
    assert trust.reached[2] == [1, 1, 1, 1, 0, 0]
    assert trust.kept[2] == [1, 1, 1, 0, 0, 0]
    trust.observe(2, 5, 0)  # rejected at once: only the first token was reached
    assert trust.reached[2] == [2, 1, 1, 1, 0, 0] and trust.kept[2] == [1, 1, 1, 0, 0, 0]


def test_a_copy_that_stood_whole_counts_each_of_its_tokens_kept_and_none_past_its_end():
    trust = LookupTrust(longest=4, length=6)
    trust.observe(1, 4, 4)
    assert trust.reached[1] == [1, 1, 1, 1, 0, 0] and trust.kept[1] == [1, 1, 1, 1, 0, 0]
    trust.observe(1, 2, 9)  # more accepted than offered (never sent so): counted to its end
    assert trust.reached[1] == [2, 2, 1, 1, 0, 0] and trust.kept[1] == [2, 2, 1, 1, 0, 0]
    trust.observe(1, 0, 0)  # an empty copy teaches nothing
    assert trust.reached[1] == [2, 2, 1, 1, 0, 0]


def test_untried_each_token_stands_at_the_priors_rate_and_the_threshold_itself_ends_the_copy():
    trust = LookupTrust(longest=4, length=8)
    rate = TRUST_PRIOR[0] / TRUST_PRIOR[1]
    assert rate == pytest.approx(0.8)  # "trusted at 80% a token" (fitted.py)
    three = 1.0 * rate * rate * rate  # the chance of the third token, multiplied as trust does
    # A token whose chance equals `above` is not trusted: the first two are, the third is not.
    assert trust.length(0, 1.0, 8, three) == 2
    assert trust.length(0, 1.0, 8, three * 0.999) == 3
    # The chance of reaching the copy scales every token's: reached half the time, fewer stand.
    assert trust.length(0, 0.5, 8, 0.3) == 2  # 0.5 * 0.8 = 0.4, * 0.8 = 0.32, * 0.8 = 0.256
    assert trust.length(0, 0.3, 8, 0.3) == 0  # no more likely than the threshold: nothing
    assert trust.length(0, 1.0, 0, 0.0) == 0  # nothing offered, nothing trusted


def test_what_a_row_learnt_sets_its_rate_at_each_depth_with_the_prior_added():
    trust = LookupTrust(longest=4, length=4)
    for _ in range(3):  # three copies after two matching tokens: their first two tokens stood
        trust.observe(2, 4, 2)
    assert trust.reached[2] == [3, 3, 3, 0] and trust.kept[2] == [3, 3, 0, 0]
    kept_rate = (3 + TRUST_PRIOR[0]) / (3 + TRUST_PRIOR[1])  # 4 / 4.25
    rejected_rate = (0 + TRUST_PRIOR[0]) / (3 + TRUST_PRIOR[1])  # 1 / 4.25
    assert kept_rate > 0.9 and rejected_rate < 0.25
    # depth 0 and 1 keep the chance above 0.5 (0.94, 0.89); depth 2 drops it to 0.21
    assert trust.length(2, 1.0, 4, 0.5) == 2
    # with a threshold under 0.21 the third token counts, the fourth (prior: 0.8) too
    assert trust.length(2, 1.0, 4, 0.2 * 0.8 - 0.001) == 4
    assert trust.length(2, 1.0, 4, 0.2) == 3


def test_the_prior_is_read_from_fitted_so_a_refit_moves_every_untried_length(monkeypatch):
    assert LookupTrust(longest=1, length=10).length(1, 1.0, 10, 0.3) == 5  # 0.8 ** 6 = 0.26
    monkeypatch.setattr(trust_module, "TRUST_PRIOR", (1.0, 2.0))  # untried: 50% a token
    assert LookupTrust(longest=1, length=10).length(1, 1.0, 10, 0.3) == 1  # 0.5, then 0.25
    monkeypatch.setattr(trust_module, "TRUST_PRIOR", (1.0, 1.0))  # untried: certain
    assert LookupTrust(longest=1, length=10).length(1, 1.0, 10, 0.3) == 10
