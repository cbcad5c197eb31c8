"""Bad input fails at the boundary with a ConfigError (a ValueError) that names the setting and what
is allowed."""

import re

import pytest

from conftest import CONTEXT, reference_ids
from ouroboros_core import (
    ConfigError,
    Engine,
    LoadError,
    OuroborosConfig,
    SamplingConfig,
    SpeculativeConfig,
)
from ouroboros_core.models import check_vocabularies
from ouroboros_core.tools.corpus import train_tokenizer


@pytest.fixture(scope="module")
def engine(make_engine):
    return make_engine("llama", "noisy")


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


@pytest.mark.parametrize("prompt", ["", "   ", "\n\t \n"])
def test_empty_or_blank_prompt(engine, prompt):
    with pytest.raises(ConfigError, match="prompt is empty.*non-blank"):
        engine.stream(prompt, "ouroboros", 8)


def test_prompt_that_is_not_text(engine):
    with pytest.raises(ConfigError, match="prompt must be text, got list"):
        engine.stream([1, 2, 3], "vanilla", 8)


@pytest.mark.parametrize("prompt,where", [("def f():\ud800\n", 8), ("\udfff", 0)])
def test_prompt_with_a_lone_surrogate(engine, prompt, where):
    code = f"U+{ord(prompt[where]):04X}"
    with pytest.raises(
        ConfigError,
        match=re.escape(f"not valid Unicode text: a lone surrogate ({code}) at character {where}"),
    ):
        engine.stream(prompt, "vanilla", 8)


def test_a_megabyte_prompt_is_refused_for_the_context(engine):
    with pytest.raises(ConfigError, match=r"prompt is \d+ tokens; .* context of"):
        engine.stream("x = 1\n" * 175_000, "ouroboros", 8)


def test_control_characters_emoji_and_cjk_are_text_the_engine_takes(engine, models, tokenizer):
    for prompt in ("a\x00b\x1b[31m\x7f = 1\n", "def 你好(😀):\n    return '🐍'\n"):
        expected = reference_ids(models.target("llama"), tokenizer, prompt, 12)
        for method in ("vanilla", "ouroboros"):
            result = engine.generate(prompt, method, 12)
            assert list(result.token_ids) == expected, (prompt, method)
            assert result.text == tokenizer.decode(expected), (prompt, method)


def test_prompt_longer_than_the_context_left(engine):
    prompt = "import os\n" * 30
    length = len(engine.encode(prompt))
    max_new_tokens = CONTEXT - length + 1  # one token too many
    with pytest.raises(ConfigError) as err:
        engine.stream(prompt, "speculative", max_new_tokens)
    message = str(err.value)
    assert f"prompt is {length} tokens" in message
    assert f"max_new_tokens={max_new_tokens}" in message
    assert f"context of {CONTEXT} tokens" in message
    assert f"at most {length - 1} prompt tokens" in message
    # One token fewer fits exactly.
    engine.stream(prompt, "speculative", max_new_tokens - 1)


@pytest.mark.parametrize("value", [0, -3, CONTEXT, 2.5, "16", None, True])
def test_max_new_tokens_out_of_range_or_not_int(engine, value):
    with pytest.raises(
        ConfigError, match=rf"max_new_tokens must be .*from 1 to {CONTEXT - 1}, got"
    ):
        engine.stream("def f():", "vanilla", value)


@pytest.mark.parametrize("method", ["beam", "Ouroboros", "", None])
def test_unknown_method(engine, method):
    with pytest.raises(
        ConfigError, match="method must be one of vanilla, speculative, ouroboros; got"
    ):
        engine.stream("def f():", method, 8)


@pytest.mark.parametrize(
    "method,option",
    [
        ("ouroboros", "lookahead"),
        ("speculative", "window"),
        ("vanilla", "gamma"),
        ("speculative", "max_tokens"),
    ],
)
def test_unknown_option_names_it_and_the_allowed_ones(engine, method, option):
    with pytest.raises(ConfigError) as err:
        engine.stream("def f():", method, 8, **{option: 4})
    message = str(err.value)
    assert f"unknown option(s) for method {method!r}: {option}" in message
    assert "allowed:" in message and "temperature" in message and "top_p" in message
    if method == "ouroboros":
        assert "window" in message and "ngram" in message
    if method == "vanilla":
        assert "gamma" not in message.split("allowed:")[1]


@pytest.mark.parametrize(
    "method,option,value,allowed",
    [
        ("ouroboros", "gamma", 0, "from 1 to 64"),
        ("ouroboros", "gamma", 65, "from 1 to 64"),
        ("speculative", "gamma", 0, "from 1 to 64"),
        ("ouroboros", "window", -1, "from 0 to 64"),
        ("ouroboros", "ngram", 1, "from 2 to 16"),
        ("ouroboros", "ngram", 17, "from 2 to 16"),
        ("ouroboros", "guess_set", 0, "from 1 to 256"),
        ("ouroboros", "branches", -1, "from 0 to 32"),
        ("ouroboros", "draft_candidates", 33, "from 0 to 32"),
        ("ouroboros", "pool_size", 0, "from 1 to 10000000"),
        ("ouroboros", "gamma", 2.5, "whole number from 1 to 64"),
        ("speculative", "gamma", "4", "whole number from 1 to 64"),
        ("ouroboros", "window", True, "whole number from 0 to 64"),
        ("ouroboros", "max_trunk", 0, "from 1 to 64"),
        ("ouroboros", "extend_above", 1.5, "from 0.0 to 1.0"),
        ("ouroboros", "second_above", -0.1, "from 0.0 to 1.0"),
        ("ouroboros", "second_above", "0.1", "number from 0.0 to 1.0"),
    ],
)
def test_hyperparameters_out_of_range(engine, method, option, value, allowed):
    with pytest.raises(ConfigError) as err:
        engine.stream("def f():", method, 8, **{option: value})
    assert str(err.value).startswith(f"{option} must be")
    assert allowed in str(err.value)
    assert f"got {value!r}" in str(err.value) or f"got {value}" in str(err.value)


@pytest.mark.parametrize(
    "option,value,allowed",
    [
        ("temperature", -0.1, "temperature must be from 0.0 to 100.0"),
        ("temperature", float("nan"), "temperature must be a number from 0.0 to 100.0"),
        ("temperature", float("inf"), "temperature must be a number"),
        ("temperature", "hot", "temperature must be a number"),
        ("top_p", 0, "top_p must be above 0.0 and at most 1.0"),
        ("top_p", 0.0, "top_p must be above 0.0 and at most 1.0"),
        ("top_p", 1.5, "top_p must be above 0.0 and at most 1.0"),
        ("top_p", -1, "top_p must be above 0.0"),
        ("seed", -1, "seed must be from 0 to"),
        ("seed", 1.5, "seed must be a whole number"),
    ],
)
def test_sampling_settings_out_of_range(engine, option, value, allowed):
    for method in ("vanilla", "ouroboros"):
        with pytest.raises(ConfigError, match=allowed.replace("(", r"\(").replace(".", r"\.")):
            engine.stream("def f():", method, 8, **{option: value})


def test_errors_come_before_the_first_event(engine):
    # stream() validates when called, not when first iterated: a UI can report the error at once.
    with pytest.raises(ConfigError):
        engine.stream("def f():", "ouroboros", 8, gamma=0)
    with pytest.raises(ConfigError):
        engine.generate("", "vanilla", 8)


def test_configs_validate_on_construction():
    with pytest.raises(ConfigError, match="gamma must be from 1 to 64, got 0"):
        SpeculativeConfig(gamma=0)
    with pytest.raises(ConfigError, match="window must be from 0 to 64, got -1"):
        OuroborosConfig(window=-1)
    with pytest.raises(ConfigError, match="top_p must be above 0.0 and at most 1.0, got 0"):
        SamplingConfig(top_p=0)
    assert SamplingConfig(temperature=0.0).greedy and not SamplingConfig(temperature=0.5).greedy


def test_new_pool_validates_its_options(engine):
    with pytest.raises(ConfigError, match="guess_set must be from 1 to 256, got 0"):
        engine.new_pool(guess_set=0)


def test_method_that_needs_a_draft_on_an_engine_without_one(models, tokenizer):
    engine = Engine(models.target("gpt2"), None, tokenizer)
    for method in ("speculative", "ouroboros"):
        with pytest.raises(ConfigError, match=f"method '{method}' needs a draft model"):
            engine.stream("def f():", method, 8)
    result = engine.generate("def f():", "vanilla", 3)
    assert len(result.token_ids) == 3


def test_check_vocabularies(tokenizer):
    check_vocabularies(tokenizer, tokenizer, "target-a", "draft-a")  # the same vocabulary passes
    other = train_tokenizer(
        ["def other(x):\n    return x * 2\n" * 20, "class Spam:\n    pass\n" * 20], 300
    )
    with pytest.raises(LoadError) as err:
        check_vocabularies(tokenizer, other, "big/target", "small/draft")
    message = str(err.value)
    assert "draft small/draft and target big/target have different vocabularies" in message
    assert f"({len(other)} vs {len(tokenizer)} tokens)" in message


def test_check_vocabularies_same_size_different_tokens(tokenizer):
    docs_a = ["alpha beta gamma delta\n" * 50]
    docs_b = ["one two three four five\n" * 50]
    a, b = train_tokenizer(docs_a, 270), train_tokenizer(docs_b, 270)
    assert len(a) == len(b) and a.get_vocab() != b.get_vocab()
    with pytest.raises(LoadError, match="different vocabularies"):
        check_vocabularies(a, b, "a", "b")
