"""The page while the pair loads, in Chromium: `python app.py` serves at once, shows each stage of
loading a pair from a Hub cache laid out here (huggingface_hub's real offline path, slowed by
tests/slow_load), lets Run wait, then races; and a pair that cannot load gives its sentence on the
page while the server goes on answering."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest

from app_server import ROOT, AppServer
from pairs import lay_out_hub_cache
from test_browser import CODE_PROMPT, browser, finished_badge, open_context, open_page, start_race  # noqa: F401

sync_api = pytest.importorskip("playwright.sync_api")
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
# per fetch and per model load: long enough to see each stage from a 0.5 s poll on a busy machine
DELAY_S = 4.0


def started(extra_env: dict) -> AppServer:
    server = AppServer(extra_env)
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture(scope="module")
def slow_hub_app(tmp_path_factory):
    cache = tmp_path_factory.mktemp("hub")
    for role in ("target", "draft"):
        lay_out_hub_cache(cache, f"ouroboros-test/demo-{role}", ROOT / "assets" / "models" / role)
    server = started(
        {
            "HF_HUB_CACHE": str(cache),
            "OUROBOROS_TARGET": "ouroboros-test/demo-target",
            "OUROBOROS_DRAFT": "ouroboros-test/demo-draft",
            "OUROBOROS_DEVICE": "cpu",
            "OUROBOROS_TEST_LOAD_DELAY_S": str(DELAY_S),
            "PYTHONPATH": f"{ROOT / 'tests' / 'slow_load'}:{ROOT}",
        }
    )
    yield server
    server.stop()


def seen_stages(page, until: str, timeout_s: float) -> list[str]:
    """The load status's texts as the page shows them, polled until one holds `until` or it
    disappears."""
    seen, deadline = [], time.monotonic() + timeout_s
    status = page.locator("#load-status")
    while time.monotonic() < deadline:
        text = status.inner_text() if status.count() else ""
        if text and (not seen or seen[-1] != text):
            seen.append(text)
        if until in text or (seen and not text):
            return seen
        time.sleep(0.1)
    return seen


def test_the_page_shows_each_loading_stage_and_run_waits_for_the_pair(browser, slow_hub_app):
    context = open_context(browser, 1400, 900)
    try:
        served = time.monotonic()
        page = open_page(context, slow_hub_app.url)  # served while the pair loads behind it
        # A second visitor presses Run on an empty prompt while the pair loads: refused once it is
        # ready, and the message stays (no loading tick comes after the race's check to wipe it).
        refused = open_page(context, slow_hub_app.url)
        refused.locator("#prompt textarea").fill("  \n ")
        refused.locator("#run").click()
        downloading = seen_stages(page, "Downloading ouroboros-test/demo-draft", 60)
        assert any(
            "Getting the model pair ready" in text
            and "Downloading ouroboros-test/demo-target" in text
            and "files" in text
            for text in downloading
        ), downloading
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "loading.png"))
        # pressed while the pair still loads: the race waits for it
        start_race(page, CODE_PROMPT, 16)
        loading = seen_stages(page, "Loading the draft", 60)
        assert any(
            "Loading the target onto cpu in float32" in text for text in downloading + loading
        ), loading
        sync_api.expect(page.locator("#badge")).to_contain_text("Getting the model pair ready")
        assert finished_badge(page).startswith("Identical outputs: 16 tokens")
        # gone once the pair is ready
        sync_api.expect(page.locator("#load-status")).to_have_text("")
        sync_api.expect(page.locator("#pair")).to_contain_text("Running on cpu in float32")
        assert time.monotonic() - served > 3 * DELAY_S  # the race waited for the whole load
        message = refused.locator("#prompt").get_by_text("Prompt is empty")
        sync_api.expect(message).to_have_count(1)
        sync_api.expect(refused.locator("#load-status")).to_have_text("")
        refused.wait_for_timeout(1500)  # three ticks' worth
        assert message.count() == 1
        assert page.errors == [] and refused.errors == []
    finally:
        context.close()
    log = slow_hub_app.log_text()
    stages = [line.split("model pair: ")[1] for line in log.splitlines() if "model pair: " in line]
    # The log: one line per step, the download's counts not repeated.
    assert [stage.split(" (")[0] for stage in stages[:-1]] == [
        "Fetching ouroboros-test/demo-target from the Hub",
        "Fetching ouroboros-test/demo-draft from the Hub",
        "Loading the target onto cpu in float32",
        "Loading the draft onto cpu in float32",
        "Warming up",
        "Timing a short race at each thread count",
    ], stages
    assert stages[-1].startswith("ready in "), stages


@pytest.fixture(scope="module")
def failing_app():
    server = started({"OUROBOROS_PRESET": "qwen-coder-7", "OUROBOROS_THREADS": "1"})
    yield server
    server.stop()


def test_a_pair_that_cannot_load_says_what_to_set_and_the_server_keeps_serving(
    browser, failing_app
):
    sentence = (
        "The model pair could not be loaded: OUROBOROS_PRESET='qwen-coder-7' is not a preset: "
        "set it to one of smollm2, demo, qwen-coder-7b"
    )
    context = open_context(browser, 1400, 900)
    try:
        page = open_page(context, failing_app.url)
        sync_api.expect(page.locator("#load-status")).to_contain_text(sentence, timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / "load-failed.png"))
        start_race(page, CODE_PROMPT, 8)
        sync_api.expect(page.locator(".toast-body").first).to_contain_text(
            "is not a preset", timeout=30_000
        )
        assert page.errors == []
    finally:
        context.close()
    with urllib.request.urlopen(failing_app.url, timeout=10) as response:  # still serving
        assert response.status == 200
    assert failing_app.process.poll() is None
    log = failing_app.log_text()
    assert "model pair failed to load: " + sentence in log and "Traceback" not in log
    # the start-up line says the count and its source
    assert "torch threads: 1 (OUROBOROS_THREADS)" in log
