"""The page's layout: every component in the order a visitor meets them (build_page), and the events
that stay on the page (wire_page: replay, the step inspector, Stop, Clear, the loading ticks, the
prompt's size). app.py opens the Blocks, calls both and wires the race itself."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from .chart import chart_svg
from .frames import RaceView
from .handlers import LOAD_EVERY_S
from .page import EXAMPLES, PROMPT_LABEL, has_store, pair_description, pair_settings
from .render import LANE_TITLES, TIMING_NOTE, legend_html
from .replay import CHOICES
from .settings import settings_panel

TITLE = (
    "# Ouroboros race\nThe same prompt through plain decoding and through Ouroboros speculative "
    "decoding, side by side. Both write exactly the target model's own output, token for token; "
    "Ouroboros gets there in fewer target forwards."
)
PRIVATE = {"api_visibility": "private"}  # no API endpoint
QUIET = {"show_progress": "hidden", **PRIVATE}  # and no spinner
# A link of Run's chain that any click may start at once (not the race itself, which queues).
AT_ONCE = {"concurrency_limit": None, "trigger_mode": "multiple", **QUIET}


@dataclass
class Page:
    """The page's components, by what they are for."""

    pair: gr.Markdown  # the line naming the pair, and its loading status and ticks
    load_status: gr.HTML
    load_timer: gr.Timer
    prompt: gr.Textbox  # the request and its size in tokens
    room: gr.HTML
    # What the room line and the loading ticks read: the prompt and max new tokens, copied on the
    # page. Gradio wipes an input's message whenever an event reading that input answers, so a
    # room line that answered after Run's check wiped "Prompt is empty" (seen on a busy machine).
    sized: tuple
    max_new: gr.Slider  # the race's options
    speculative_lane: gr.Checkbox
    colour: gr.Checkbox
    warm: gr.Checkbox
    raw_text: gr.Checkbox
    run: gr.Button
    stops: tuple  # Stop beside Run and Stop beside replay
    clear: gr.Button
    knobs: dict  # the settings panels' inputs by name
    sampling: dict
    view: RaceView  # what a race draws on
    lane_columns: dict
    replay_speed: gr.Radio

    def loading_parts(self) -> dict:
        """What the loading ticks update (handlers.LoadingView's components by name)."""
        return {
            "status": self.load_status,
            "pair": self.pair,
            "timer": self.load_timer,
            "knobs": self.knobs,
            "room": self.room,
            "legend": self.view.legend,
        }

    def run_inputs(self) -> dict:
        """The race's inputs by name (the handlers and the validators read them so)."""
        return {
            "prompt": self.prompt,
            "max_new_tokens": self.max_new,
            **self.knobs,
            **self.sampling,
            "with_speculative": self.speculative_lane,
            "colour": self.colour,
            "warm_pool": self.warm,
        }


def build_page(max_new_tokens: int) -> Page:
    """Lay the page out inside an open gr.Blocks."""
    gr.Markdown(TITLE)
    top = {
        "pair": gr.Markdown(pair_description(), elem_id="pair"),  # filled in on the page's load
        "load_status": gr.HTML("", elem_id="load-status"),
        "load_timer": gr.Timer(LOAD_EVERY_S, active=False),
    }
    request = _request_row(max_new_tokens)
    gr.Examples(
        [[item["prompt"], item["max_new_tokens"]] for item in EXAMPLES],
        inputs=[request["prompt"], request["max_new"]],
        example_labels=[item["label"] for item in EXAMPLES],
        label="Examples: what each one shows",
    )
    knobs, sampling = settings_panel()
    view, lane_columns, replay_speed, stop_near = _race_area()
    stop = request.pop("stop")
    return Page(
        **top,
        **request,
        stops=(stop, stop_near),
        knobs=knobs,
        sampling=sampling,
        view=view,
        lane_columns=lane_columns,
        replay_speed=replay_speed,
    )


def _request_row(max_new_tokens: int) -> dict:
    with gr.Row():
        with gr.Column(scale=3):
            prompt = gr.Textbox(
                EXAMPLES[0]["prompt"], label=PROMPT_LABEL, lines=8, max_lines=30, elem_id="prompt"
            )
            room = gr.HTML(elem_id="prompt-room")  # its length in tokens, and the model's room
        with gr.Column(scale=1, min_width=260):
            max_new = gr.Slider(
                1,
                max_new_tokens,
                step=1,
                label="Max new tokens",
                value=min(EXAMPLES[0]["max_new_tokens"], max_new_tokens),
                elem_id="max-new",
            )
            options = {
                "speculative_lane": gr.Checkbox(
                    False, label="Add a classic speculative decoding lane"
                ),
                "colour": gr.Checkbox(True, label="Colour tokens by how they came"),
                "warm": gr.Checkbox(True, label="Keep my phrase pool warm (this session only)"),
                "raw_text": gr.Checkbox(
                    False,
                    visible=PROMPT_LABEL != "Prompt",
                    elem_id="raw",
                    label="Raw text: continue the prompt as it is, no chat turn",
                ),
            }
            with gr.Row():  # side by side, not one under another: the lanes come up the page
                buttons = {
                    "run": gr.Button(
                        "Run", variant="primary", elem_id="run", scale=2, min_width=80
                    ),
                    "stop": gr.Button("Stop", elem_id="stop", min_width=60),
                    "clear": gr.Button("Clear", elem_id="clear", min_width=60),
                }
    sized = (gr.Textbox(prompt.value, visible=False), gr.Number(max_new.value, visible=False))
    return {
        "prompt": prompt,
        "room": room,
        "sized": sized,
        "max_new": max_new,
        **options,
        **buttons,
    }


