"""The page's handlers: what Run, Replay, Clear, the step slider and the loading ticks do. Each
takes the page's inputs by name and returns its outputs keyed by component (RaceView, LoadingView),
so no list has to line up with an event's outputs; app.py lays the page out and wires the events."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import gradio as gr
from gradio.components import Component

from ouroboros_core.race import Lane
from ui.frames import TEXT_EVERY_S, RaceView, streamed
from ui.guard import KNOBS, check_race, refuse, room_line, shielded
from ui.inspect import step_view
from ui.page import has_store, pair_description, pair_settings
from ui.racing import Racing, log_race
from ui.render import legend_html, prompt_tail
from ui.replay import replay, speed_for
from ui.sessions import Sessions, visitor
from ui.threads import Latest

LOAD_EVERY_S = 0.5  # the loading status and Run's wait for the pair, twice a second
RUNNING = (
    '<div class="race-running">Racing: Stop ends it; Run again restarts it with the prompt '
    "as it is now.</div>"
)


@dataclass
class RaceHandlers:
    """Run (accepting the click, waiting for the pair, the race, its end), Replay, Clear and the
    step inspector, each for the visitor's own session."""

    racing: Racing
    sessions: Sessions
    view: RaceView
    pool_size: int  # phrases one visitor's warm pool may hold

    def accept_run(self, request: gr.Request, **inputs) -> dict:
        """Run pressed, inputs accepted (a refusal changes nothing): the race is armed, Replay goes
        off now, not at the race's first frame a queue away (a Replay then would stop it), and the
        legend names what it can show."""
        knobs = {name: inputs[name] for name in KNOBS}
        settings = {**pair_settings(self.racing.loader.engine), **knobs}
        return {
            self.view.armed: self.sessions.arm(request),
            self.view.replay: gr.update(interactive=False),
            self.view.legend: legend_html(settings, has_store(self.racing.loader.engine)),
        }

    @shielded
    def await_pair(self) -> Iterator[str]:
        """Before a race from the page: wait for the pair outside the device queue (and, on ZeroGPU,
        outside any GPU function), showing how far loading has got where the badge will be; a pair
        that failed stops the race."""
        loader = self.racing.loader
        while not loader.settle(timeout=LOAD_EVERY_S):
            yield loader.status_html()
        self.racing.visitor_engine()  # refuses with the sentence if loading failed
        yield ""

    @shielded
    def race(self, request: gr.Request, armed: int | None = None, **inputs) -> Iterator[dict]:
        """Run's race. inputs: the page's, by name (check_race's, with_speculative, colour and
        warm_pool); armed: the race's number from Sessions.arm at the Run (its stop flag), None arms
        one now."""
        who = visitor(request)
        session = self.sessions.get(who)
        armed, stop = session["stops"].take(armed)  # set already if Stop came since the click
        if stop is None:  # another Run came first: that race, not this one, takes the page
            return
        updates = Latest(())
        try:
            asked = check_race(inputs, self.racing.limits)
            engine = self.racing.loader.engine
            chat = engine is not None and engine.chat and not asked.raw
            context = "" if chat else prompt_tail(asked.prompt)  # an answer opens empty
            session["race"] = None  # a replay of the last race stops here
            speculative = ["speculative"] if inputs["with_speculative"] else []
            methods = ["vanilla", "ouroboros"] + speculative
            pools = {"ouroboros": self.warm_pool(session)} if inputs["warm_pool"] else {}
            colour, view = inputs["colour"], self.view
            # At once, before the first step: the lanes open on the prompt's last line, with the
            # racing line.
            empty = {method: Lane(method) for method in methods}
            yield {
                **view.frame(empty, colour, False, context=context),
                **view.inspected(None),
                view.status: RUNNING,
            }
            mark = self.racing.watch.busy_windows  # whether this race meets a busy machine
            updates = Latest(self.racing.run(asked, methods, stop, pools))
            yield from streamed(view, updates, colour, context)
            lanes = updates.value
            if lanes is not None:
                final = self.racing.final(asked, lanes, mark)
                session["race"] = (lanes, final, context)
                yield {
                    **view.frame(lanes, colour, final=final, context=context),
                    **view.inspected(lanes),
                    view.status: "",
                }
        finally:  # also when the page goes away mid-race: the lanes so far
            session["stops"].release(armed)
            log_race(who, updates.value)

    def warm_pool(self, session: dict):
        """The visitor's warm phrase pool, made at their first race that keeps one."""
        if session.get("pool") is None:
            session["pool"] = self.racing.visitor_engine().new_pool(pool_size=self.pool_size)
        return session["pool"]

    def race_over(self, request: gr.Request) -> dict:
        """The racing line goes; Replay comes back for the last race unless a later Run has armed
        another."""
        return {
            self.view.status: "",
            self.view.replay: gr.update(interactive=self.sessions.replayable(request)),
        }

    @shielded
    def replay(
        self, speed, colour, request: gr.Request, armed: int | None = None
    ) -> Iterator[dict]:
        """The session's last race again, from its recorded events, at its true relative timings
        times `speed`."""
        session = self.sessions.get(visitor(request))
        armed, stop = session["stops"].take(armed)
        if stop is None:
            return
        try:
            recorded = session.get("race")
            if recorded is None:
                raise refuse(
                    "Run a race first: Replay shows the last race again, at the speed you pick."
                )
            lanes, final, context = recorded
            try:
                speed = speed_for(speed, lanes)
            except ValueError as err:
                raise refuse(str(err)) from None
            frames = streamed(self.view, replay(lanes, speed, stop, TEXT_EVERY_S), colour, context)
            for frame in frames:
                if session.get("race") is not recorded:  # a new race, or Clear: not our lanes
                    return
                yield frame
            yield self.view.frame(lanes, colour, final=final, context=context)
        finally:
            session["stops"].release(armed)

    def inspect_step(self, number, request: gr.Request) -> str:
        """The inspector for the slider's value as sent (the listener skips Gradio's own bounds
        check)."""
        recorded = self.sessions.get(visitor(request)).get("race")
        if recorded is None or "ouroboros" not in recorded[0]:
            return ""
        return step_view(recorded[0]["ouroboros"], number)

    def clear(self, request: gr.Request) -> dict:
        """Empty the page: whatever runs stops, and the last race is forgotten (Replay has nothing
        to show)."""
        self.sessions.forget_race(request)
        return self.view.cleared()


