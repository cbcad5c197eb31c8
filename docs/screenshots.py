"""Screenshots of what a first-time viewer sees, at a laptop's 1400x900 and a phone's 390x844: the
first view, mid-race (once Ouroboros has 24 tokens, where Run scrolled the page to) and after the
race, in docs/views/.

    PORT=7861 python3 app.py &                    # the demo, on the embedded pair
    python3 docs/screenshots.py http://127.0.0.1:7861/

Playwright drives Debian's Chromium (/usr/bin/chromium); each size is a fresh visitor running the
first example.
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

VIEWS = Path(__file__).resolve().parent / "views"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SIZES = {"laptop": (1400, 900), "phone": (390, 844)}
MID_RACE_TOKENS = 24  # mid-race: once the Ouroboros lane has this many tokens
RACE_TIMEOUT_MS = 300_000


def shoot(browser, url: str, size: str) -> list[Path]:
    width, height = SIZES[size]
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url)
    page.locator("#run").wait_for()
    page.locator("#prompt-room").get_by_text("tokens the model can read").wait_for(
        timeout=RACE_TIMEOUT_MS
    )
    shots = [
        VIEWS / f"{size}-first.png",
        VIEWS / f"{size}-mid-race.png",
        VIEWS / f"{size}-after-race.png",
    ]
    page.screenshot(path=str(shots[0]))
    page.locator("#run").click()
    page.wait_for_function(
        "n => { const m = /(\\d+) tokens/.exec(document.querySelector('#stats-ouroboros')"
        "?.innerText || ''); return m && +m[1] >= n; }",
        arg=MID_RACE_TOKENS,
        timeout=RACE_TIMEOUT_MS,
    )
    page.screenshot(path=str(shots[1]))
    page.locator("#badge .badge").wait_for(timeout=RACE_TIMEOUT_MS)
    page.wait_for_timeout(500)
    page.screenshot(path=str(shots[2]))
    page.close()
    return shots


def main(url: str) -> None:
    VIEWS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True, args=ARGS
        )
        for size in SIZES:
            for path in shoot(browser, url, size):
                print(path.relative_to(VIEWS.parent.parent))
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:7860/")
