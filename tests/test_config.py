"""The configs (ouroboros_core/config.py) on their own, no model loaded: each knob's range and the
exact refusal that names it, the defaults, how loose options split between sampling and the
method's config, and the knob declarations the CLI and the page read."""

from __future__ import annotations

import dataclasses
import math

import pytest

from ouroboros_core.config import (
    METHOD_CONFIGS,
    METHODS,
    SAMPLING_OPTIONS,
    ConfigError,
    OuroborosConfig,
    SamplingConfig,
    SpeculativeConfig,
    build_configs,
    check_float,
    check_int,
    check_method,
    knob,
    knobs,
)

# The range the engine accepts for each knob, in declaration order: (name, kind, low, high,
# low_open). The CLI, the page and every request are refused outside these.
RANGES = {
    SamplingConfig: [
        ("temperature", float, 0.0, 100.0, False),
        ("top_p", float, 0.0, 1.0, True),
        ("seed", int, 0, 2**63 - 1, False),
    ],
    SpeculativeConfig: [("gamma", int, 1, 64, False)],
    OuroborosConfig: [
        ("gamma", int, 1, 64, False),
        ("window", int, 0, 64, False),
        ("ngram", int, 2, 16, False),
        ("guess_set", int, 1, 256, False),
        ("branches", int, 0, 32, False),
        ("draft_candidates", int, 0, 32, False),
        ("pool_size", int, 1, 10_000_000, False),
        ("prompt_lookup", bool, None, None, False),
        ("max_trunk", int, 1, 64, False),
        ("extend_above", float, 0.0, 1.0, False),
        ("extend_chance", float, 0.0, 1.0, False),
        ("second_above", float, 0.0, 1.0, False),
        ("free_rows", int, 0, 256, False),
        ("fill_above", float, 0.0, 1.0, False),
        ("lookup", int, 0, 64, False),
        ("lookup_grow", int, 0, 256, False),
        ("stored_answers", int, 0, 64, False),
        ("lookup_above", float, 0.0, 1.0, False),
    ],
}
NUMBER_KNOBS = [
    (config, *entry)
    for config, entries in RANGES.items()
    for entry in entries
    if entry[2] is not None
]


def refusal(config_type, **options) -> str:
    with pytest.raises(ConfigError) as raised:
        config_type(**options)
    return str(raised.value)


def test_each_config_declares_its_knobs_in_order_with_these_kinds_and_ranges():
    for config_type, entries in RANGES.items():
        declared = knobs(config_type)
        assert [
            (k.name, k.kind, k.low, k.high, k.low_open) for k in declared.values()
        ] == entries, config_type.__name__
        # Every field is a knob, so construction checks every one of them.
        assert list(declared) == [f.name for f in dataclasses.fields(config_type)]


@pytest.mark.parametrize(
    "config_type,name,kind,low,high,low_open",
    NUMBER_KNOBS,
    ids=[f"{c.__name__}.{n}" for c, n, *_ in NUMBER_KNOBS],
)
def test_each_number_knob_takes_its_ends_and_refuses_just_past_them(
    config_type, name, kind, low, high, low_open
):
    step = 1 if kind is int else 1e-6
    assert getattr(config_type(**{name: high}), name) == high
    if low_open:
        assert getattr(config_type(**{name: low + step}), name) == low + step
        allowed = f"above {low} and at most {high}"
        assert refusal(config_type, **{name: low}) == f"{name} must be {allowed}, got {low}"
    else:
        assert getattr(config_type(**{name: low}), name) == low
        allowed = f"from {low} to {high}"
    for outside in (low - step, high + step):
        assert refusal(config_type, **{name: outside}) == f"{name} must be {allowed}, got {outside}"


