"""The model pair, loaded in the background while the page is already served: how far it has got,
for the page and the log, and one sentence saying what to set when it fails. The server goes on
serving either way."""

from __future__ import annotations

import functools
import html
import logging
import os
import threading
import time
from collections.abc import Callable

from ouroboros_core.models import DEFAULT_PRESET, LoadError, LoadStage, Report, presets
from ui.guard import refuse

log = logging.getLogger("ouroboros.app")
CHECK_LOG = "The details are in the server's log (on a Space: its Logs tab)."


def pair_from_env() -> tuple[str, str | None]:
    """The pair the host chose (a Space's variables; never the page): a preset, or a target and
    draft."""
    if os.environ.get("OUROBOROS_TARGET"):
        if not os.environ.get("OUROBOROS_DRAFT"):
            raise LoadError(
                "OUROBOROS_TARGET is set without OUROBOROS_DRAFT: set both, to folders or Hub ids"
            )
        return os.environ["OUROBOROS_TARGET"], os.environ["OUROBOROS_DRAFT"]
    name = os.environ.get("OUROBOROS_PRESET") or DEFAULT_PRESET
    if name not in presets():
        raise LoadError(
            f"OUROBOROS_PRESET={name!r} is not a preset: set it to one of "
            f"{', '.join(presets())}, or "
            f"set OUROBOROS_TARGET and OUROBOROS_DRAFT to folders or Hub ids"
        )
    return name, None


WARM_UP_PROMPT = 'def greet(name):\n    """Say hello to name."""\n'
WARM_UP_REQUEST = "Write a Python function that says hello to a name."


def load_pair(
    report: Report, warm_up: bool = True, check_memory: bool = True, calibration=None, watch=None
):
    """Load the pair the host chose and warm it up (not on ZeroGPU, where the first race, inside its
    GPU function, warms up instead, and where nothing may touch the device to check its memory).
    With a `watch` (ouroboros_core.cpu.BusyWatch) on a CPU, short races at each thread count pick
    the fastest. With a `calibration` (ui.calibration.Calibration), a short race of vanilla and
    Ouroboros after the warm-up gives it the first step costs, so the first visitor's race already
    has an expected speedup measured apart from it."""
    from ouroboros_core import load_engine
    from ouroboros_core.race import race

    target, draft = pair_from_env()
    engine = load_engine(
        target,
        draft,
        os.environ.get("OUROBOROS_DEVICE"),
        dtype=os.environ.get("OUROBOROS_DTYPE") or None,
        check_memory=check_memory,
        report=report,
        watch_threads=False,  # the app fits and watches its threads itself (app.py's WATCH)
    )
    if warm_up:
        report(LoadStage("warm up", "Warming up (one short race)"))
        engine.generate(
            WARM_UP_REQUEST if engine.chat else "def warm_up():\n", "ouroboros", 8
        )  # allocations, kernels
        prompt = WARM_UP_REQUEST if engine.chat else WARM_UP_PROMPT
        if watch is not None and engine.target.device.type == "cpu":
            report(LoadStage("warm up", "Timing a short race at each thread count"))
            log.info(watch.fit(functools.partial(short_race, engine, prompt)))
        if calibration is not None:
            lanes = None
            mark = watch.busy_windows if watch is not None else 0
            for lanes in race(engine, prompt, ["vanilla", "ouroboros"], 16, watch=watch):
                pass
            calibration.add(lanes, busy=watch is not None and watch.busy_since(mark) is not None)
    return engine


def start_threads(watch) -> None:
    """Size torch's threads to the CPU this container may use (cpu.set_torch_threads: the cgroup
    quota, not the host's cores) before the device thread's first torch op, and make that the
    ceiling `watch` fits the count under once the pair is loaded; OUROBOROS_THREADS fixes the count.
    A bad OUROBOROS_THREADS (a typo in a Space's variables) is logged and ignored rather than taking
    the page down."""
    from ouroboros_core.config import ConfigError
    from ouroboros_core.cpu import ENV_VAR, set_torch_threads

    try:
        choice = set_torch_threads()
    except ConfigError as err:
        log.error("%s; ignoring it", err)
        choice = set_torch_threads({})
    log.info(
        "torch threads: %s%s",
        choice,
        "" if choice.source == ENV_VAR else ", the most the race will try",
    )
    watch.reset(choice.count, fixed=choice.source == ENV_VAR)


