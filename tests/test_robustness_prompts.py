"""Hostile and odd prompts through the launched app's public API (/race), end to end: far too long,
with control characters, with a lone surrogate (only Gradio's raw HTTP API can carry one), in emoji
and CJK, with markup. Each refusal must name the limit it enforces, no traceback may reach the
caller, and the app must keep serving (and stay lossless) afterwards. The knobs, the token budget
and a cancelled race: tests/test_robustness.py, whose helpers these tests share.
"""

from __future__ import annotations

import pytest

from app_server import app_server  # noqa: F401  (the fixture)
from test_robustness import (
    CODE_PROMPT,
    RACE_TIMEOUT_S,
    assert_lossless,
    assert_serving,
    client,  # noqa: F401  (the fixture)
    race,
    raw_error,
    raw_race,
    refusal,
)

# ---------------------------------------------------------------------------------------- prompts


def test_megabyte_prompt_names_the_character_cap(client):
    message = refusal(client, "x" * 1_000_000, 8)
    assert "32,000" in message and "1,000,000" in message, message
    assert_serving(client)


@pytest.mark.parametrize(
    "control",
    ["\x00", "\x1b[31m", "\x7f", "\x0b", "\x85", "\x9b"],
    ids=["nul", "ansi-escape", "delete", "vertical-tab", "c1-next-line", "c1-csi"],
)
def test_control_character_is_named_with_its_position(client, control):
    prefix = CODE_PROMPT + "    # colour: "
    message = refusal(client, prefix + control + "red\n", 8)
    assert "control character" in message.lower(), message
    assert f"U+{ord(control[0]):04X}" in message, message
    assert f"character {len(prefix)}" in message, message
    assert_serving(client)


def test_tab_newlines_and_form_feed_are_accepted(client):
    prompt = 'import os\f\n\ndef walk(path):\r\n\t"""List the files under path."""\n\t'
    assert_lossless(race(client, prompt, 16), 16)
    assert_serving(client)


@pytest.mark.parametrize("surrogate", ["\ud800", "\udfff"], ids=["high", "low"])
def test_lone_surrogate_is_refused_without_a_traceback(client, app_server, surrogate):
    prefix = CODE_PROMPT + "    # "
    message = raw_error(app_server.url, prefix + surrogate + "\n", 8)
    assert "surrogate" in message.lower(), message
    assert f"U+{ord(surrogate):04X}" in message, message
    assert f"character {len(prefix)}" in message, message
    assert_serving(client)


def test_escaped_surrogate_pair_is_one_valid_character(client, app_server):
    # "\ud83d\ude00" in JSON is the one character U+1F600, not two lone surrogates: it must be
    # accepted.
    event, payload, stream = raw_race(app_server.url, "# \U0001f600 smile\n" + CODE_PROMPT, 8)
    assert event == "complete", stream[-2000:]
    (result,) = payload
    assert_lossless(result, 8)
    assert_serving(client)


MULTIBYTE_PROMPTS = {
    "emoji": (
        "# \U0001f40d Python \U0001f389\ndef greet(name):\n"
        '    """Say hi \U0001f44b to name \U0001f600."""\n'
        '    return "\U0001f44b " + name + " \U0001f600\U0001f600"\n\n'
        'def cheer():\n    return "'
    ),
    "cjk": (
        "# 数据处理工具\ndef 计算总和(数字列表):\n"
        '    """返回列表中所有数字的总和。"""\n    总和 = 0\n'
        "    for 数字 in 数字列表:\n        总和 += 数字\n    return 总和\n\n"
        'def 平均值(数字列表):\n    """返回'
    ),
    "zwj-combining": (
        "# family: \U0001f468\u200d\U0001f469\u200d\U0001f467, café, cafe\u0301, "
        "한국어\n"
        "def label(person):\n"
        '    return "\U0001f468\u200d\U0001f469\u200d\U0001f467 " + person\n'
    ),
}


@pytest.mark.parametrize("prompt", MULTIBYTE_PROMPTS.values(), ids=MULTIBYTE_PROMPTS.keys())
def test_multibyte_prompt_streams_prefixes_of_identical_lanes(client, prompt):
    # Multi-byte characters span several byte-level BPE tokens: in the prompt (and so in the
    # phrases Ouroboros looks up there), and in the output whenever the model emits them. A
    # streamed text must never hold half a character (nor a replacement character) that the final
    # text then replaces.
    job = client.submit(prompt, 48, None, None, None, None, api_name="/race")
    final = job.result(timeout=RACE_TIMEOUT_S)
    assert_lossless(final, 48)
    streamed = job.outputs()
    assert streamed, "nothing was streamed"
    assert streamed[-1] == final
    for update in streamed:
        for method, lane in update.items():
            done = final[method]
            assert isinstance(lane["text"], str), method
            lane["text"].encode("utf-8")
            assert done["text"].startswith(lane["text"]), (method, lane["text"], done["text"])
            assert done["token_ids"][: len(lane["token_ids"])] == lane["token_ids"], method
    assert_serving(client)


@pytest.mark.parametrize(
    "prompt",
    [
        "<script>alert(1)</script>\ndef f():\n",
        '"><img src=x onerror=alert(1)>\n<!-- {{7*7}} ${7*7} -->\ndef render(html):\n'
        '    return "<b>" + html + "</b>"\n',
    ],
    ids=["script", "attribute-and-template"],
)
def test_markup_in_the_prompt_is_plain_text_through_the_api(client, prompt):
    result = race(client, prompt, 24)
    assert_lossless(result, 24)
    for method, lane in result.items():
        # The API returns the model's text, not the page's rendering of it.
        assert "<span" not in lane["text"] and '<pre class="lane-text">' not in lane["text"], method
        assert "&lt;" not in lane["text"] and "&amp;" not in lane["text"], method
    assert_serving(client)
