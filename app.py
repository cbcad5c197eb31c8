"""Ouroboros race: vanilla decoding and Ouroboros side by side, from one engine on one device.

This file makes the app's shared objects, lays the page out and wires its events. The page's
handlers live in ui/handlers.py, its settings panels in ui/settings.py, a race on the device and
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
from ui.chart import chart_svg
from ui.frames import RaceView
from ui.guard import UNEXPECTED  # noqa: F401  (the tests' expected message)
from ui.guard import Limits, check_race, race_validator, room_line, shielded
from ui.handlers import LOAD_EVERY_S, LoadingView, RaceHandlers
from ui.loading import PairLoader, load_pair, start_threads
from ui.page import EXAMPLES, PROMPT_LABEL, has_store, pair_description, pair_settings
from ui.racing import Racing
from ui.render import LANE_TITLES, TIMING_NOTE, legend_html
from ui.replay import CHOICES
from ui.sessions import Sessions
from ui.settings import settings_panel
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

with GRADIO_LOOPS.closing(), gr.Blocks(title="Ouroboros race") as demo:
    gr.Markdown(
        "# Ouroboros race\nThe same prompt through plain decoding and through Ouroboros "
        "speculative decoding, side by side. Both write exactly the target model's own "
        "output, token for token; Ouroboros gets there in fewer target forwards."
    )
    pair = gr.Markdown(pair_description(), elem_id="pair")  # both filled in on the page's load
    load_status = gr.HTML("", elem_id="load-status")
    load_timer = gr.Timer(LOAD_EVERY_S, active=False)
    with gr.Row():
        with gr.Column(scale=3):
            prompt = gr.Textbox(
                EXAMPLES[0]["prompt"], label=PROMPT_LABEL, lines=8, max_lines=30, elem_id="prompt"
            )
            room = gr.HTML(elem_id="prompt-room")  # its length in tokens, and the model's room
        with gr.Column(scale=1, min_width=260):
            max_new = gr.Slider(
                1,
                MAX_NEW_TOKENS,
                step=1,
                label="Max new tokens",
                value=min(EXAMPLES[0]["max_new_tokens"], MAX_NEW_TOKENS),
                elem_id="max-new",
            )
            speculative_lane = gr.Checkbox(False, label="Add a classic speculative decoding lane")
            colour = gr.Checkbox(True, label="Colour tokens by how they came")
            warm = gr.Checkbox(True, label="Keep my phrase pool warm (this session only)")
            raw_text = gr.Checkbox(
                False,
                visible=PROMPT_LABEL != "Prompt",
                elem_id="raw",
                label="Raw text: continue the prompt as it is, no chat turn",
            )
            with gr.Row():
                run = gr.Button("Run", variant="primary", elem_id="run")
                stop_button = gr.Button("Stop", elem_id="stop")
                clear_button = gr.Button("Clear", elem_id="clear")
    gr.Examples(
        [[item["prompt"], item["max_new_tokens"]] for item in EXAMPLES],
        inputs=[prompt, max_new],
        example_labels=[item["label"] for item in EXAMPLES],
        label="Examples: what each one shows",
    )
    knob_sliders, sampling_inputs = settings_panel()
    with gr.Row(elem_id="race-top", equal_height=True):  # where Run scrolls to (assets/lanes.js)
        legend = gr.HTML(legend_html(pair_settings(), has_store()), elem_id="legend", scale=3)
        race_status = gr.HTML(elem_id="race-status", scale=2)  # queued (its place) or racing
    lane_boxes, lane_columns = {}, {}
    with gr.Row(elem_id="lanes"):
        for method in ("vanilla", "ouroboros", "speculative"):
            with gr.Column(
                visible=method != "speculative", min_width=300, elem_id=f"column-{method}"
            ) as column:
                gr.HTML(f'<h3 class="lane-title">{LANE_TITLES[method]}</h3>')
                lane_boxes[method] = (
                    gr.HTML(elem_id=f"lane-{method}"),
                    gr.HTML(elem_id=f"stats-{method}"),
                )
            lane_columns[method] = column
    badge = gr.HTML(elem_id="badge")
    with gr.Row(elem_id="replay-row"):
        replay_speed = gr.Radio(
            CHOICES, value=CHOICES[0], label="Replay speed", elem_id="replay-speed", scale=2
        )
        replay_button = gr.Button(
            "Replay the last race", interactive=False, elem_id="replay", scale=1
        )
        # In reach once Run has scrolled the page.
        stop_near = gr.Button("Stop", elem_id="stop-near", scale=0, min_width=90)
    chart = gr.HTML(chart_svg({}), elem_id="chart")
    summary = gr.HTML(elem_id="summary")
    with gr.Accordion(
        "Step inspector: what the target verified in one forward", open=True, elem_id="inspector"
    ):
        step_slider = gr.Slider(
            1, 2, value=1, step=1, label="Ouroboros step", interactive=False, elem_id="step"
        )
        inspector = gr.HTML(elem_id="inspector-view")
    gr.Markdown(f"*How times are measured:* {TIMING_NOTE}")
    # Sessions.arm's number for the click's race. Every link "multiple": a Run is a new race.
    armed = gr.State(None)

    VIEW = RaceView(
        lanes=lane_boxes,
        chart=chart,
        badge=badge,
        summary=summary,
        step=step_slider,
        inspector=inspector,
        replay=replay_button,
        status=race_status,
        legend=legend,
        armed=armed,
    )
    RACES = RaceHandlers(RACING, SESSIONS, VIEW, SESSION_POOL_SIZE)
    LOADING = LoadingView(
        RACING,
        status=load_status,
        pair=pair,
        timer=load_timer,
        knobs=knob_sliders,
        room=room,
        legend=legend,
    )

    # The race's inputs by name (the handlers and the validators read them so).
    run_inputs = {
        "prompt": prompt,
        "max_new_tokens": max_new,
        **knob_sliders,
        **sampling_inputs,
        "with_speculative": speculative_lane,
        "colour": colour,
        "warm_pool": warm,
    }
    # The click checks the inputs once the pair is ready (before, its loading ticks would wipe a
    # message: the race checks them then); preprocess=False, here and in the race: a typed 0
    # meets the app's sentence.
    run.click(
        RACES.accept_run,
        None,
        [armed, replay_button, legend],
        inputs_kwargs={**run_inputs, "raw": raw_text},
        concurrency_limit=None,
        api_visibility="private",
        validator=race_validator(LIMITS, lambda: LOADER.engine, wait=True),
        preprocess=False,
        trigger_mode="multiple",
        show_progress="hidden",
    ).success(
        RACES.await_pair,
        None,
        badge,
        concurrency_limit=None,
        api_visibility="private",
        show_progress="hidden",
        trigger_mode="multiple",
    ).success(
        race_ui,
        None,
        VIEW.outputs,
        inputs_kwargs={**run_inputs, "armed": armed, "raw": raw_text},
        concurrency_id="device",
        concurrency_limit=1,
        api_visibility="private",
        validator=race_validator(LIMITS, lambda: LOADER.engine),
        preprocess=False,
        trigger_mode="multiple",
        show_progress_on=[race_status],
        show_progress="minimal",
    ).then(
        RACES.race_over,
        None,
        [race_status, replay_button],
        concurrency_limit=None,
        api_visibility="private",
        show_progress="hidden",
        trigger_mode="multiple",
    )  # also after an error the race raised
    replay_button.click(
        SESSIONS.arm, None, armed, concurrency_limit=None, api_visibility="private"
    ).then(
        RACES.replay,
        [replay_speed, colour, armed],
        VIEW.outputs,
        concurrency_id="replay",
        concurrency_limit=8,
        api_visibility="private",
        show_progress="hidden",
    )
    step_slider.change(
        RACES.inspect_step,
        step_slider,
        inspector,
        concurrency_limit=None,
        api_visibility="private",
        show_progress="hidden",
        preprocess=False,
    )
    speculative_lane.change(
        lambda on: gr.update(visible=on),
        speculative_lane,
        lane_columns["speculative"],
        api_visibility="private",
        show_progress="hidden",
    )
    for stopper in (stop_button, stop_near):
        stopper.click(SESSIONS.stop, None, None, concurrency_limit=None, api_visibility="private")
    clear_button.click(RACES.clear, None, VIEW.outputs, api_visibility="private").then(
        lambda: "", None, prompt, api_visibility="private"
    )
    # preprocess=False: a tick reads the boxes as they stand (a typed 0 is the room line's to show,
    # not a slider error's toast while the pair loads).
    demo.load(
        LOADING.refresh,
        [prompt, max_new],
        LOADING.outputs,
        api_visibility="private",
        show_progress="hidden",
        preprocess=False,
    )
    load_timer.tick(
        LOADING.refresh,
        [prompt, max_new],
        LOADING.outputs,
        api_visibility="private",
        show_progress="hidden",
        queue=False,
        preprocess=False,
    )
    demo.unload(SESSIONS.leave)
    api = gr.api(race_api, api_name="race", concurrency_id="device", concurrency_limit=1)
    # Refused before the queue.
    demo.fns[api["id"]].validator = race_validator(
        LIMITS, lambda: LOADER.engine, names=API_PARAMETERS
    )
    for changed in (prompt.change, max_new.change):  # the prompt's size in tokens, as it is typed
        changed(
            lambda text, length: room_line(LOADER.engine, text, length),
            [prompt, max_new],
            room,
            queue=False,
            api_visibility="private",
            show_progress="hidden",
            trigger_mode="always_last",
            preprocess=False,
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
