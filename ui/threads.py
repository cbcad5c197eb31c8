"""Where the handlers' loops run: every engine call on one device thread, and an iterator that keeps
its last item for the log line of a race the visitor left; Gradio's idle polling slowed, and the
event loops it drops closed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager


class DeviceThread:
    """Runs every engine call on one long-lived thread. On a CPU, PyTorch's OpenMP gives each thread
    that calls it a team of its own, and an idle team spins: with Gradio's worker threads taking
    turns, two teams fought over two cores and a target forward over 17 tokens took 22 ms instead of
    12 (measured), so the page showed half of Ouroboros' speedup. Not on ZeroGPU, whose GPU function
    runs in a process of its own, where a thread started here would not exist: there every call runs
    where it is made."""

    def __init__(self, inline: bool):
        self.ident = None  # the device thread's, once it has started
        self.executor = (
            None
            if inline
            else ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="device", initializer=self._started
            )
        )

    def _started(self) -> None:
        self.ident = threading.get_ident()

    def call(self, fn, *args, **kwargs):
        # Already on the device thread (get_engine() inside a call): waiting for that thread would
        # wait forever.
        if self.executor is None or threading.get_ident() == self.ident:
            return fn(*args, **kwargs)
        return self.executor.submit(fn, *args, **kwargs).result()

    def submit(self, fn) -> None:
        """Start fn on the device thread and return at once (on ZeroGPU: on a thread of its own)."""
        if self.executor is None:
            threading.Thread(target=fn, name="pair-loader", daemon=True).start()
        else:
            self.executor.submit(fn)

    def iterate(self, iterator):
        """The iterator's items, each taken on the device thread; closed there too, however it
        ends."""
        try:
            while True:
                try:
                    item = self.call(next, iterator)
                except StopIteration:
                    return
                yield item
        finally:
            self.call(getattr(iterator, "close", lambda: None))


class Latest:
    """Iterates over `items` and keeps the last one given, also when the consumer stops half-way."""

    def __init__(self, items):
        self.items = iter(items)
        self.value = None

    def __iter__(self):
        return self

    def __next__(self):
        self.value = next(self.items)
        return self.value


def quiet_when_idle(blocks) -> None:
    """Gradio's queue looks for work every 1 ms and for progress updates every 10 ms, busy or not:
    4.8% of a core on an idle server (measured, py-spy: the event loop's wake-ups). Every 100 ms and
    500 ms it is ~0.5%; a race starts at most 0.1 s later, and the app sends no progress updates."""
    queue = (
        blocks._queue
    )  # no public setting for these (gradio 6.31); tests/test_app.py measures idle CPU
    queue.sleep_when_free = max(queue.sleep_when_free, 0.1)
    queue.progress_update_sleep_when_free = max(queue.progress_update_sleep_when_free, 0.5)


class GradioLoops:
    """Closes the asyncio event loops Gradio discards. Gradio makes one for each lock and stop event
    it creates outside a running loop (gradio.utils.safe_get_lock and safe_get_stop_event: six as a
    Blocks is built, four at queue(), two at launch(); gradio 6.31), sets it as the thread's loop
    and never closes it, so each one the next replaces is garbage in a reference cycle. A full
    collection could finalise such a loop's self-pipe socket before the loop, whose __del__ then
    printed a traceback into the log ("Invalid file descriptor: -1"; it failed a Space rehearsal).
    Inside `with`, the loops made on the entering thread are kept; on leaving, all but the last
    made are closed (the last is the thread's loop still). Gradio's locks bind to no loop until
    used, on the server's own."""

    def __init__(self):
        self.made = []

    @contextmanager
    def closing(self) -> Iterator[None]:
        thread, new_event_loop = threading.get_ident(), asyncio.new_event_loop

        def kept():
            loop = new_event_loop()
            if threading.get_ident() == thread:
                self.made.append(loop)
            return loop

        asyncio.new_event_loop = kept
        try:
            yield
        finally:
            asyncio.new_event_loop = new_event_loop
            discarded, self.made = self.made[:-1], self.made[-1:]
            for loop in discarded:
                if not loop.is_running():
                    loop.close()
