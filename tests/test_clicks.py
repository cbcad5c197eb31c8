"""Every click answers, in Chromium: Run during a race restarts it with the new prompt, Stop then
Run at once never loses the Stop, and Clear forgets the race so Replay has nothing to bring back."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from app_server import app_server  # noqa: F401  (the fixture)
from test_browser import CODE_PROMPT, finished_badge, set_max_new_tokens, start_race
from test_browser import browser, context, page  # noqa: F401  (the fixtures)

sync_api = pytest.importorskip("playwright.sync_api")
OTHER_PROMPT = 'def count_words(text):\n    """Count the words in text."""\n'
RACE_LINE = re.compile(
    r"race (\S+): vanilla (\d+) tokens (\S+) [\d.]+ s, ouroboros (\d+) tokens (\S+)"
)


def click_at(page, box) -> None:
    """A raw click at a spot measured beforehand: it goes in as input even while the page is busy
    rendering."""
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)


def boxes(page, *selectors):
    return [page.locator(selector).bounding_box() for selector in selectors]


def whole_log(app_server) -> list[str]:
    """Every line the launched app has logged (log_text() keeps only the tail, which shifts as the
    log grows)."""
    if not hasattr(app_server, "log"):
        pytest.skip("the app at $OUROBOROS_APP_URL has no log to read")
    return Path(app_server.log.name).read_text(errors="replace").splitlines()


def races_logged(app_server, since: int) -> list[tuple]:
    """(visitor, vanilla tokens, how vanilla ended) of each page race the server logged after
    `since` lines."""
    return [
        (m[1], int(m[2]), m[3])
        for m in map(RACE_LINE.search, whole_log(app_server)[since:])
        if m and m[1] != "api"
    ]


def log_length(app_server) -> int:
    return len(whole_log(app_server))


def test_run_during_a_race_restarts_it_with_the_new_prompt(page, app_server):
    since = log_length(app_server)
    start_race(page, CODE_PROMPT, 512)
    page.locator("#lane-ouroboros .cursor").wait_for()  # the first race streams
    # back up to the prompt, as a visitor would, to change it
    page.evaluate("window.scrollTo(0, 0)")
    page.locator("#prompt textarea").fill(OTHER_PROMPT)
    set_max_new_tokens(page, 8)
    (run,) = boxes(page, "#run")
    click_at(page, run)
    sync_api.expect(page.locator("#badge .badge")).to_contain_text("Identical outputs: 8 tokens")
    races = races_logged(app_server, since)  # the first ended before the second began
    # stopped, not run out
    assert len(races) == 2 and races[0][1] < 512 and races[0][2] == "cancelled", races
    assert races[1][1:] == (8, "max_new_tokens"), races
    assert page.errors == []


def test_stop_then_run_at_once_never_loses_the_stop(page, app_server):
    start_race(page, CODE_PROMPT, 512)
    page.locator("#lane-ouroboros .cursor").wait_for()
    # Run and Stop side by side again, as a visitor scrolled back up
    page.evaluate("window.scrollTo(0, 0)")
    run, stop = boxes(page, "#run", "#stop")
    since = log_length(app_server)
    click_at(page, stop)
    click_at(page, run)  # within a few milliseconds of the Stop
    deadline = time.monotonic() + 120
    while len(races_logged(app_server, since)) < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    first = races_logged(app_server, since)
    # the Stop ended the old race
    assert first and first[0][2] == "cancelled" and first[0][1] < 512, first
    # The new race's first frame clears the old "Stopped." badge and opens its lanes with a cursor
    # (a busy page may still be drawing the old race's last frames, cursor included, before that).
    sync_api.expect(page.locator("#badge .badge")).to_have_count(0)
    page.locator("#lane-ouroboros .cursor").wait_for()  # and the new one runs
    # Run scrolled the race into view, with this Stop beside it
    click_at(page, *boxes(page, "#stop-near"))
    assert "Stopped" in finished_badge(page)
    deadline = time.monotonic() + 120
    while len(races_logged(app_server, since)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [how for _, _, how in races_logged(app_server, since)] == ["cancelled", "cancelled"]
    assert page.errors == []


def test_clear_forgets_the_race_so_replay_has_nothing_to_bring_back(page):
    start_race(page, CODE_PROMPT, 8)
    finished_badge(page)
    replay = page.locator("#replay")
    sync_api.expect(replay).to_be_enabled()
    page.locator("#clear").click()
    sync_api.expect(replay).to_be_disabled()
    sync_api.expect(page.locator("#lane-vanilla .prose")).to_have_text("")
    assert page.errors == []
