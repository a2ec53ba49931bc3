"""One memo for answers computed from objects that are never changed once made.

Builds meet the same objects turn after turn (a counter's template dict per message, a session's
tools list, the messages a tokenizer library converted on an earlier build), so an answer derived
from them can be looked up by their identity instead of being made again or hashed by content.
The memo holds the objects themselves beside the answer, so an id is never reused while its entry
lives; when the memo is full it is cleared and answers are made again.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

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


LOOKBACK = 8
"""How far from a list's end the last item of the list it extends is looked for."""

W = TypeVar("W")


def same_objects(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items of two sequences are the same objects (compared in C)."""
    return next(itertools.compress(itertools.count(), map(operator.is_not, a, b)), min(len(a), len(b)))


class Walks(Generic[W]):
    """Recent walks over lists, by the identity of each list's last item: a build's request
    extends an earlier one of the same conversation and holds that one's last message a few
    places from its end. (Conversations of one agent often begin alike, the same system prompt and
    first messages converted once, so their first messages tell them apart less well.) The lists
    are kept with the walks, so an id stays its own while its walk is held."""

    def __init__(self, limit: int = 1024) -> None:
        self._items: dict[int, tuple[list[Any], W]] = {}
        self._limit = limit

    def find(self, items: Sequence[Any]) -> tuple[W | None, int]:
        """The walk of the list ``items`` extends, and how many first items the two share (by
        identity); ``(None, 0)`` if none is held."""
        for item in reversed(items[-LOOKBACK:]):
            hit = self._items.get(id(item))
            if hit is not None:
                inputs, walk = hit
                return walk, same_objects(inputs, items)
        return None, 0

    def keep(self, items: Sequence[Any], walk: W) -> None:
        if len(self._items) >= self._limit:
            self._items.clear()
        self._items[id(items[-1])] = (list(items), walk)