def _race_area():
    """The legend, the lanes, the badge, replay, the chart, the summary and the step inspector."""
    with gr.Row(elem_id="race-top", equal_height=True):  # where Run scrolls to (assets/lanes.js)
        legend = gr.HTML(legend_html(pair_settings(), has_store()), elem_id="legend", scale=3)
        status = gr.HTML(elem_id="race-status", scale=2)  # queued (its place) or racing
    lanes, columns = {}, {}
    with gr.Row(elem_id="lanes"):
        for method in ("vanilla", "ouroboros", "speculative"):
            with gr.Column(
                visible=method != "speculative", min_width=300, elem_id=f"column-{method}"
            ) as columns[method]:
                gr.HTML(f'<h3 class="lane-title">{LANE_TITLES[method]}</h3>')
                lanes[method] = (
                    gr.HTML(elem_id=f"lane-{method}"),
                    gr.HTML(elem_id=f"stats-{method}"),
                )
    badge = gr.HTML(elem_id="badge")
    with gr.Row(elem_id="replay-row"):
        speed = gr.Radio(
            CHOICES, value=CHOICES[0], label="Replay speed", elem_id="replay-speed", scale=2
        )
        replay = gr.Button("Replay the last race", interactive=False, elem_id="replay", scale=1)
        # In reach once Run has scrolled the page.
        stop_near = gr.Button("Stop", elem_id="stop-near", scale=0, min_width=90)
    chart = gr.HTML(chart_svg({}), elem_id="chart")
    summary = gr.HTML(elem_id="summary")
    with gr.Accordion(
        "Step inspector: what the target verified in one forward", open=True, elem_id="inspector"
    ):
        step = gr.Slider(
            1, 2, value=1, step=1, label="Ouroboros step", interactive=False, elem_id="step"
        )
        inspector = gr.HTML(elem_id="inspector-view")
    gr.Markdown(f"*How times are measured:* {TIMING_NOTE}")
    view = RaceView(
        lanes=lanes,
        chart=chart,
        badge=badge,
        summary=summary,
        step=step,
        inspector=inspector,
        replay=replay,
        status=status,
        legend=legend,
        # Sessions.arm's number for the click's race. Every link "multiple": a Run is a new race.
        armed=gr.State(None),
    )
    return view, columns, speed, stop_near


def wire_page(demo: gr.Blocks, page: Page, races, loading, sessions, room_line) -> None:
    """The page's own events (inside the open Blocks): replay, the step inspector, the speculative
    lane's toggle, Stop, Clear, the loading ticks and the prompt's size as it is typed
    (room_line(text, length))."""
    view = page.view
    view.replay.click(sessions.arm, None, view.armed, concurrency_limit=None, **PRIVATE).then(
        races.replay,
        [page.replay_speed, page.colour, view.armed],
        view.outputs,
        concurrency_id="replay",
        concurrency_limit=8,
        **QUIET,
    )
    view.step.change(
        races.inspect_step,
        view.step,
        view.inspector,
        concurrency_limit=None,
        preprocess=False,
        **QUIET,
    )
    page.speculative_lane.change(
        lambda on: gr.update(visible=on),
        page.speculative_lane,
        page.lane_columns["speculative"],
        **QUIET,
    )
    for stopper in page.stops:
        stopper.click(sessions.stop, None, None, concurrency_limit=None, **PRIVATE)
    page.clear.click(races.clear, None, view.outputs, **PRIVATE).then(
        lambda: "", None, page.prompt, **PRIVATE
    )
    # preprocess=False: a tick reads the boxes as they stand (a typed 0 is the room line's to show,
    # not a slider error's toast while the pair loads).
    ticks = {"preprocess": False, **QUIET}
    sized = list(page.sized)
    demo.load(loading.refresh, sized, loading.outputs, **ticks)
    page.load_timer.tick(loading.refresh, sized, loading.outputs, queue=False, **ticks)
    demo.unload(sessions.leave)
    for changed in (page.prompt.change, page.max_new.change):
        # The copy is made on the page (no server call, so no message wiped), then sized.
        changed(
            None,
            [page.prompt, page.max_new],
            sized,
            js="(text, length) => [text, length]",
            **QUIET,
        ).then(room_line, sized, page.room, queue=False, trigger_mode="always_last", **ticks)