@pytest.mark.parametrize(
    "name,value,message",
    [
        ("ngram", 2.0, "ngram must be a whole number from 2 to 16, got 2.0"),
        ("lookup", "12", "lookup must be a whole number from 0 to 64, got '12'"),
        ("free_rows", None, "free_rows must be a whole number from 0 to 256, got None"),
        ("branches", False, "branches must be a whole number from 0 to 32, got False"),
        ("seed", True, "seed must be a whole number from 0 to 9223372036854775807, got True"),
        ("fill_above", True, "fill_above must be a number from 0.0 to 1.0, got True"),
        ("lookup_above", math.nan, "lookup_above must be a number from 0.0 to 1.0, got nan"),
        ("temperature", -math.inf, "temperature must be a number from 0.0 to 100.0, got -inf"),
        ("extend_chance", "0.1", "extend_chance must be a number from 0.0 to 1.0, got '0.1'"),
        ("top_p", None, "top_p must be a number from 0.0 to 1.0, got None"),
        ("prompt_lookup", 1, "prompt_lookup must be true or false, got 1"),
        ("prompt_lookup", "yes", "prompt_lookup must be true or false, got 'yes'"),
        ("prompt_lookup", None, "prompt_lookup must be true or false, got None"),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused_naming_the_knob_and_its_range(name, value, message):
    config_type = SamplingConfig if name in SAMPLING_OPTIONS else OuroborosConfig
    assert refusal(config_type, **{name: value}) == message


def test_a_whole_number_is_a_fine_value_for_a_float_knob_but_not_the_reverse():
    assert SamplingConfig(temperature=1).temperature == 1
    assert OuroborosConfig(extend_above=1).extend_above == 1
    assert "whole number" in refusal(OuroborosConfig, window=1.0)
    assert type(SamplingConfig(temperature=1).temperature) is float  # kept as the knob's kind


def test_numpy_numbers_are_taken_and_kept_as_the_knobs_own_int_or_float():
    import numpy as np

    config = OuroborosConfig(window=np.int64(3), extend_above=np.float32(0.5))
    assert (type(config.window), type(config.extend_above)) == (int, float)
    assert config == OuroborosConfig(window=3, extend_above=0.5)
    seeded = SamplingConfig(temperature=np.float64(0.7), seed=np.int32(7))
    assert (type(seeded.seed), seeded.seed, seeded.temperature) == (int, 7, 0.7)
    assert "whole number" in refusal(OuroborosConfig, window=np.float64(3.0))
    assert "must be from" in refusal(OuroborosConfig, window=np.int64(10**6))


def test_the_sampling_defaults_are_greedy_and_unseeded_with_the_whole_nucleus():
    default = SamplingConfig()
    assert (default.temperature, default.top_p, default.seed) == (0.0, 1.0, None)
    assert default.greedy
    # Only seed may be left unset; None is no number for the knobs that have one.
    assert SamplingConfig(seed=None).seed is None and SamplingConfig(seed=0).seed == 0
    assert "temperature must be a number" in refusal(SamplingConfig, temperature=None)


@pytest.mark.parametrize(
    "temperature,greedy", [(0.0, True), (0, True), (1e-9, False), (0.7, False)]
)
def test_greedy_means_a_temperature_of_exactly_zero(temperature, greedy):
    assert SamplingConfig(temperature=temperature).greedy is greedy


def test_every_default_is_inside_its_range_and_the_page_range_inside_the_engines():
    for config_type in RANGES:
        config_type()  # the defaults pass their own checks
        for setting in knobs(config_type).values():
            if setting.default is not None and setting.kind is not bool:
                assert setting.low <= setting.default <= setting.high, setting.name
                assert type(setting.default) is setting.kind, setting.name
            page = setting.page
            if page is None:
                continue
            # The page's slider is narrower than (or as wide as) what the engine accepts.
            assert setting.low <= page.low < page.high <= setting.high, setting.name
            assert not (setting.low_open and page.low == setting.low), setting.name
            assert page.step > 0 and page.label and page.info, setting.name
            if setting.default is not None:
                assert page.low <= setting.default <= page.high, setting.name


def test_a_knob_names_its_flag_and_says_whether_it_has_help_and_a_place_on_the_page():
    ouroboros = knobs(OuroborosConfig)
    assert ouroboros["guess_set"].flag == "--guess-set"
    assert ouroboros["gamma"].flag == "--gamma"
    assert ouroboros["pool_size"].cli is None and ouroboros["prompt_lookup"].cli is None
    assert ouroboros["guess_set"].page is None
    on_page = {n for c in RANGES for n, s in knobs(c).items() if s.page is not None}
    assert on_page == {"temperature", "top_p", "seed", "gamma", "window", "ngram", "branches"}
    assert knobs(SamplingConfig)["top_p"].page.low == 0.05


def test_a_knobs_own_check_refuses_what_the_config_refuses():
    top_p = knobs(SamplingConfig)["top_p"]
    top_p.check(0.5)
    with pytest.raises(ConfigError, match=r"^top_p must be above 0\.0 and at most 1\.0, got 0$"):
        top_p.check(0)
    seed = knobs(SamplingConfig)["seed"]
    seed.check(None)
    with pytest.raises(ConfigError, match=r"^seed must be from 0 to \d+, got -1$"):
        seed.check(-1)
    prompt_lookup = knobs(OuroborosConfig)["prompt_lookup"]
    prompt_lookup.check(False)
    with pytest.raises(ConfigError, match=r"^prompt_lookup must be true or false, got 0$"):
        prompt_lookup.check(0)


def test_a_knob_that_may_be_unset_must_name_its_kind():
    with pytest.raises(TypeError, match="a knob whose default is None needs its kind"):
        knob(None, 0, 10)
    declared = knob(None, 0, 10, kind=int, cli="help")
    assert declared.default is None and declared.metadata["knob"]["kind"] is int
    assert knob(0.5, 0.0, 1.0).metadata["knob"]["kind"] is float


def test_the_check_helpers_name_the_setting_and_the_range():
    check_int("max_new_tokens", 255, 1, 255)
    with pytest.raises(ConfigError, match=r"^max_new_tokens must be from 1 to 255, got 256$"):
        check_int("max_new_tokens", 256, 1, 255)
    with pytest.raises(ConfigError, match=r"^threads must be a whole number from 1 to 8, got '2'$"):
        check_int("threads", "2", 1, 8)
    check_float("rate", 1e-300, 0.0, 1.0, low_open=True)
    with pytest.raises(ConfigError, match=r"^rate must be above 0\.0 and at most 1\.0, got 0\.0$"):
        check_float("rate", 0.0, 0.0, 1.0, low_open=True)
    with pytest.raises(ConfigError, match=r"^rate must be a number from 0\.0 to 1\.0, got inf$"):
        check_float("rate", math.inf, 0.0, 1.0)


def test_configs_are_frozen_and_a_replaced_copy_is_checked_again():
    config = OuroborosConfig(window=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.window = 8
    assert dataclasses.replace(config, gamma=3) == OuroborosConfig(window=4, gamma=3)
    with pytest.raises(ConfigError, match="^gamma must be from 1 to 64, got 0$"):
        dataclasses.replace(config, gamma=0)


def test_each_method_has_its_config_and_none_shares_a_name_with_sampling():
    assert tuple(METHOD_CONFIGS) == METHODS == ("vanilla", "speculative", "ouroboros")
    assert METHOD_CONFIGS["vanilla"] is None
    assert SAMPLING_OPTIONS == {"temperature", "top_p", "seed"}
    for config_type in (SpeculativeConfig, OuroborosConfig):
        # A shared name would be routed to sampling and never reach the method.
        assert SAMPLING_OPTIONS.isdisjoint(f.name for f in dataclasses.fields(config_type))


def test_options_split_between_sampling_and_the_methods_config():
    options = {"temperature": 0.5, "gamma": 3, "seed": 7, "window": 2}
    sampling, method = build_configs("ouroboros", options)
    assert sampling == SamplingConfig(temperature=0.5, seed=7)
    assert method == OuroborosConfig(gamma=3, window=2)
    assert options == {"temperature": 0.5, "gamma": 3, "seed": 7, "window": 2}  # left as it was
    sampling, method = build_configs("speculative", {"gamma": 9, "top_p": 0.9})
    assert (sampling, method) == (SamplingConfig(top_p=0.9), SpeculativeConfig(gamma=9))
    assert build_configs("vanilla", {"seed": 1}) == (SamplingConfig(seed=1), None)
    assert build_configs("ouroboros", {}) == (SamplingConfig(), OuroborosConfig())


def test_an_unknown_option_is_refused_with_the_methods_allowed_ones_sorted():
    with pytest.raises(ConfigError) as raised:
        build_configs("speculative", {"window": 1, "beam": 2, "gamma": 3})
    assert str(raised.value) == (
        "unknown option(s) for method 'speculative': beam, window; "
        "allowed: gamma, seed, temperature, top_p"
    )
    with pytest.raises(ConfigError) as raised:
        build_configs("vanilla", {"gamma": 4})
    assert str(raised.value) == (
        "unknown option(s) for method 'vanilla': gamma; allowed: seed, temperature, top_p"
    )


def test_unknown_options_are_named_before_any_value_is_checked():
    with pytest.raises(ConfigError, match="^unknown option.*: lookahead;"):
        build_configs("ouroboros", {"gamma": 0, "lookahead": 4})
    with pytest.raises(ConfigError, match="^top_p must be above 0.0"):
        build_configs("ouroboros", {"top_p": 0.0, "gamma": 2})
    with pytest.raises(ConfigError, match="^ngram must be from 2 to 16, got 1$"):
        build_configs("ouroboros", {"temperature": 1.0, "ngram": 1})


@pytest.mark.parametrize("method", ["Ouroboros", "greedy", "", None, 3])
def test_an_unknown_method_is_refused_listing_the_three(method):
    with pytest.raises(ConfigError) as raised:
        check_method(method)
    assert str(raised.value) == (
        f"method must be one of vanilla, speculative, ouroboros; got {method!r}"
    )
    with pytest.raises(ConfigError, match="^method must be one of"):
        build_configs(method, {})
    assert [check_method(m) for m in METHODS] == list(METHODS)
