"""Record a real race from the page as an animated GIF (docs/race.gif) and a screenshot
(docs/screenshot.png).

    PORT=7861 python3 app.py &                    # the demo, on the embedded pair
    python3 docs/record_race.py http://127.0.0.1:7861/

Playwright drives Debian's Chromium (/usr/bin/chromium) at 1400x900 and runs the first example
live. A screenshot takes ~0.2 s on two cores, too slow to follow a 2-second race, so the frames are
taken while the page replays that race at 1/4 of its speed (from its recorded events, at their true
relative timings) and each GIF frame lasts a quarter of the time it was on screen: the animation
plays at the race's own pace. Then the page, with the step inspector open on its best step, is
screenshot.
"""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

from PIL import Image
from playwright.sync_api import sync_playwright

DOCS = Path(__file__).resolve().parent
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
FRAME_EVERY_S = 0.05
REPLAY = "1/4"  # the replay speed the frames are taken at
SPEED = 0.25
WIDTH = 900  # the GIF's width in pixels
HOLD_LAST_MS = 2500  # the finished race stays on screen before the loop starts again


def region(page) -> dict:
    """The legend, the lanes, their stats and the verdict badge, as one clip rectangle on the whole
    page."""
    boxes = [page.locator(selector).bounding_box() for selector in (".legend", "#lanes", "#badge")]
    scrolled = page.evaluate("scrollY")
    top = min(b["y"] for b in boxes) + scrolled
    bottom = max(b["y"] + b["height"] for b in boxes) + scrolled + 8
    return {
        "x": boxes[1]["x"],
        "y": top - 8,
        "width": boxes[1]["width"],
        "height": max(bottom - top + 8, 200),
    }


def record(url: str) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True, args=ARGS
        )
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(url)
        page.locator("#run").wait_for()
        frames, stamps = [], []
        page.locator("#run").click()
        page.locator("#badge .badge").wait_for(timeout=180_000)
        page.get_by_text(REPLAY, exact=True).click()
        page.locator("#replay").click()
        page.locator("#lane-ouroboros .cursor").wait_for(state="attached")
        started = time.monotonic()
        while True:
            clip = region(page)
            frames.append(page.screenshot(clip=clip, full_page=True))
            stamps.append(time.monotonic() - started)
            if page.locator("#badge .badge").count():
                break
            time.sleep(FRAME_EVERY_S)
        page.wait_for_timeout(300)
        frames.append(page.screenshot(clip=region(page), full_page=True))
        stamps.append(time.monotonic() - started)
        save_gif(frames, stamps, DOCS / "race.gif")
        page.locator("#inspector").scroll_into_view_if_needed()
        page.screenshot(path=str(DOCS / "screenshot.png"), full_page=True)
        browser.close()


def save_gif(frames: list[bytes], stamps: list[float], path: Path) -> None:
    images = []
    for png in frames:
        image = Image.open(io.BytesIO(png)).convert("RGB")
        image = image.resize((WIDTH, round(image.height * WIDTH / image.width)), Image.LANCZOS)
        images.append(image)
    # Frames differ in height while the lanes grow: pad each to the tallest, on the page's white.
    height = max(image.height for image in images)
    canvas = [Image.new("RGB", (WIDTH, height), "white") for _ in images]
    for frame, image in zip(canvas, images):
        frame.paste(image, (0, 0))
    durations = [max(20, round((b - a) * SPEED * 1000)) for a, b in zip(stamps, stamps[1:])] + [
        HOLD_LAST_MS
    ]
    canvas[0].save(
        path, save_all=True, append_images=canvas[1:], duration=durations, loop=0, optimize=True
    )
    print(
        f"{path}: {len(canvas)} frames over {stamps[-1] * SPEED:.1f} s of the race, "
        f"{path.stat().st_size / 1e6:.2f} MB"
    )


if __name__ == "__main__":
    record(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:7861/")
