"""The launched app in headless Chromium (Debian's; never downloaded): run, stop and clear as a visitor would.

Every request that leaves loopback is aborted, so the page is tested exactly as it works offline.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from app_server import app_server  # noqa: F401  (the fixture)

sync_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
HOSTILE = "<script>window.__pwned = 1</script><b>bold?</b>\n"
CODE_PROMPT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
# Generous: the suite shares two cores with a training job, and a starved page lags far behind its stream.
RACE_TIMEOUT_MS = 180_000
TOKEN_CLASSES = {"tok-draft", "tok-pool", "tok-prompt", "tok-target"}
# Tees the page's queue stream into window.__queue_messages as [msg, event_id] pairs: the server's own order of
# events, so a test can tell what the server handled while a race still waited for the device.
RECORD_QUEUE_MESSAGES = r"""
(() => {
  window.__queue_messages = [];
  const originalFetch = window.fetch.bind(window);
  window.fetch = async (...args) => {
    const response = await originalFetch(...args);
    const url = String((args[0] && args[0].url) || args[0]);
    if (url.includes("/queue/data") && response.body) {
      const reader = response.clone().body.getReader();
      const decoder = new TextDecoder();
      let pending = "";
      (async () => {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          pending += decoder.decode(value, { stream: true });
          const lines = pending.split("\n");
          pending = lines.pop();
          for (const line of lines) {
            if (!line.startsWith("data:")) continue;
            const message = JSON.parse(line.slice(5));
            window.__queue_messages.push([message.msg, message.event_id]);
          }
        }
      })().catch(() => {});  // the page aborts the stream whenever it goes idle
    }
    return response;
  };
})();
"""


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM}")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def context(browser):
    # One context for the module: its warm HTTP and code caches make each fresh page load far cheaper.
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    context.set_default_timeout(RACE_TIMEOUT_MS)
    context.add_init_script(RECORD_QUEUE_MESSAGES)
    sync_api.expect.set_options(timeout=RACE_TIMEOUT_MS)
    yield context
    context.close()


@pytest.fixture
def page(context, app_server):  # noqa: F811
    """A freshly loaded page: a new visitor session on the server."""
    page = context.new_page()
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(app_server.url)
               else route.abort())
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.goto(app_server.url, wait_until="domcontentloaded")
    page.locator("#run").wait_for()
    yield page
    page.close()


def set_max_new_tokens(page, value: int) -> None:
    box = page.get_by_label("number input for Max new tokens")
    box.fill(str(value))
    box.press("Enter")
    box.blur()
    slider = page.locator('input[type=range][aria-label="Max new tokens"]')
    if slider.count():
        sync_api.expect(slider).to_have_value(str(value))


def is_join(request) -> bool:
    return "/queue/join" in request.url


def is_race_join(request) -> bool:
    """The race's own request: the one that carries the prompt."""
    return is_join(request) and bool(json.loads(request.post_data or "{}").get("data"))


def start_race(page, prompt: str, max_new_tokens: int) -> None:
    page.locator("#prompt textarea").fill(prompt)
    set_max_new_tokens(page, max_new_tokens)
    page.locator("#run").click()


def finished_badge(page) -> str:
    badge = page.locator("#badge .badge")
    badge.wait_for(timeout=RACE_TIMEOUT_MS)
    return badge.inner_text()


def lane_tokens(page, lane: str) -> int:
    """The token count a lane's stats line reports."""
    match = re.search(r"(\d+) tokens", page.locator(f"#stats-{lane}").inner_text())
    assert match, page.locator(f"#stats-{lane}").inner_text()
    return int(match.group(1))


def save_screenshot(page, tmp_path) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    target = Path(os.environ.get("SCREENSHOT_PATH") or tmp_path / "app.png")
    target.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(target), full_page=True)
    page.screenshot(path=str(ARTIFACTS / "app.png"), full_page=True)


def test_race_renders_coloured_identical_lanes_and_never_runs_prompt_html(page, tmp_path):
    start_race(page, HOSTILE + CODE_PROMPT, 48)
    badge = finished_badge(page)
    save_screenshot(page, tmp_path)

    assert "Identical" in badge
    spans = page.locator("#lane-ouroboros .tok")
    assert spans.count() > 0
    for classes in spans.evaluate_all("spans => spans.map(s => s.className)"):
        assert TOKEN_CLASSES & set(classes.split()), classes
    assert page.locator("#lane-ouroboros .cursor").count() == 0  # the lane finished
    assert page.locator(".legend").is_visible()
    for lane in ("vanilla", "ouroboros"):
        assert "tok/s" in page.locator(f"#stats-{lane}").inner_text()
    assert 1 <= lane_tokens(page, "vanilla") == lane_tokens(page, "ouroboros") <= 48
    assert (page.locator("#lane-vanilla").inner_text().strip()
            == page.locator("#lane-ouroboros").inner_text().strip())
    # The prompt stays text: nothing from it runs or renders as markup anywhere.
    assert page.evaluate("() => typeof window.__pwned") == "undefined"
    lanes = page.locator("#lane-vanilla, #lane-ouroboros")
    assert lanes.locator("b, script").count() == 0
    assert page.locator("#prompt textarea").input_value().startswith(HOSTILE)
    assert page.errors == []


def test_stop_ends_a_long_race_and_the_page_runs_again(page):
    # On a busy machine the page lags far behind the stream it renders, and every locator step waits its turn
    # on the page's main thread: by the time a locator-driven click lands the race is over. A raw mouse click
    # at a spot measured beforehand goes in as input, as a visitor's would.
    stop = page.locator("#stop").bounding_box()
    start_race(page, CODE_PROMPT, 512)
    page.locator("#lane-ouroboros .cursor").wait_for()  # the run is streaming, so it is under way on the server
    page.mouse.click(stop["x"] + stop["width"] / 2, stop["y"] + stop["height"] / 2)
    badge = finished_badge(page)

    assert "Stopped" in badge
    assert lane_tokens(page, "vanilla") < 512  # the slower lane, still running when Stop went out

    start_race(page, CODE_PROMPT, 8)
    sync_api.expect(page.locator("#badge .badge")).to_contain_text("Identical")
    assert page.errors == []


