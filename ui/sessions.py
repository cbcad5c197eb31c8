"""Per-visitor state kept on the server: a stop flag and, if asked for, a warm phrase pool."""

from __future__ import annotations

import threading
from collections import OrderedDict


class Sessions:
    """Bounded (least recently used visitors fall out) and dropped when the visitor's page unloads, so
    nothing grows across visitors and no visitor's phrases reach another's pool."""

    def __init__(self, capacity: int = 256):
        self.capacity = capacity
        self._items: OrderedDict[str, dict] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> dict:
        with self._lock:
            item = self._items.pop(key, None) or {"stop": threading.Event(), "pool": None}
            self._items[key] = item
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
            return item

    def drop(self, key: str) -> None:
        with self._lock:
            item = self._items.pop(key, None)
        if item is not None:
            item["stop"].set()

    def __len__(self) -> int:
        return len(self._items)
