"""Ouroboros race: vanilla decoding and Ouroboros side by side, from one engine on one device.

This file holds the layout and the handlers. What they call lives in ui/ (request checks, visitor
sessions, rendering of the lanes) and the engine in ouroboros_core/.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import gradio as gr
import torch

from ouroboros_core import ConfigError, OuroborosConfig, OutputVerdict
from ouroboros_core.cpu import BusyWatch
from ouroboros_core.race import Lane, race
from ui.chart import chart_svg
from ui.frames import TEXT_EVERY_S, render, streamed
from ui.calibration import Calibration
from ui.guard import (KNOBS, SAMPLING, UNEXPECTED, Limits, check_request, check_sampling, race_validator,  # noqa: F401
                      refuse, room_line, shielded)  # (UNEXPECTED: tests)
from ui.inspect import inspector_outputs, step_view
from ui.loading import PairLoader, load_pair, start_threads, visitor_engine
from ui.page import EXAMPLES, KNOB_INFO, PROMPT_LABEL, pair_description, pair_settings
from ui.render import LANE_TITLES, TIMING_NOTE, api_result, legend_html, prompt_tail, race_log_line, sampling_line
from ui.replay import CHOICES, replay, speed_for
from ui.sessions import Sessions, visitor
from ui.threads import DeviceThread, Latest, quiet_when_idle

ASSETS = Path(__file__).resolve().parent / "assets"
LIMITS = Limits.from_env()  # the host's caps on what a visitor may ask for
MAX_NEW_TOKENS = LIMITS.max_new_tokens
QUEUE_SIZE = int(os.environ.get("OUROBOROS_QUEUE_SIZE", "16"))
# Phrases one visitor's warm pool may hold (~0.4 kB each): with at most 256 sessions, pools stay under ~0.5 GB.
SESSION_POOL_SIZE = int(os.environ.get("OUROBOROS_SESSION_POOL_SIZE", "4096"))
DEFAULTS = OuroborosConfig()
log = logging.getLogger("ouroboros.app")

SESSIONS = Sessions()
CALIBRATION = Calibration()  # step costs from the warm-up and finished races: what a race's "expected" uses
WATCH = BusyWatch(1, torch.set_num_threads, log=log.info)  # torch's thread count: main() sizes it, the warm-up fits it

try:  # every Space installs `spaces`; only a ZeroGPU one says so in its config
    import spaces

    ZERO_GPU = bool(spaces.config.Config.zero_gpu)
except ImportError:
    ZERO_GPU = False


def on_gpu(fn):
    """On ZeroGPU device work may only happen inside functions spaces.GPU wraps; elsewhere nothing changes."""
    return spaces.GPU(fn) if ZERO_GPU else fn


DEVICE = DeviceThread(inline=ZERO_GPU)
LOADER = PairLoader(functools.partial(load_pair, warm_up=not ZERO_GPU, check_memory=not ZERO_GPU,
                                      calibration=CALIBRATION, watch=WATCH), DEVICE.submit)


def get_engine():
    """The loaded pair, waiting for it if it is still loading (and starting the load if nobody has); raises
    LoadError with the sentence the page shows if it failed."""
    return LOADER.wait()


def engine_for_visitor():
    """get_engine() for a handler: a pair that failed to load becomes the visitor's message, not a traceback."""
    return visitor_engine(get_engine)


def run_race(prompt, max_new_tokens, options, methods, stop, pools, sampling, raw=False):
    """Yield lanes of a checked request; request errors the engine finds become messages for the visitor.
    sampling: the options every lane shares (temperature, top_p, seed), {} for greedy; raw: the prompt as it
    is, not as a chat turn."""
    engine = engine_for_visitor()
    per_method = {method: {**sampling, **(options if method == "ouroboros" else {})} for method in methods}
    try:
        updates = race(engine, prompt, methods, max_new_tokens, per_method, stop, pools, raw=bool(raw), watch=WATCH)
        # race() is a generator: the engine validates the request on its first step, so take it here.
        first = DEVICE.call(next, updates)
    except ConfigError as err:
        raise refuse(str(err)) from None
    return itertools.chain([first], DEVICE.iterate(updates))


def race_verdicts(prompt: str, lanes: dict[str, Lane], sampling: dict, raw=False) -> dict[str, OutputVerdict]:
    """Each drafting lane's output against vanilla's, once every lane has finished (not when stopped); sampling:
    the race's shared settings ({} greedy)."""
    if any(lane.done is None or lane.done.stop_reason == "cancelled" for lane in lanes.values()):
        return {}
    reference = lanes["vanilla"].done.token_ids
    engine = get_engine()
    return {method: DEVICE.call(engine.verdict, prompt, reference, lane.done.token_ids, **sampling, raw=bool(raw))
            for method, lane in lanes.items() if method != "vanilla"}


