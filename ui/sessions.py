"""Per-visitor state kept on the server: stop flags for the visitor's races and, if asked for, a warm phrase pool."""

from __future__ import annotations

import threading
from collections import OrderedDict


class Stops:
    """One visitor's stop flags, one per race or replay a click armed. Arming stops every earlier one (Run during
    a race restarts it with the new prompt; one armed but not started yet never starts), and Stop stops them
    all, queued ones included; no flag is ever cleared, so a Stop just before a Run still ends its race."""

    def __init__(self):
        self._flags: dict[int, tuple[threading.Event, bool]] = {}  # number: (flag, taken by its race)
        self._armed = 0
        self._lock = threading.Lock()

    def arm(self) -> int:
        """A flag for a new race, and its number for the race to take it by; every earlier one is set."""
        with self._lock:
            for number, (flag, taken) in list(self._flags.items()):
                flag.set()
                if not taken:  # superseded before it started: it will not start
                    del self._flags[number]
            self._armed += 1
            self._flags[self._armed] = (threading.Event(), False)
            return self._armed

    def take(self, armed: int | None) -> tuple[int, threading.Event | None]:
        """The number and flag of the race armed as `armed` (None: armed now, for a caller without a click).
        None for the flag when that race must not start: a later click superseded it, or it was taken already."""
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

    def stop_all(self) -> None:
        with self._lock:
            for flag, _ in self._flags.values():
                flag.set()

    def __len__(self) -> int:
        return len(self._flags)


class Sessions:
    """Bounded (least recently used visitors fall out) and dropped when the visitor's page unloads, so
    nothing grows across visitors and no visitor's phrases reach another's pool."""

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


def visitor(request) -> str:
    """The visitor's key: Gradio's session hash (a gr.Request's)."""
    return request.session_hash or "anonymous"