def test_stop_while_waiting_in_the_queue_is_not_lost(page, app_server):  # noqa: F811
    page.locator("#prompt textarea").fill(CODE_PROMPT)
    set_max_new_tokens(page, 512)
    run, stop = (page.locator(selector).bounding_box() for selector in ("#run", "#stop"))
    # Other callers hold the one device, so this visitor's Run waits in the queue. Plenty of them, as a starved
    # page can take seconds per click; those still waiting are cancelled once the Stop has been handled.
    client = app_server.client()
    busy = [client.submit(CODE_PROMPT, 512, api_name="/race") for _ in range(8)]
    deadline = time.monotonic() + 60
    while not any(job.status().code.name == "PROCESSING" for job in busy):
        assert time.monotonic() < deadline, "the busy requests never started"
        time.sleep(0.05)
    event_ids = {}
    # Stop only once the race itself has joined the queue (after whatever Run does first).
    for name, button, joined in (("race", run, is_race_join), ("stop", stop, is_join)):
        with page.expect_response(lambda response: joined(response.request)) as response:
            page.mouse.click(button["x"] + button["width"] / 2, button["y"] + button["height"] / 2)
        event_ids[name] = response.value.json()["event_id"]
    page.wait_for_function("id => window.__queue_messages.some(([msg, event]) => msg === 'process_completed' "
                           "&& event === id)", arg=event_ids["stop"])
    messages = page.evaluate("window.__queue_messages")
    for job in busy:
        job.cancel()
    if ["process_starts", event_ids["race"]] in messages:
        pytest.skip("the device came free before the Stop was handled, so the race was not waiting in the queue")

    # The race starts with its stop flag set, so it ends before its first step: any token means Stop was lost.
    page.wait_for_function("""() => document.querySelector('#badge .badge')
        || /[1-9][0-9]* tokens/.test(document.querySelector('#stats-vanilla').innerText)""")
    stats = page.locator("#stats-vanilla").inner_text()
    assert page.locator("#badge .badge").count(), f"Stop pressed while the race was queued was ignored: {stats}"
    assert "Stopped" in finished_badge(page), f"Stop pressed while the race was queued was ignored: {stats}"

    start_race(page, CODE_PROMPT, 8)
    sync_api.expect(page.locator("#badge .badge")).to_contain_text("Identical")
    assert page.errors == []


def test_clear_empties_the_lanes(page):
    start_race(page, CODE_PROMPT, 8)
    finished_badge(page)
    assert page.locator("#lane-ouroboros .tok").count() > 0

    page.get_by_role("button", name="Clear").click()
    for element in ("lane-vanilla", "lane-ouroboros", "stats-vanilla", "stats-ouroboros", "badge"):
        sync_api.expect(page.locator(f"#{element} .prose")).to_have_text("")
    sync_api.expect(page.locator("#prompt textarea")).to_have_value("")
    assert page.errors == []


RACE_LINE = re.compile(r"race (\S+): vanilla (\d+) tokens (\S+) [\d.]+ s, ouroboros (\d+) tokens (\S+) [\d.]+ s")


def test_closing_the_tab_mid_race_frees_the_device(browser, page, app_server):  # noqa: F811
    """A visitor who closes the tab while their race runs stops it, so the next visitor does not wait for a race
    nobody watches. Two things can end it: Gradio closing the handler when the page's queue stream drops (the
    race's log line then says "unfinished"), or demo.unload's forget_session setting the session's stop flag
    (then "cancelled"); whichever comes first, the race must end well short of its 512 tokens."""
    has_log = hasattr(app_server, "log_text")
    before = set(app_server.log_text().splitlines()) if has_log else set()
    # The leaving visitor gets a context of their own: closing it is closing the tab, connections and all.
    leaving_context = browser.new_context(viewport={"width": 1280, "height": 1000})
    try:
        leaving_context.set_default_timeout(RACE_TIMEOUT_MS)
        leaving = leaving_context.new_page()
        leaving.route("**/*", lambda route: route.continue_() if route.request.url.startswith(app_server.url)
                      else route.abort())
        leaving.goto(app_server.url, wait_until="domcontentloaded")
        leaving.locator("#run").wait_for()
        start_race(leaving, CODE_PROMPT, 512)
        # Tokens in the lane: the race is under way on the server ("attached": the first may be a bare newline).
        leaving.locator("#lane-ouroboros .tok").first.wait_for(state="attached")
    finally:
        leaving_context.close()

    start_race(page, CODE_PROMPT, 8)
    sync_api.expect(page.locator("#badge .badge")).to_contain_text("Identical")
    assert page.errors == []
    if not has_log:
        return

    # The closed tab's race ended early: its line ("race <session>: ...") has a lane cut short.
    def stopped_races():
        lines = [RACE_LINE.search(line) for line in app_server.log_text().splitlines() if line not in before]
        return [match for match in lines if match and match.group(1) != "api"
                and {match.group(3), match.group(5)} & {"cancelled", "unfinished"}]

    deadline = time.monotonic() + 30
    while not stopped_races() and time.monotonic() < deadline:
        time.sleep(0.5)
    stopped = stopped_races()
    assert stopped, f"the closed tab's race was not stopped:\n{app_server.log_text()}"
    assert all(int(match.group(2)) < 512 for match in stopped), [match.group(0) for match in stopped]