def log_race(who: str, lanes: dict[str, Lane] | None) -> None:
    if lanes:
        log.info("race %s: %s", who[:8], race_log_line(lanes))


# ----------------------------------------------------------------------------------------------- handlers

LOAD_EVERY_S = 0.5  # the loading status and Run's wait for the pair, twice a second
WAITING = [gr.skip()] * 4  # the inspector's outputs and the race's status while a race or replay streams
RUNNING = ('<div class="race-running">Racing: Stop ends it; Run again restarts it with the prompt as it is '
           "now.</div>")


@on_gpu
@shielded
def race_ui(prompt, max_new_tokens, gamma, window, ngram, branches, temperature, top_p, seed, with_speculative,
            colour, warm_pool, request: gr.Request, armed: int | None = None, raw: bool = False):
    """armed: the race's number from Sessions.arm at the Run (its stop flag), None arms one now; raw: as is."""
    who = visitor(request)
    session = SESSIONS.get(who)
    armed, stop = session["stops"].take(armed)  # set already if Stop came since the click
    if stop is None:  # another Run came first: that race, not this one, takes the page
        return
    updates = Latest(())
    try:
        prompt, max_new_tokens, options = check_request(
            prompt, max_new_tokens, {"gamma": gamma, "window": window, "ngram": ngram, "branches": branches}, LIMITS)
        sampling = check_sampling(temperature, top_p, seed)
        chat = LOADER.engine is not None and LOADER.engine.chat and not raw
        context = "" if chat else prompt_tail(prompt)  # an answer opens empty; a continuation on its prompt
        session["race"] = None  # a replay of the last race stops here
        methods = ["vanilla", "ouroboros"] + (["speculative"] if with_speculative else [])
        pools = {}
        if warm_pool:
            if session.get("pool") is None:
                session["pool"] = engine_for_visitor().new_pool(pool_size=SESSION_POOL_SIZE)
            pools["ouroboros"] = session["pool"]
        # At once, before the first step: the lanes open on the prompt's last line, with the racing line.
        yield render({method: Lane(method) for method in methods}, colour, False, context=context) + inspector_outputs(
            None) + [RUNNING]
        mark = WATCH.busy_windows  # whether this race meets a busy machine
        updates = Latest(run_race(prompt, max_new_tokens, options, methods, stop, pools, sampling, raw))
        yield from streamed(updates, colour, WAITING, context)
        lanes = updates.value
        if lanes is not None:
            busy = WATCH.busy_since(mark)
            final = {"verdicts": race_verdicts(prompt, lanes, sampling, raw), "busy": busy,
                     "costs": CALIBRATION.take(lanes, busy=busy is not None),
                     "sampling": sampling_line(sampling, drawn=seed is None)}
            session["race"] = (lanes, final, context)
            yield render(lanes, colour, final=final, context=context) + inspector_outputs(lanes) + [""]
    finally:  # also when the page goes away mid-race: the lanes so far
        session["stops"].release(armed)
        log_race(who, updates.value)


@shielded
def await_pair():
    """Before a race from the page: wait for the pair outside the device queue (and, on ZeroGPU, outside any GPU
    function), showing how far loading has got where the badge will be; a pair that failed stops the race."""
    while not LOADER.settle(timeout=LOAD_EVERY_S):
        yield LOADER.status_html()
    engine_for_visitor()  # refuses with the sentence if loading failed
    yield ""


@shielded
def replay_ui(speed, colour, request: gr.Request, armed: int | None = None):
    """The session's last race again, from its recorded events, at its true relative timings times `speed`."""
    session = SESSIONS.get(visitor(request))
    armed, stop = session["stops"].take(armed)
    if stop is None:
        return
    try:
        recorded = session.get("race")
        if recorded is None:
            raise refuse("Run a race first: Replay shows the last race again, at the speed you pick.")
        lanes, final, context = recorded
        try:
            speed = speed_for(speed, lanes)
        except ValueError as err:
            raise refuse(str(err)) from None
        for out in streamed(replay(lanes, speed, stop, TEXT_EVERY_S), colour, WAITING, context):
            if session.get("race") is not recorded:  # a new race has begun, or Clear: the lanes are not ours
                return
            yield out
        yield render(lanes, colour, final=final, context=context) + WAITING
    finally:
        session["stops"].release(armed)


