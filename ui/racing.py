"""A checked race run on the device, for the page and for /race alike: the lanes as they stream,
each drafting lane's verdict against vanilla, the figures a finished race reports, and the log
line."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

from ouroboros_core import ConfigError, OutputVerdict
from ouroboros_core.cpu import BusyWatch
from ouroboros_core.race import Lane, race
from ui.calibration import Calibration
from ui.guard import Limits, RaceRequest, refuse
from ui.loading import PairLoader, visitor_engine
from ui.render import api_result, race_log_line, sampling_line
from ui.threads import DeviceThread
from ui.loops import repeated_share

API_EVERY_S = 0.25  # /race streams the lanes four times a second
log = logging.getLogger("ouroboros.app")


@dataclass
class Racing:
    """What every race shares, made once by app.py: the host's limits, the pair's loader, the device
    thread every engine call runs on, the busy watch and the step costs measured so far."""

    limits: Limits
    loader: PairLoader
    device: DeviceThread
    watch: BusyWatch
    calibration: Calibration

    def engine(self):
        """The loaded pair, waiting for it if it is still loading (and starting the load if nobody
        has); raises LoadError with the sentence the page shows if it failed."""
        return self.loader.wait()

    def visitor_engine(self):
        """engine() for a handler: a pair that failed to load becomes the visitor's message, not a
        traceback."""
        return visitor_engine(self.engine)

    def run(
        self, asked: RaceRequest, methods: list[str], stop=None, pools: dict | None = None
    ) -> Iterator[dict[str, Lane]]:
        """The lanes of a checked race as they stream; request errors the engine finds become
        messages for the visitor. stop: the race's stop flag; pools: a warm pool by method."""
        engine = self.visitor_engine()
        per_method = {
            method: {**asked.sampling, **(asked.options if method == "ouroboros" else {})}
            for method in methods
        }
        try:
            updates = race(
                engine,
                asked.prompt,
                methods,
                asked.max_new_tokens,
                per_method,
                stop,
                pools or {},
                raw=asked.raw,
                watch=self.watch,
            )
            # race() is a generator: the engine validates the request on its first step, so take it
            # here.
            first = self.device.call(next, updates)
        except ConfigError as err:
            raise refuse(str(err)) from None
        return itertools.chain([first], self.device.iterate(updates))

    def verdicts(self, asked: RaceRequest, lanes: dict[str, Lane]) -> dict[str, OutputVerdict]:
        """Each drafting lane's output against vanilla's, once every lane has finished (not when
        stopped)."""
        unfinished = (
            lane.done is None or lane.done.stop_reason == "cancelled" for lane in lanes.values()
        )
        if any(unfinished):
            return {}
        reference = lanes["vanilla"].done.token_ids
        engine = self.engine()
        return {
            method: self.device.call(
                engine.verdict,
                asked.prompt,
                reference,
                lane.done.token_ids,
                **asked.sampling,
                raw=asked.raw,
            )
            for method, lane in lanes.items()
            if method != "vanilla"
        }

    def final(self, asked: RaceRequest, lanes: dict[str, Lane], mark: int) -> dict:
        """A finished race's figures for the page: its verdicts, whether it met a busy machine since
        the watch's count `mark` (the CPU share its steps got, or None), the step costs measured
        before it (and it counted for the next races), and its sampling line."""
        busy = self.watch.busy_since(mark)
        return {
            "verdicts": self.verdicts(asked, lanes),
            "busy": busy,
            "costs": self.calibration.take(lanes, busy=busy is not None),
            "sampling": sampling_line(asked.sampling, drawn=asked.seed_drawn),
        }

    def api(self, asked: RaceRequest) -> Iterator[dict]:
        """/race's messages for a checked request: the lanes as they stream, then the finished race
        with each lane's steps and sampling, and the Ouroboros lane's verdict."""
        lanes, last, mark = None, 0.0, self.watch.busy_windows
        try:
            for lanes in self.run(asked, ["vanilla", "ouroboros"]):
                now = time.perf_counter()
                if now - last >= API_EVERY_S:
                    last = now
                    yield api_result(lanes)
            final = api_result(lanes)
            for method, lane in lanes.items():  # the engine's step events, as the CLI's --events
                final[method]["steps"] = [event.to_dict() for event in lane.events]
            verdict = self.verdicts(asked, lanes).get("ouroboros")
            self.calibration.add(lanes, busy=self.watch.busy_since(mark) is not None)
            final["ouroboros"]["verdict"] = verdict.to_dict() if verdict else None
            final["ouroboros"].update(race_figures(lanes))
            for lane in final.values():
                lane["sampling"] = asked.sampling or None
            yield final
        finally:  # also when the client cancels: a generator left alone stops computing at once
            log_race("api", lanes)


def race_figures(lanes: dict[str, Lane]) -> dict:
    """What a finished race shows beside its lanes, for API clients: Ouroboros's speed over
    vanilla's by the clock (tokens per second), vanilla's target forwards over Ouroboros's, and the
    share of the answer that repeats its own earlier text (the page's loop note)."""
    vanilla, ouroboros = lanes["vanilla"].done.stats, lanes["ouroboros"].done.stats
    return {
        "speedup": round(ouroboros.tokens_per_second / vanilla.tokens_per_second, 3)
        if vanilla.tokens_per_second
        else None,
        "forward_ratio": round(vanilla.target_forwards / ouroboros.target_forwards, 3)
        if ouroboros.target_forwards
        else None,
        "repeats": round(repeated_share(list(lanes["ouroboros"].done.token_ids)), 3),
    }


def log_race(who: str, lanes: dict[str, Lane] | None) -> None:
    if lanes:
        log.info("race %s: %s", who[:8], race_log_line(lanes))
