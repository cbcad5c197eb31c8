"""The showcase in headless Chromium, at a laptop's 1400x900 and a phone's 390x844: what a
first-time viewer sees, lanes that follow their text, replay, the step inspector, sampling, the
phone layout and the chart."""

from __future__ import annotations

import re
import time

import pytest

from app_server import app_server  # noqa: F401  (the fixture)
from test_browser import (
    CODE_PROMPT,
    finished_badge,
    is_race_join,
    open_context,
    set_slider,
    start_race,
    sync_api,
)

# browser and page: test_browser's fixtures; page opens in this module's context (the two sizes)
from test_browser import browser, page  # noqa: F401

SIZES = {"laptop": (1400, 900), "phone": (390, 844)}
# A prompt the embedded pair runs on in a loop: a long race fills the lanes past their height.
LOOP_PROMPT = (
    "def get_a(self):\n    return self.a\n\ndef get_b(self):\n    return self.b\n\n"
    "def get_c(self):\n"
)
# Where a lane's text box stands: its top, its scroll position and heights.
BOX = """id => { const box = document.querySelector(`#${id} .lane-text`); if (!box) return null;
  const r = box.getBoundingClientRect();
  return {top: r.top, left: r.left, width: r.width, scroll: box.scrollTop, height: box.scrollHeight,
          client: box.clientHeight, running: !!box.querySelector('.cursor')}; }"""


@pytest.fixture(params=list(SIZES), scope="module")
def size(request):
    return request.param


@pytest.fixture(scope="module")
def context(browser, size):
    context = open_context(browser, *SIZES[size])
    yield context
    context.close()


def run_to_the_end(page) -> str:
    """Press Run and wait for that very race to finish (an earlier race's badge may still be on the
    page)."""
    with page.expect_response(lambda response: is_race_join(response.request)) as response:
        page.locator("#run").click()
    event = response.value.json()["event_id"]
    page.wait_for_function(
        "id => window.__queue_messages.some(([msg, event]) => msg === 'process_completed' "
        "&& event === id)",
        arg=event,
    )
    # The last message carries the final outputs; the page draws them on its next frames.
    page.evaluate(
        "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"
    )
    page.wait_for_timeout(200)
    return finished_badge(page)


def test_first_ten_seconds(page, size):
    """A prompt is in place, Run works at once, the examples are labelled by what they show."""
    prompt = page.locator("#prompt textarea").input_value()
    assert prompt.startswith("import os") and "def list_python_files" in prompt
    examples = page.get_by_role(
        "button", name=re.compile("Free-form code: the draft model writes most of it")
    )
    assert examples.count() == 1
    if size == "laptop":  # in view without scrolling, beside the prompt's Run button
        assert examples.bounding_box()["y"] + examples.bounding_box()["height"] <= 900
        assert page.locator("#run").bounding_box()["y"] < 900
    assert page.get_by_text("A degenerate loop: big speedup, least meaningful").count() == 1
    page.locator("#run").click()
    assert "Identical" in finished_badge(page)
    assert page.errors == []


def test_lanes_follow_their_text_until_the_viewer_scrolls_up(page, size):
    start_race(page, LOOP_PROMPT, 384)
    # Wait until both lanes overflow their boxes while still running.
    page.wait_for_function("""() => ['lane-vanilla', 'lane-ouroboros'].every(id => {
        const box = document.querySelector(`#${id} .lane-text`);
        return box && box.scrollHeight > box.clientHeight + 40; })""")
    vanilla, ouroboros = (page.evaluate(BOX, lane) for lane in ("lane-vanilla", "lane-ouroboros"))
    for box in (vanilla, ouroboros):
        assert box["height"] - box["scroll"] - box["client"] <= 30, box  # at the bottom: following
    # Side by side at both sizes (a phone too: stacked lanes no longer read as a race), aligned
    # while running.
    assert abs(vanilla["top"] - ouroboros["top"]) <= 2 and vanilla["width"] == ouroboros["width"]
    assert vanilla["left"] + vanilla["width"] <= ouroboros["left"]
    # The viewer scrolls the vanilla lane (the slower one, still running) up: it stays where they
    # left it. An update lands in the same task as the scroll, before the browser sends its scroll
    # event (a busy machine does this): the empty text node stands for Gradio patching the lane, and
    # must not undo the viewer's scroll.
    page.locator("#lane-vanilla .lane-text").evaluate(
        "box => { box.scrollTop = 0; box.appendChild(document.createTextNode('')); }"
    )
    page.wait_for_timeout(300)
    grew = page.evaluate(BOX, "lane-vanilla")["height"]
    page.wait_for_function(
        "grew => document.querySelector('#lane-vanilla .lane-text').scrollHeight > grew + 30",
        arg=grew,
    )
    box = page.evaluate(BOX, "lane-vanilla")
    assert box["scroll"] <= 5, box
    finished_badge(page)
    # The same text wraps the same way in both lanes: equal heights, to the pixel.
    vanilla, ouroboros = (page.evaluate(BOX, lane) for lane in ("lane-vanilla", "lane-ouroboros"))
    assert (
        vanilla["height"] == ouroboros["height"]
        and not vanilla["running"]
        and not ouroboros["running"]
    )
    assert page.errors == []


