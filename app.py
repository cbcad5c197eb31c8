"""Ouroboros race: vanilla decoding and Ouroboros side by side, from one engine on one device.

This file makes the app's shared objects and wires the race's events on the page ui/layout.py lays
out (it wires the page's own). The page's handlers live in ui/handlers.py, a race on the device and
/race's stream in ui/racing.py, the request checks in ui/guard.py, and the engine in
ouroboros_core/.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import gradio as gr
import torch

from ouroboros_core.cpu import BusyWatch
from ui.calibration import Calibration
from ui.guard import UNEXPECTED  # noqa: F401  (the tests' expected message)
from ui.guard import Limits, check_race, race_validator, room_line, shielded
from ui.handlers import LoadingView, RaceHandlers
from ui.layout import AT_ONCE, build_page, wire_page
from ui.loading import PairLoader, load_pair, start_threads
from ui.racing import Racing
from ui.sessions import Sessions
from ui.threads import DeviceThread, GradioLoops, quiet_when_idle

ASSETS = Path(__file__).resolve().parent / "assets"
LIMITS = Limits.from_env()  # the host's caps on what a visitor may ask for
MAX_NEW_TOKENS = LIMITS.max_new_tokens
QUEUE_SIZE = int(os.environ.get("OUROBOROS_QUEUE_SIZE", "16"))
# Phrases one visitor's warm pool may hold (~0.4 kB each): with at most 256 sessions, pools stay
# under ~0.5 GB.
SESSION_POOL_SIZE = int(os.environ.get("OUROBOROS_SESSION_POOL_SIZE", "4096"))
log = logging.getLogger("ouroboros.app")
GRADIO_LOOPS = GradioLoops()  # building the page, queue() and launch() each leave event loops

SESSIONS = Sessions()
# Step costs from the warm-up and finished races: what a race's "expected" figure uses.
CALIBRATION = Calibration()
# torch's thread count: main() sizes it, the warm-up fits it.
WATCH = BusyWatch(1, torch.set_num_threads, log=log.info)

try:  # every Space installs `spaces`; only a ZeroGPU one says so in its config
    import spaces

    ZERO_GPU = bool(spaces.config.Config.zero_gpu)
except ImportError:
    ZERO_GPU = False


def on_gpu(fn):
    """On ZeroGPU device work may only happen inside functions spaces.GPU wraps; elsewhere nothing
    changes."""
    return spaces.GPU(fn) if ZERO_GPU else fn


DEVICE = DeviceThread(inline=ZERO_GPU)
LOADER = PairLoader(
    functools.partial(
        load_pair,
        warm_up=not ZERO_GPU,
        check_memory=not ZERO_GPU,
        calibration=CALIBRATION,
        watch=WATCH,
    ),
    DEVICE.submit,
)
RACING = Racing(LIMITS, LOADER, DEVICE, WATCH, CALIBRATION)


def get_engine():
    """The app's pair, waiting for it if it is still loading (Racing.engine)."""
    return RACING.engine()


@on_gpu
def race_ui(request: gr.Request, armed: int | None = None, **inputs) -> Iterator[dict]:
    """Run's race (RaceHandlers.race), inside a GPU function on ZeroGPU."""
    yield from RACES.race(request, armed, **inputs)


@on_gpu
@shielded
def race_api(
    prompt: str,
    max_new_tokens: int = 128,
    gamma: int | None = None,
    window: int | None = None,
    ngram: int | None = None,
    branches: int | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int | None = None,
    raw: bool = False,
) -> Iterator[dict]:
    """Race vanilla and Ouroboros on one prompt. Streams {method: {text, token_ids, stop_reason,
    stats}} (stop_reason and stats are None until a lane is done); the last message is the finished
    race: each lane with "steps" (the engine's step events: drafted, accepted, rejected,
    target_token, milliseconds, and the trunk and branches the target verified), its Ouroboros lane
    with "verdict": {kind: "identical" | "float tie" | "rounding boundary" | "mismatch",
    first_difference, margin, spread (16-bit: how far scores moved between forward shapes)} against
    vanilla (None if the race was cut short), "speedup" (by the clock), "forward_ratio" (vanilla's
    target forwards over its own) and "repeats" (the share of the answer that repeats its own
    earlier text), and in each lane
    "sampling": {temperature, top_p, seed} (None when greedy). gamma, window, ngram, branches:
    Ouroboros settings, None for the defaults. temperature 0 is greedy; above 0 both lanes sample,
    each position's draw fixed by the seed and the position, so they write the same text; seed None
    picks one (reported). raw: for a chat pair (the default), send the prompt as it is instead of as
    a user's chat turn."""
    # The arguments by name, as the page sends its inputs: check_race reads each knob by its name.
    yield from RACING.api(check_race(locals(), LIMITS))


API_PARAMETERS = list(inspect.signature(race_api).parameters)  # how /race's validator names inputs


def await_pair(text: str, length) -> Iterator[dict]:
    """Run's wait for the pair (RACES.await_pair). Where the click came while the pair loaded, its
    last step also gives the page what the last loading tick would have (the pair's line, sliders,
    legend, the ticks stopped): a loading tick wipes the message beside a refused input, so none may
    come after the race checks its inputs."""
    waited = not RACING.loader.finished
    for badge in RACES.await_pair():
        yield {VIEW.badge: badge}
    if waited:
        yield {VIEW.badge: "", **LOADING.refresh(text, length)}


with GRADIO_LOOPS.closing(), gr.Blocks(title="Ouroboros race") as demo:
    PAGE = build_page(MAX_NEW_TOKENS)
    VIEW = PAGE.view
    RACES = RaceHandlers(RACING, SESSIONS, VIEW, SESSION_POOL_SIZE)
    LOADING = LoadingView(RACING, **PAGE.loading_parts())
    run_inputs = PAGE.run_inputs()
    # The click checks the inputs once the pair is ready (before, its loading ticks would wipe a
    # message: the race checks them then); preprocess=False, here and in the race: a typed 0
    # meets the app's sentence.
    PAGE.run.click(
        RACES.accept_run,
        None,
        [VIEW.armed, VIEW.replay, VIEW.legend],
        inputs_kwargs={**run_inputs, "raw": PAGE.raw_text},
        validator=race_validator(LIMITS, lambda: LOADER.engine, wait=True),
        preprocess=False,
        **AT_ONCE,
    ).success(
        await_pair, list(PAGE.sized), [VIEW.badge, *LOADING.outputs], preprocess=False, **AT_ONCE
    ).success(
        race_ui,
        None,
        VIEW.outputs,
        inputs_kwargs={**run_inputs, "armed": VIEW.armed, "raw": PAGE.raw_text},
        concurrency_id="device",
        concurrency_limit=1,
        api_visibility="private",
        validator=race_validator(LIMITS, lambda: LOADER.engine),
        preprocess=False,
        trigger_mode="multiple",
        show_progress_on=[VIEW.status],
        show_progress="minimal",
    ).then(
        RACES.race_over, None, [VIEW.status, VIEW.replay], **AT_ONCE
    )  # also after an error the race raised
    wire_page(
        demo,
        PAGE,
        RACES,
        LOADING,
        SESSIONS,
        lambda text, length: room_line(LOADER.engine, text, length),
    )
    api = gr.api(race_api, api_name="race", concurrency_id="device", concurrency_limit=1)
    # Refused before the queue.
    demo.fns[api["id"]].validator = race_validator(
        LIMITS, lambda: LOADER.engine, names=API_PARAMETERS
    )


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    start_threads(WATCH)
    # The page is served at once; the pair loads behind it, and the page and the log say how far
    # it got.
    LOADER.start()
    port = os.environ.get("PORT")
    with GRADIO_LOOPS.closing():
        demo.queue(max_size=QUEUE_SIZE, default_concurrency_limit=1)
        quiet_when_idle(demo)
        # None lets Gradio read GRADIO_SERVER_NAME / GRADIO_SERVER_PORT (Spaces sets them), else
        # localhost:7860.
        demo.launch(
            server_name=os.environ.get("OUROBOROS_HOST"),
            server_port=int(port) if port else None,
            css=(ASSETS / "style.css").read_text(),
            head=f"<script>{(ASSETS / 'lanes.js').read_text()}</script>",
            show_error=False,
            prevent_thread_lock=True,
        )
    demo.block_thread()


if __name__ == "__main__":
    main()