def inspect_step(number, request: gr.Request) -> str:
    """The inspector for the slider's value as sent (the listener skips Gradio's own bounds check)."""
    recorded = SESSIONS.get(visitor(request)).get("race")
    if recorded is None or "ouroboros" not in recorded[0]:
        return ""
    return step_view(recorded[0]["ouroboros"], number)


API_EVERY_S = 0.25


@on_gpu
@shielded
def race_api(prompt: str, max_new_tokens: int = 128, gamma: int | None = None, window: int | None = None,
             ngram: int | None = None, branches: int | None = None, temperature: float = 0.0, top_p: float = 1.0,
             seed: int | None = None, raw: bool = False) -> Iterator[dict]:
    """Race vanilla and Ouroboros on one prompt. Streams {method: {text, token_ids, stop_reason, stats}} (stop_reason
    and stats are None until a lane is done); the last message is the finished race: each lane with "steps" (the
    engine's step events: drafted, accepted, rejected, target_token, milliseconds, and the trunk and branches the target
    verified), its Ouroboros lane with "verdict": {kind: "identical" | "float tie" | "rounding boundary" | "mismatch",
    first_difference, margin} against vanilla (None if the race was cut short), and in each lane "sampling":
    {temperature, top_p, seed} (None when greedy). gamma, window, ngram, branches: Ouroboros settings, None for the
    defaults. temperature 0 is greedy; above 0 both lanes sample, each position's draw fixed by the seed and the
    position, so they write the same text; seed None picks one (reported). raw: for a chat pair (the default),
    send the prompt as it is instead of as a user's chat turn."""
    prompt, max_new_tokens, options = check_request(
        prompt, max_new_tokens, {"gamma": gamma, "window": window, "ngram": ngram, "branches": branches}, LIMITS)
    sampling = check_sampling(temperature, top_p, seed)
    lanes, last, mark = None, 0.0, WATCH.busy_windows
    try:
        for lanes in run_race(prompt, max_new_tokens, options, ["vanilla", "ouroboros"], None, {}, sampling, raw):
            now = time.perf_counter()
            if now - last >= API_EVERY_S:
                last = now
                yield api_result(lanes)
        final = api_result(lanes)
        for method, lane in lanes.items():  # the engine's step events, as the CLI's --events prints them
            final[method]["steps"] = [event.to_dict() for event in lane.events]
        verdict = race_verdicts(prompt, lanes, sampling, raw).get("ouroboros")
        CALIBRATION.add(lanes, busy=WATCH.busy_since(mark) is not None)
        final["ouroboros"]["verdict"] = verdict.to_dict() if verdict else None
        for lane in final.values():
            lane["sampling"] = sampling or None
        yield final
    finally:  # also when the client cancels: a generator left alone stops computing at once
        log_race("api", lanes)


def accept_run(request: gr.Request, prompt, max_new_tokens, gamma, window, ngram, branches, *rest) -> list:
    """Run pressed, inputs accepted (a refusal changes nothing): the race is armed, Replay goes off now, not at the
    race's first frame a queue away (a Replay then would stop it), and the legend names what it can show."""
    knobs = {"gamma": gamma, "window": window, "ngram": ngram, "branches": branches}
    return [SESSIONS.arm(request), gr.update(interactive=False), legend_html({**pair_settings(LOADER.engine), **knobs})]


def race_over(request: gr.Request) -> list:
    """The racing line goes; Replay comes back for the last race unless a later Run has armed another."""
    return ["", gr.update(interactive=SESSIONS.replayable(request))]


def clear(request: gr.Request):
    """Empty the page: whatever runs stops, and the last race is forgotten (Replay has nothing to show)."""
    SESSIONS.forget_race(request)
    off = gr.update(interactive=False)
    return ["", "", "", "", "", "", chart_svg({}), "", "", off, "", off, ""]


# ----------------------------------------------------------------------------------------------- layout

def pair_line() -> str:
    """The pair and, once it is loaded, the device and dtype it runs on (read on every page load)."""
    return pair_description(LOADER.engine)


def knob_values() -> list[int]:
    """The sliders' starting values: the loaded pair's own settings for its device, else the engine's."""
    return [pair_settings(get_engine())[name] for name in KNOBS]


def loading_view(text: str = "", length: int = 128) -> list:
    """On page load and on each tick while the pair loads: its status, the pair's line, whether to keep
    ticking, the knobs once the pair (and so its own settings) is ready, the prompt's size in tokens, and the
    legend for a race at the pair's settings."""
    ready = LOADER.finished and LOADER.error is None
    knobs = knob_values() if ready else [gr.skip()] * len(KNOBS)
    legend = legend_html(pair_settings(LOADER.engine)) if ready else gr.skip()
    return [LOADER.status_html(), pair_line(), gr.Timer(active=not LOADER.finished)] + knobs + [
        room_line(LOADER.engine, text, length), legend]