def short_race(engine, prompt: str) -> None:
    """Both lanes of an 8-token race, one after the other: what a thread count is timed on."""
    for method in ("ouroboros", "vanilla"):
        engine.generate(prompt, method, 8)


def visitor_engine(get_engine):
    """get_engine() for a visitor's request: a pair that failed to load becomes their message, not a
    traceback."""
    try:
        return get_engine()
    except LoadError as err:
        raise refuse(str(err)) from None


def failure_sentence(err: BaseException) -> str:
    """What a visitor or host reads when the pair cannot load: the cause and what to set, in one
    sentence."""
    if isinstance(err, LoadError):
        text = str(err)
    elif (
        isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError"
    ):  # torch's, without torch here
        text = (
            "the device ran out of memory while loading the pair: pick a smaller pair "
            "(OUROBOROS_PRESET), a "
            "16-bit dtype (OUROBOROS_DTYPE=bfloat16) or larger hardware"
        )
    else:
        text = (
            f"loading failed with {type(err).__name__}: check OUROBOROS_PRESET, or "
            "OUROBOROS_TARGET and OUROBOROS_DRAFT"
        )
    return f"The model pair could not be loaded: {text.rstrip('.')}."


class PairLoader:
    """Loads the pair once, on `start`, through `submit` (the device thread, or a thread of its
    own), and keeps the latest stage. `load(report)` returns the engine; everything it raises ends
    as `error`, logged in full."""

    def __init__(
        self, load: Callable[[Report], object], submit: Callable[[Callable[[], None]], object]
    ):
        self._load = load
        self._submit = submit
        self._started = threading.Lock()
        self._done = threading.Event()
        self.began: float | None = None
        self.stage = LoadStage("waiting", "Waiting to load the model pair")
        self.engine = None
        self.error: str | None = None

    def start(self) -> None:
        """Begin loading unless it has begun; returns at once."""
        if self._started.acquire(blocking=False):
            self.began = time.perf_counter()
            self._submit(self._run)

    def settle(self, timeout: float | None = None) -> bool:
        """Whether loading has ended, loaded or failed, waiting up to `timeout` (starting it if
        nobody has)."""
        self.start()
        return self._done.wait(timeout)

    def wait(self, timeout: float | None = None):
        """The engine once loaded (starting the load if nobody has); None if `timeout` passed first.
        Raises LoadError with the failure sentence if loading failed."""
        if not self.settle(timeout):
            return None
        if self.error is not None:
            raise LoadError(self.error)
        return self.engine

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def report(self, stage: LoadStage) -> None:
        """Keep the latest stage; log a line when a step begins (each fetch, each model), not per
        file or byte."""
        if stage.done is None or stage.stage != self.stage.stage or stage.stage != "download":
            log.info("model pair: %s (%.1f s)", stage.text, time.perf_counter() - self.began)
        self.stage = stage

    def _run(self) -> None:
        try:
            engine = self._load(self.report)
        except (
            Exception
        ) as err:  # a thread's top level: whatever the load raised goes to the page and the log
            self.error = failure_sentence(err)
            log.error(
                "model pair failed to load: %s", self.error, exc_info=not isinstance(err, LoadError)
            )
        else:
            self.engine = engine
            log.info("model pair: ready in %.1f s", time.perf_counter() - self.began)
        finally:
            self._done.set()

    def status_html(self) -> str:
        """The page's line about the pair while it loads, or after it failed; empty once it is
        ready."""
        if self.error is not None:
            return (
                '<div class="load-status load-failed" role="alert">'
                f"<strong>{html.escape(self.error)}</strong> "
                f"{CHECK_LOG} The page still works; Run will say the same until the host fixes "
                "it.</div>"
            )
        if self.finished:
            return ""
        stage = self.stage
        bar = ""
        if stage.done is not None and stage.total:
            percent = min(100.0, 100.0 * stage.done / stage.total)
            bar = (
                f'<progress max="100" value="{percent:.0f}" aria-label="loading progress">'
                "</progress>"
            )
        elapsed = f" ({time.perf_counter() - self.began:.0f} s)" if self.began else ""
        return (
            '<div class="load-status" role="status">'
            '<span class="load-spinner" aria-hidden="true"></span>'
            "<strong>Getting the model pair ready:</strong> "
            f"{html.escape(stage.text)}{elapsed}. {bar}"
            f'<span class="load-note">Run waits until it is ready.</span></div>'
        )
