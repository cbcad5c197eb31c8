"""Per-visitor state kept on the server: stop flags for the visitor's races and, if asked for, a
warm phrase pool; and the page's clicks that touch nothing else."""

from __future__ import annotations

import threading
from collections import OrderedDict

import gradio as gr

from ui.inspect import replayable


class Stops:
    """One visitor's stop flags, one per race or replay a click armed. Arming stops every earlier
    one (Run during a race restarts it with the new prompt; one armed but not started yet never
    starts), and Stop stops them all, queued ones included; no flag is ever cleared, so a Stop just
    before a Run still ends its race."""

    def __init__(self):
        self._flags: dict[
            int, tuple[threading.Event, bool]
        ] = {}  # number: (flag, taken by its race)
        self._armed = 0
        self._lock = threading.Lock()

    def arm(self) -> int:
        """A flag for a new race, and its number for the race to take it by; every earlier one is
        set."""
        with self._lock:
            for number, (flag, taken) in list(self._flags.items()):
                flag.set()
                if not taken:  # superseded before it started: it will not start
                    del self._flags[number]
            self._armed += 1
            self._flags[self._armed] = (threading.Event(), False)
            return self._armed

    def take(self, armed: int | None) -> tuple[int, threading.Event | None]:
        """The number and flag of the race armed as `armed` (None: armed now, for a caller without a
        click). None for the flag when that race must not start: a later click superseded it, or it
        was taken already."""
        if armed is None:
            armed = self.arm()
        with self._lock:
            flag, taken = self._flags.get(armed, (None, True))
            if taken:
                return armed, None
            self._flags[armed] = (flag, True)
            return armed, flag

    def release(self, armed: int) -> None:
        """The race is over: forget its flag."""
        with self._lock:
            entry = self._flags.get(armed)
            if entry is not None and entry[1]:
                del self._flags[armed]

    def idle(self) -> bool:
        """No race or replay of this visitor's is armed, waiting or running."""
        with self._lock:
            return not self._flags

    def stop_all(self) -> None:
        with self._lock:
            for flag, _ in self._flags.values():
                flag.set()

    def __len__(self) -> int:
        return len(self._flags)


class Sessions:
    """Bounded (least recently used visitors fall out) and dropped when the visitor's page unloads,
    so nothing grows across visitors and no visitor's phrases reach another's pool."""

    def __init__(self, capacity: int = 256):
        self.capacity = capacity
        self._items: OrderedDict[str, dict] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> dict:
        with self._lock:
            item = self._items.pop(key, None) or {"stops": Stops(), "pool": None}
            self._items[key] = item
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
            return item

    def drop(self, key: str) -> None:
        with self._lock:
            item = self._items.pop(key, None)
        if item is not None:
            item["stops"].stop_all()

    def __len__(self) -> int:
        return len(self._items)

    # The page's clicks that touch only this state: Gradio runs them at once, outside the device's
    # queue.
    def arm(self, request: gr.Request) -> int:
        """Run or Replay pressed, before the race waits for the device: whatever this visitor had
        running or queued stops within a step, and the new race gets a stop flag of its own, which a
        Stop pressed from now on sets, even while the race still waits in the queue."""
        return self.get(visitor(request))["stops"].arm()

    def stop(self, request: gr.Request) -> None:
        self.get(visitor(request))["stops"].stop_all()

    def leave(self, request: gr.Request) -> None:
        """The visitor's page has gone: its races stop and its state goes."""
        self.drop(visitor(request))

    def forget_race(self, request: gr.Request) -> None:
        """Clear: whatever runs stops, and the last race is gone (Replay has nothing to show)."""
        session = self.get(visitor(request))
        session["stops"].stop_all()
        session["race"] = None

    def replayable(self, request: gr.Request) -> bool:
        """Whether Replay may come back: the last race has something to show, and no later click has
        armed another race (a Replay would stop it before its first frame)."""
        session = self.get(visitor(request))
        last = (session.get("race") or [None])[0]  # the app records (lanes, final figures, context)
        return session["stops"].idle() and replayable(last)


def visitor(request) -> str:
    """The visitor's key: Gradio's session hash (a gr.Request's)."""
    return request.session_hash or "anonymous"