with gr.Blocks(title="Ouroboros race") as demo:
    gr.Markdown("# Ouroboros race\nThe same prompt through plain decoding and through Ouroboros speculative "
                "decoding, side by side. Both write exactly the target model's own output, token for token; "
                "Ouroboros gets there in fewer target forwards.")
    pair = gr.Markdown(pair_description(), elem_id="pair")  # both filled in by the page's load event
    load_status = gr.HTML("", elem_id="load-status")
    load_timer = gr.Timer(LOAD_EVERY_S, active=False)
    with gr.Row():
        with gr.Column(scale=3):
            prompt = gr.Textbox(EXAMPLES[0]["prompt"], label=PROMPT_LABEL, lines=8, max_lines=30, elem_id="prompt")
            room = gr.HTML(elem_id="prompt-room")  # its length in tokens against what the model can read
        with gr.Column(scale=1, min_width=260):
            max_new = gr.Slider(1, MAX_NEW_TOKENS, value=min(EXAMPLES[0]["max_new_tokens"], MAX_NEW_TOKENS), step=1,
                                label="Max new tokens", elem_id="max-new")
            speculative_lane = gr.Checkbox(False, label="Add a classic speculative decoding lane")
            colour = gr.Checkbox(True, label="Colour tokens by how they came")
            warm = gr.Checkbox(True, label="Keep my phrase pool warm (this session only)")
            raw_text = gr.Checkbox(False, label="Raw text: continue the prompt as it is, no chat turn",
                                   visible=PROMPT_LABEL != "Prompt", elem_id="raw")
            with gr.Row():
                run = gr.Button("Run", variant="primary", elem_id="run")
                stop_button = gr.Button("Stop", elem_id="stop")
                clear_button = gr.Button("Clear", elem_id="clear")
    gr.Examples([[item["prompt"], item["max_new_tokens"]] for item in EXAMPLES], inputs=[prompt, max_new],
                example_labels=[item["label"] for item in EXAMPLES], label="Examples: what each one shows")
    with gr.Row(elem_id="settings"):  # side by side; stacked on a phone (assets/style.css)
        with gr.Accordion("Ouroboros parameters", open=False, elem_id="knobs"):
            gamma, window, ngram, branches = (
                gr.Slider(low, high, value=getattr(DEFAULTS, name), step=1, label=label, info=KNOB_INFO[name])
                for name, (low, high, label) in KNOBS.items())
        with gr.Accordion("Sampling (greedy by default)", open=False, elem_id="sampling"):
            temperature = gr.Slider(*SAMPLING["temperature"][:2], value=0.0, step=0.05, label="Temperature",
                                    info="0: greedy. Above 0 both lanes sample, and still write the same text")
            top_p = gr.Slider(*SAMPLING["top_p"][:2], value=1.0, step=0.05, label="Top-p",
                              info="sample from the smallest set of tokens holding this much probability")
            seed = gr.Number(0, label="Seed", elem_id="seed",  # no bounds here: the validator says what is wrong
                             info="each position's draw comes from the seed and the position alone; empty: a new one "
                                  "each race, shown after it")
    with gr.Row(elem_id="race-top", equal_height=True):  # where Run scrolls the page to (assets/lanes.js)
        legend = gr.HTML(legend_html(pair_settings()), elem_id="legend", scale=3)  # set for each race
        race_status = gr.HTML(elem_id="race-status", scale=2)  # queued (Gradio's tracker: its place) or racing
    lane_outputs, lane_columns = [], {}
    with gr.Row(elem_id="lanes"):
        for method in ("vanilla", "ouroboros", "speculative"):
            with gr.Column(visible=method != "speculative", min_width=300, elem_id=f"column-{method}") as column:
                gr.HTML(f"<h3 class=\"lane-title\">{LANE_TITLES[method]}</h3>")
                lane_outputs += [gr.HTML(elem_id=f"lane-{method}"), gr.HTML(elem_id=f"stats-{method}")]
            lane_columns[method] = column
    badge = gr.HTML(elem_id="badge")
    with gr.Row(elem_id="replay-row"):
        replay_speed = gr.Radio(CHOICES, value=CHOICES[0], label="Replay speed", elem_id="replay-speed", scale=2)
        replay_button = gr.Button("Replay the last race", interactive=False, elem_id="replay", scale=1)
        stop_near = gr.Button("Stop", elem_id="stop-near", scale=0, min_width=90)  # in reach once Run scrolled
    chart = gr.HTML(chart_svg({}), elem_id="chart")
    summary = gr.HTML(elem_id="summary")
    with gr.Accordion("Step inspector: what the target verified in one forward", open=True, elem_id="inspector"):
        step_slider = gr.Slider(1, 2, value=1, step=1, label="Ouroboros step", interactive=False, elem_id="step")
        inspector = gr.HTML(elem_id="inspector-view")
    gr.Markdown(f"*How times are measured:* {TIMING_NOTE}")

    outputs = lane_outputs + [chart, badge, summary]
    race_inputs = [prompt, max_new, gamma, window, ngram, branches, temperature, top_p, seed, speculative_lane, colour,
                   warm]
    after_race = [step_slider, inspector, replay_button, race_status]
    armed = gr.State(None)  # Sessions.arm's number for the click's race. Every link "multiple": a Run is a new race
    # The click checks the inputs once the pair is ready (before, its loading ticks would wipe a message: the race
    # checks them then); preprocess=False, here and in the race: a typed 0 meets the app's sentence.
    run.click(accept_run, race_inputs + [raw_text], [armed, replay_button, legend], concurrency_limit=None,
              api_visibility="private", validator=race_validator(LIMITS, lambda: LOADER.engine, wait=True),
              preprocess=False, trigger_mode="multiple", show_progress="hidden").success(
        await_pair, None, badge, concurrency_limit=None, api_visibility="private", show_progress="hidden",
        trigger_mode="multiple").success(
        race_ui, race_inputs + [armed, raw_text], outputs + after_race, concurrency_id="device", concurrency_limit=1,
        api_visibility="private", validator=race_validator(LIMITS, lambda: LOADER.engine), preprocess=False,
        trigger_mode="multiple", show_progress_on=[race_status], show_progress="minimal").then(
        race_over, None, [race_status, replay_button], concurrency_limit=None, api_visibility="private",
        show_progress="hidden", trigger_mode="multiple")  # also after an error the race raised
    replay_button.click(SESSIONS.arm, None, armed, concurrency_limit=None, api_visibility="private").then(
        replay_ui, [replay_speed, colour, armed], outputs + after_race, concurrency_id="replay", concurrency_limit=8,
        api_visibility="private", show_progress="hidden")
    step_slider.change(inspect_step, step_slider, inspector, concurrency_limit=None, api_visibility="private",
                       show_progress="hidden", preprocess=False)
    speculative_lane.change(lambda on: gr.update(visible=on), speculative_lane, lane_columns["speculative"],
                            api_visibility="private", show_progress="hidden")
    for stopper in (stop_button, stop_near):
        stopper.click(SESSIONS.stop, None, None, concurrency_limit=None, api_visibility="private")
    clear_button.click(clear, None, outputs + after_race, api_visibility="private").then(
        lambda: "", None, prompt, api_visibility="private")
    loading_outputs = [load_status, pair, load_timer, gamma, window, ngram, branches, room, legend]
    demo.load(loading_view, [prompt, max_new], loading_outputs, api_visibility="private", show_progress="hidden")
    load_timer.tick(loading_view, [prompt, max_new], loading_outputs, api_visibility="private", show_progress="hidden",
                    queue=False)
    demo.unload(SESSIONS.leave)
    api = gr.api(race_api, api_name="race", concurrency_id="device", concurrency_limit=1)
    demo.fns[api["id"]].validator = race_validator(LIMITS, lambda: LOADER.engine)  # refused before the queue
    for changed in (prompt.change, max_new.change):  # the prompt's size in tokens, as the visitor types
        changed(lambda text, length: room_line(LOADER.engine, text, length), [prompt, max_new], room, queue=False,
                api_visibility="private", show_progress="hidden", trigger_mode="always_last", preprocess=False)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    start_threads(WATCH)
    # The page is served at once; the pair loads behind it, and the page and the log say how far it got.
    LOADER.start()
    demo.queue(max_size=QUEUE_SIZE, default_concurrency_limit=1)
    quiet_when_idle(demo)
    # None lets Gradio read GRADIO_SERVER_NAME / GRADIO_SERVER_PORT (Spaces sets them), else localhost:7860.
    port = os.environ.get("PORT")
    demo.launch(server_name=os.environ.get("OUROBOROS_HOST"), server_port=int(port) if port else None,
                css=(ASSETS / "style.css").read_text(), head=f"<script>{(ASSETS / 'lanes.js').read_text()}</script>",
                show_error=False)


if __name__ == "__main__":
    main()
