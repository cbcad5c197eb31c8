"""Small faults of the page, in Chromium against the launched app: Replay is off from the moment Run
is pressed until that race is over; the legend names only the sources a race can show; a token count
out of range is refused with the API's own sentence, never clamped; on a phone the two settings
panels stack."""

from __future__ import annotations

import time

import pytest
from gradio_client.exceptions import ValidationError

from app_server import app_server  # noqa: F401  (the fixture)
from pace import scaled
from test_browser import (
    CODE_PROMPT,
    finished_badge,
    open_context,
    open_page,
    set_slider,
    start_race,
    sync_api,
)
from test_browser import browser, context, page  # noqa: F401  (the fixtures)
from test_clicks import log_length, races_logged

BUSY = {"PROCESSING", "ITERATING", "PROGRESS"}  # a job that holds the device
# Where the Ouroboros parameters, the sampling panel and the row that holds them stand, read in one
# go.
PANELS = """() => ['#knobs', '#sampling', '#settings'].map(selector => {
  const r = document.querySelector(selector).getBoundingClientRect();
  return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, width: r.width}; })"""


def hold_the_device(app_server):
    """A long API race that holds the device (cancel it to let the next race start), once it has
    started."""
    job = app_server.client().submit(CODE_PROMPT, 512, api_name="/race")
    deadline = time.monotonic() + 60
    while job.status().code.name not in BUSY:
        assert time.monotonic() < deadline, f"the API race never started: {job.status().code.name}"
        time.sleep(0.05)
    return job


def test_replay_is_off_from_the_moment_run_is_pressed_until_the_race_ends(page, app_server):
    start_race(page, CODE_PROMPT, 8)
    finished_badge(page)
    replay = page.locator("#replay")
    sync_api.expect(replay).to_be_enabled()
    busy = hold_the_device(app_server)
    try:
        page.locator("#run").click()
        # While the race still waits for the device (Gradio's tracker shows its place), Replay is
        # already off: a Replay pressed now would stop the race before it began.
        sync_api.expect(page.locator("#race-status .progress-text")).to_be_visible()
        assert replay.is_disabled(), "Replay is still enabled while the new race waits in the queue"
        assert page.locator("#lane-ouroboros .cursor").count() == 0, (
            "the race began: this proves nothing"
        )
    finally:
        busy.cancel()
    assert "Identical outputs: 8 tokens" in finished_badge(page)
    sync_api.expect(replay).to_be_enabled()  # the race is over: it can be replayed
    # A Run refused before the queue leaves the last race to replay.
    page.locator("#prompt textarea").fill("   ")
    page.locator("#run").click()
    sync_api.expect(page.locator("#prompt")).to_contain_text("Prompt is empty")
    sync_api.expect(replay).to_be_enabled()
    assert page.errors == []


def loaded(page) -> None:
    """Until the page's load has set what depends on the pair (its knobs, its legend): while the
    pair loads, a tick every half second updates the page, which wipes a message beside an
    input."""
    sync_api.expect(page.locator("#prompt-room")).to_contain_text("the model can read")


def legend(page) -> str:
    return page.locator(".legend").inner_text()


def test_the_legend_names_only_the_sources_the_race_can_show(page):
    # the knobs and the legend at the pair's settings: a knob moved before would be set back
    loaded(page)
    # The tiny pair verifies one pool phrase per step and has no lookahead window: the pool is in
    # play, rarely.
    sync_api.expect(page.locator(".legend")).to_contain_text(
        "pool phrase (rare", timeout=scaled(30) * 1000
    )
    page.get_by_text("Ouroboros parameters").click()
    # the default pair's setting (with no draft candidates): no pool read
    set_slider(page, "branches k", 0)
    start_race(page, CODE_PROMPT, 8)
    finished_badge(page)
    assert "pool phrase" not in legend(page) and page.locator(".legend .tok-pool").count() == 0, (
        legend(page)
    )
    for kept in ("accepted from the draft model", "accepted by lookup", "the target's own token"):
        assert kept in legend(page), legend(page)
    assert page.errors == []  # the other settings' legends: tests/test_render.py


def test_an_out_of_range_token_count_is_refused_like_the_api_does(page, app_server):
    client, since = app_server.client(), log_length(app_server)
    loaded(page)
    page.locator("#prompt textarea").fill(CODE_PROMPT)
    box = page.get_by_label("number input for Max new tokens")
    for typed in ("0", "-1", "513", "9999"):
        with pytest.raises(ValidationError) as api:
            client.predict(CODE_PROMPT, int(typed), api_name="/race")
        sentence = f"Max new tokens must be a whole number from 1 to 512, got {typed}."
        assert sentence in str(api.value)
        box.fill(typed)
        box.press("Enter")
        page.locator("#run").click()
        sync_api.expect(page.locator("#max-new")).to_contain_text(
            sentence, timeout=scaled(30) * 1000
        )
        # what was typed stands, beside the sentence that refuses it
        assert box.input_value() == typed
    page.wait_for_timeout(500)
    assert page.locator("#badge .badge").count() == 0 and races_logged(app_server, since) == []
    set_slider(page, "Max new tokens", 8)  # a count in range runs, and the sentence goes
    page.locator("#run").click()
    assert "Identical outputs: 8 tokens" in finished_badge(page)
    sync_api.expect(page.locator("#max-new")).not_to_contain_text("must be a whole number")
    assert page.errors == []


@pytest.mark.parametrize("width, height", [(390, 844), (1400, 900)], ids=["phone", "laptop"])
def test_the_settings_panels_stack_on_a_phone_and_sit_side_by_side_on_a_laptop(
    browser,
    app_server,
    width,
    height,
):
    sized = open_context(browser, width, height)
    try:
        page = open_page(sized, app_server.url)
        loaded(page)  # the page drawn in full (a scrollbar that comes later narrows everything)
        knobs, sampling, row = page.evaluate(PANELS)
        if width < 640:  # one under the other, each the row's full width, its title on one line
            assert sampling["top"] >= knobs["bottom"], (knobs, sampling)
            assert min(knobs["width"], sampling["width"]) >= row["width"] - 1, (
                knobs,
                sampling,
                row,
            )
            titles = page.locator("#settings button.label-wrap span:first-child")
            line = titles.first.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)")
            heights = titles.evaluate_all(
                "spans => spans.map(s => s.getBoundingClientRect().height)"
            )
            assert len(heights) == 2 and max(heights) < 1.5 * line, (heights, line)
        else:  # side by side, half the row each, as before
            assert (
                abs(knobs["top"] - sampling["top"]) <= 1 and knobs["right"] <= sampling["left"]
            ), (knobs, sampling)
            assert (
                abs(knobs["width"] - sampling["width"]) <= 1
                and knobs["width"] > row["width"] / 2 - 20
            )
        assert page.errors == []
    finally:
        sized.close()
