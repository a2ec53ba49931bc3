"""A bounded, thread-safe memo: at most ``entries`` entries and ``max_bytes`` (each entry's size
as its owner counts it), the least recently used dropped first. The proxy's per-conversation
caches (``intake.Recent``, ``turns.ProxySessions``' comparisons, ``reconcile.ForkIds``) are
bounded with it, like the replica's cache of sessions."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Bounded(Generic[K, V]):
    def __init__(self, *, entries: int, max_bytes: int) -> None:
        self.entries = entries
        self.max_bytes = max_bytes
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def size(self) -> int:
        """The sizes of the entries held, added up."""
        return self._bytes

    def get(self, key: K) -> V | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def peek(self, key: K) -> V | None:
        """``get``, leaving the order of use as it was."""
        with self._lock:
            item = self._items.get(key)
            return item[0] if item is not None else None

    def put(self, key: K, value: V, size: int) -> None:
        """Keep ``value`` (in place of any under ``key``); one larger than ``max_bytes`` is not kept."""
        with self._lock:
            old = self._items.pop(key, None)
            self._bytes -= old[1] if old is not None else 0
            if size > self.max_bytes:
                return
            self._items[key] = (value, size)
            self._bytes += size
            while len(self._items) > self.entries or self._bytes > self.max_bytes:
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped
