"""One memo for answers computed from objects that are never changed once made.

Builds meet the same objects turn after turn (a counter's template dict per message, a session's
tools list, the messages a tokenizer library converted on an earlier build), so an answer derived
from them can be looked up by their identity instead of being made again or hashed by content.
The memo holds the objects themselves beside the answer, so an id is never reused while its entry
lives; when the memo is full it is cleared and answers are made again.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class IdentityMemo:
    """``get(objects, make, *args, key=...)``: ``make(*args)`` once per ``objects`` (by identity)
    and ``key`` (by value). ``limit`` bounds the summed ``size`` of the answers held (entries by
    default)."""

    def __init__(self, *, limit: int, size: Callable[[Any], int] | None = None) -> None:
        self._items: dict[tuple[Hashable, ...], tuple[tuple[Any, ...], Any]] = {}
        self._limit = limit
        self._size = size
        self._used = 0

    def get(self, objects: tuple[Any, ...], make: Callable[..., T], *args: Any,
            key: tuple[Hashable, ...] = ()) -> T:
        k = (*key, *map(id, objects))
        hit = self._items.get(k)
        if hit is not None:  # its objects are held, so these ids are theirs
            return hit[1]  # type: ignore[no-any-return]
        out = make(*args)
        n = self._size(out) if self._size is not None else 1
        if self._used + n > self._limit:
            self._items.clear()
            self._used = 0
        self._items[k] = (objects, out)
        self._used += n
        return out

    def __len__(self) -> int:
        return len(self._items)