@dataclass
class LoadingView:
    """What the page shows of the pair, on page load and on each tick while it loads: the loading
    status, the pair's line, whether to keep ticking, the knobs' sliders once the pair (and so its
    own settings) is ready, the prompt's size in tokens, and the legend for a race at the pair's
    settings."""

    racing: Racing
    status: Component
    pair: Component
    timer: Component
    knobs: dict[str, Component]  # the knobs' sliders, by name
    room: Component
    legend: Component

    @property
    def outputs(self) -> list[Component]:
        return [self.status, self.pair, self.timer, *self.knobs.values(), self.room, self.legend]

    def pair_line(self) -> str:
        """The pair and, once it is loaded, the device and dtype it runs on."""
        return pair_description(self.racing.loader.engine)

    def knob_values(self) -> dict[str, int]:
        """The sliders' starting values: the loaded pair's own settings for its device, else the
        engine's."""
        settings = pair_settings(self.racing.engine())
        return {name: settings[name] for name in self.knobs}

    def refresh(self, text: str = "", length: int = 128) -> dict:
        """The lines for the prompt `text` and `length` new tokens; the sliders and the legend are
        left alone until the pair is ready."""
        loader = self.racing.loader
        values = {
            self.status: loader.status_html(),
            self.pair: self.pair_line(),
            self.timer: gr.Timer(active=not loader.finished),
            self.room: room_line(loader.engine, text, length),
        }
        if loader.finished and loader.error is None:
            values.update((self.knobs[name], value) for name, value in self.knob_values().items())
            values[self.legend] = legend_html(
                pair_settings(loader.engine), has_store(loader.engine)
            )
        return values