def test_replay_plays_the_recorded_race_at_its_speed_and_the_inspector_shows_steps(page, size):
    start_race(page, CODE_PROMPT, 64)
    finished_badge(page)
    # an answer that does not repeat itself gets no loop note
    assert page.locator("#badge .loop-note").count() == 0
    text = page.locator("#lane-ouroboros .lane-text").inner_text()
    seconds = max(
        float(re.search(r"([\d.]+) s", page.locator(f"#stats-{lane}").inner_text()).group(1))
        for lane in ("vanilla", "ouroboros")
    )
    # The inspector opens on the step that landed the most tokens; its walked path is what the lane
    # got there.
    head = page.locator("#inspector-view .step-head").inner_text()
    landed, count = re.search(r"(\d+) tokens? landed", head), re.search(r"Step \d+ of (\d+)", head)
    assert landed and count, head
    walked = page.locator("#inspector-view .walk").first.locator(".chip")
    assert walked.count() == int(landed.group(1))
    assert page.locator("#inspector-view table.tree tr.trunk").count() == 1
    # Another step, picked with the keyboard on the slider.
    slider = page.locator("#step input[type=range]")
    slider.focus()
    slider.press("Home")
    sync_api.expect(page.locator("#inspector-view .step-head")).to_contain_text(
        f"Step 1 of {count.group(1)}"
    )

    page.get_by_text("1/4", exact=True).click()
    started = time.monotonic()
    page.locator("#replay").click()
    # replaying: the lanes run again
    page.locator("#lane-ouroboros .cursor").wait_for(state="attached")
    assert page.locator("#badge .badge").count() == 0
    shown = len(page.locator("#lane-ouroboros .lane-text").inner_text())
    assert shown < len(text)
    sync_api.expect(page.locator("#badge .badge")).to_contain_text("Identical")
    took = time.monotonic() - started
    # a quarter of the race's speed, true to its clock
    assert took >= 4 * seconds * 0.8, (took, seconds)
    assert page.locator("#lane-ouroboros .lane-text").inner_text() == text
    assert page.errors == []


def test_sampled_race_is_identical_in_both_lanes(page, size):
    start_race(page, CODE_PROMPT, 48)
    finished_badge(page)
    greedy = page.locator("#lane-vanilla .lane-text").inner_text()
    page.locator("#sampling").get_by_text("Sampling (greedy by default)").click()
    set_slider(page, "Temperature", 0.8)
    seed = page.locator("#seed input")
    seed.fill("7")
    seed.press("Tab")
    sync_api.expect(seed).to_have_value("7")
    assert "Identical" in run_to_the_end(page)
    sampled = page.locator("#lane-vanilla .lane-text").inner_text()
    assert sampled != greedy
    assert page.locator("#lane-ouroboros .lane-text").inner_text() == sampled
    run_to_the_end(page)  # the same seed again: the same text
    assert page.locator("#lane-ouroboros .lane-text").inner_text() == sampled
    assert page.errors == []


def test_phone_and_laptop_layout_never_wrap_a_number_and_chart_labels_never_overlap(page, size):
    page.get_by_text("Add a classic speculative decoding lane").click()
    start_race(page, LOOP_PROMPT, 160)
    finished_badge(page)
    # the tiny pair's loop: the page says the speedup comes from the answer repeating itself
    sync_api.expect(page.locator("#badge .loop-note")).to_contain_text("The answer repeats itself")
    # Each lane's stats sit right under its own lane, three lanes included.
    for lane in ("vanilla", "ouroboros", "speculative"):
        box, stats = (page.locator(f"#{kind}-{lane}").bounding_box() for kind in ("lane", "stats"))
        assert 0 <= stats["y"] - (box["y"] + box["height"]) <= 40, (lane, box, stats)
        assert abs(stats["x"] - box["x"]) <= 2
    # Table cells keep to one line (a character-per-line table had cells hundreds of pixels tall).
    heights = page.locator("#summary td").evaluate_all(
        "cells => cells.map(c => c.getBoundingClientRect().height)"
    )
    assert heights and max(heights) < 40, heights
    # (a phone shows cards, no header row)
    assert "expected" in page.locator("#summary th").all_text_contents()
    # Ouroboros and speculative each: where its tokens came from, and its expected speedup
    # explained.
    assert page.locator("#summary .why li").count() == 4
    # The visible drawing of the chart: tick labels apart on both axes.
    labels = page.locator("#chart svg.race-chart:visible text.tick").evaluate_all(
        "labels => labels.map(t => { const r = t.getBoundingClientRect();"
        " return [t.classList.contains('x'), r.left, r.right, r.top, r.bottom]; })"
    )
    for along_x in (True, False):
        boxes = sorted(
            (label[1:] for label in labels if label[0] == along_x),
            key=lambda box: box[0] if along_x else box[2],
        )
        assert len(boxes) >= 3
        for a, b in zip(boxes, boxes[1:]):  # left, right, top, bottom
            assert (b[0] >= a[1] + 4) if along_x else (b[2] >= a[3]), (along_x, a, b)
    assert page.errors == []


def test_a_bad_input_gets_one_message_that_goes_away(page, size):
    page.locator("#prompt textarea").fill("  \n ")
    page.locator("#run").click()
    message = page.locator("#prompt").get_by_text(
        "Prompt is empty: type a request or pick an example."
    )
    sync_api.expect(message).to_have_count(1)
    page.wait_for_timeout(300)
    assert (
        page.locator(".toast-body").count() == 0
        and page.get_by_text("Error", exact=True).count() == 0
    )
    start_race(page, CODE_PROMPT, 8)
    assert "Identical" in finished_badge(page)
    sync_api.expect(message).to_have_count(0)
    # Nothing typed or pasted is cut (test_in_view: a 20,000-character paste is kept and refused in
    # tokens).
    assert page.locator("#prompt textarea").get_attribute("maxlength") is None
    assert page.errors == []
