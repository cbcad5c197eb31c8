"""A fair race of several methods on one device: interleave their steps, always advancing the lane
that is behind on its own clock, so each lane's clock counts only its own compute, as if it ran
alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from .events import DoneEvent, Stats, StepEvent, Token


@dataclass
class Lane:
    method: str
    committed: list[Token] = field(default_factory=list)
    # drafted tokens rejected in the latest step, shown for that step only
    rejected: tuple[Token, ...] = ()
    # every step so far, as the engine yielded it
    events: list[StepEvent] = field(default_factory=list)
    clock_s: float = 0.0  # this lane's own compute so far
    accepted: int = 0
    drafted: int = 0
    # (clock, tokens) points
    trace: list[tuple[float, int]] = field(default_factory=lambda: [(0.0, 0)])
    done: DoneEvent | None = None

    @property
    def steps(self) -> int:
        return len(self.events)

    @property
    def tokens(self) -> int:
        return len(self.committed)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.clock_s if self.clock_s > 0 else 0.0

    def apply(self, event: StepEvent | DoneEvent) -> None:
        if isinstance(event, DoneEvent):
            self.done = event
            self.rejected = ()
            self.clock_s = event.stats.seconds
            return
        self.committed.extend(event.committed)
        self.rejected = event.rejected
        self.events.append(event)
        self.clock_s = event.elapsed_s
        self.accepted += len(event.accepted)
        self.drafted += len(event.drafted)
        self.trace.append((self.clock_s, self.tokens))

    @property
    def stats(self) -> Stats | None:
        return self.done.stats if self.done else None


def race(
    engine,
    prompt: str,
    methods: list[str],
    max_new_tokens: int,
    options: dict[str, dict] | None = None,
    stop=None,
    pools: dict | None = None,
    raw: bool = False,
    watch=None,
) -> Iterator[dict[str, Lane]]:
    """Yield the lanes after every step of any lane. Requests are validated before the first yield.
    raw: the prompt as it is, not as a chat turn (Engine.encode). watch: a cpu.BusyWatch that times
    every step, for an engine without one of its own (load_engine(watch_threads=False))."""
    if watch is not None and getattr(engine, "watch", None) is not None:
        raise ValueError(
            "this engine watches its threads itself (load_engine's watch_threads): a second watch "
            "would change them too; load it with watch_threads=False to pass one"
        )
    options = options or {}
    pools = pools or {}
    streams = {}
    for method in methods:
        extra = {"pool": pools[method]} if method in pools else {}
        streams[method] = engine.stream(
            prompt, method, max_new_tokens, stop=stop, raw=raw, **extra, **options.get(method, {})
        )
    lanes = {method: Lane(method) for method in methods}
    try:
        while True:
            running = [m for m in methods if lanes[m].done is None]
            if not running:
                break
            behind = min(running, key=lambda m: lanes[m].clock_s)
            if watch is not None:
                watch.begin()
            lanes[behind].apply(next(streams[behind]))
            if watch is not None:
                watch.end()
            yield lanes
    finally:
        for stream in streams.values():
            stream.close()
