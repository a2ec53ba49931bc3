"""The one bounded cache (``CharMemo``), the memos built on it, and the one budget that bounds
every process-wide memo able to hold message text.

Builds meet the same objects turn after turn (a counter's template dict per message, a session's
tools list, the messages a tokenizer library converted on an earlier build), so an answer derived
from them is looked up by value (``CharMemo``) or by their identity (``IdentityMemo``, ``Walks``,
which hold the objects so that an id is never reused while its entry lives). A memo keyed by
messages keeps them alive after their session was evicted from a replica's cache, so each is
bounded by the characters it holds, counted as entries go in, against one budget: ``budget()``,
set for the process by ``configure`` (from ``live_bytes``: ``sessions/replica.py``,
``memo_chars``), which resizes the memos that exist too. A full memo is cleared.
"""

from __future__ import annotations

import itertools
import operator
import weakref
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")

DEFAULT_CHARS = 32 << 20
"""Each memo's budget until ``configure`` is called: 32M characters, what ``live_bytes``' default
(1 GiB) gives."""

_chars = DEFAULT_CHARS
_bounded: weakref.WeakSet[Any] = weakref.WeakSet()


def budget() -> int:
    """The characters each process-wide memo may hold."""
    return _chars


def configure(chars: int) -> None:
    """Set every memo's budget to ``chars`` characters (those that exist and those made later);
    one now over it is cleared."""
    global _chars
    _chars = max(1, int(chars))
    for memo in list(_bounded):
        memo.limit_chars = _chars
        if memo.chars > _chars:
            memo.clear()


def bounded() -> Iterator[Any]:
    """The memos that take the budget (each with ``chars``, the characters it holds, and
    ``limit_chars``), for tests and benchmarks."""
    return iter(list(_bounded))


class CharMemo(dict[K, V]):
    """The one bounded cache: a dict bounded by the characters its entries hold (the process-wide
    budget) and, with ``limit``, by its entries. ``get`` is the dict's own (the hot path); ``put``
    counts the entry's characters and clears the memo first when the entry would take it over
    either bound (an entry larger than the budget is not kept)."""

    def __init__(self, limit: int = 0) -> None:
        super().__init__()
        self.chars = 0
        self.limit = limit or 1 << 62
        self.limit_chars = _chars
        _bounded.add(self)

    def put(self, key: K, value: V, chars: int = 1) -> V:
        if self.chars + chars > self.limit_chars or len(self) >= self.limit:
            self.clear()
            if chars > self.limit_chars:  # larger than the whole budget: not kept
                return value
        self[key] = value
        self.chars += chars
        return value

    def clear(self) -> None:
        super().clear()
        self.chars = 0

    __hash__ = object.__hash__  # type: ignore[assignment]  # (a WeakSet member)


class IdentityMemo:
    """``get(objects, make, *args, key=...)``: ``make(*args)`` once per ``objects`` (by identity)
    and ``key`` (by value), held in a ``CharMemo`` (with the objects, so an id is never reused
    while its entry lives). ``size``: the characters of an answer (default one); ``limit``:
    entries."""

    def __init__(self, *, limit: int = 0, size: Callable[[Any], int] | None = None) -> None:
        self._items: CharMemo[Hashable, tuple[tuple[Any, ...], Any]] = CharMemo(limit)
        self._size = size

    def get(self, objects: tuple[Any, ...], make: Callable[..., T], *args: Any,
            key: tuple[Hashable, ...] = ()) -> T:
        k = (*key, *map(id, objects))
        hit = self._items.get(k)
        if hit is not None:  # its objects are held, so these ids are theirs
            return hit[1]  # type: ignore[no-any-return]
        out = make(*args)
        self._items.put(k, (objects, out), self._size(out) if self._size is not None else 1)
        return out

    def one(self, obj: Any, make: Callable[..., T], *args: Any) -> T:
        """``get((obj,), make, *args)`` without a key, looked up by ``id(obj)`` alone: no key tuple
        built per call (``tojson`` of a session's tools, a fifth of a window render at the tuple's
        cost: ``bench_instructions``). Its entries never meet ``get``'s, whose keys are tuples."""
        hit = self._items.get(id(obj))
        if hit is not None:  # its object is held, so the id is its own
            return hit[1]  # type: ignore[no-any-return]
        out = make(*args)
        self._items.put(id(obj), ((obj,), out), self._size(out) if self._size is not None else 1)
        return out


LOOKBACK = 8
"""How far from a list's end the last item of the list it extends is looked for."""

WAYS = 4
"""Walks kept per last item: a session's prompt and its history as received end with the same
message, and where the adapter does not rewrite each message alone each build walks both (the
history otherwise extends one list: ``TemplateCounter._grown``); with one way each, they would
replace each other every build and walk the whole history again (``bench_flat``'s growth with
history)."""

SHARED_START = 16
"""How many items a walk may hold and still be kept beside the walks that extend it."""

TAIL = 4
"""A walk is also found by its item this many places before its last: a build's list may replace
the last items of the one before it (the model's failed call and its result, collapsed once the
model has answered them: ``core/steps/failures.py``), and then no longer holds that list's last
item (a third of the turns of a 2M-character session walked their whole window again:
``bench_flat``)."""

W = TypeVar("W")


def same_objects(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items of two sequences are the same objects (compared in C). Where the last
    item they could share is the same object and every one before it is the same or equal, all
    are taken as shared: what is derived from an item is the same for an equal one, and the usual
    case, one list extending the other, is then one comparison by identity in C (a walk with
    ``is_not`` per item cost ~60 us per 2K items on every build: ``bench_flat``)."""
    n = min(len(a), len(b))
    if n and a[n - 1] is b[n - 1] and heads_equal(a, b, n):
        return n
    return leading_same(a, b)


def remapped(previous: tuple[list[Any], list[Any]], items: Sequence[Any], convert: Callable[[Any], Any]
             ) -> tuple[tuple[list[Any], list[Any]], list[Any]]:
    """``[convert(x) for x in items]``, taking the outputs of the leading items ``items`` shares
    (``same_objects``) with the list of the ``previous`` call, which is ``(items, outputs)``; and
    this call's pair, for the next one. A build's list mostly repeats the previous build's, so it
    converts only the rest in Python."""
    before, held = previous
    shared = same_objects(before, items)
    out = held[:shared] + [convert(x) for x in items[shared:]]
    return (list(items), out), out


def heads_equal(a: Sequence[Any], b: Sequence[Any], n: int) -> bool:
    """Whether the first ``n`` items of ``a`` and ``b`` are equal, each the same object or equal
    (compared in C, by identity first); one of length ``n`` is compared whole, not copied: half
    the cost on a long history."""
    return (a if len(a) == n else a[:n]) == (b if len(b) == n else b[:n])


def leading_same(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items of two sequences are the same objects, by identity alone, counted in C."""
    return next(itertools.compress(itertools.count(), map(operator.is_not, a, b)), min(len(a), len(b)))


class Walks(Generic[W]):
    """Recent walks over lists, by the identity of each list's last item: a build's request
    extends an earlier one of the same conversation and holds that one's last message a few
    places from its end. (Conversations of one agent often begin alike, the same system prompt and
    first messages converted once, so their first messages tell them apart less well.) The lists
    are kept with the walks, so an id stays its own while its walk is held.

    Up to ``WAYS`` walks end with the same item; ``find`` takes the one sharing the most with the
    list, of all those ending in its last ``LOOKBACK`` items.
    Held in a ``CharMemo`` of ``limit`` walks, against the summed ``size`` of the items of the
    lists held (characters of text). A walk kept for a list that
    extends all of the one ``find`` gave for it replaces that one (a conversation holds one walk,
    its latest), and its size is that one's plus its new items' (the hot path sizes only those).
    A walk of up to ``SHARED_START`` items stays: it may be the start several conversations share
    (one agent's system prompt and first messages), each to extend it. A list that extends no walk
    also meets those it shares all but their last ``TAIL`` items with (each walk is indexed by its
    item ``TAIL`` places before its last too), and the one it shares most with is replaced."""

    def __init__(self, limit: int = 1024, *, size: Callable[[Any], int]) -> None:
        self._items: CharMemo[int, tuple[list[Any], W, int]] = CharMemo(limit)
        """Each walk by the id of its list's last item times ``WAYS`` plus its way: one int per
        walk, so that ``find``'s probes of every way of its last items build no key tuples."""
        self._anchors: CharMemo[int, list[int]] = CharMemo(limit)
        """The keys of the walks by the id of their item ``TAIL`` before the last (each checked by
        identity when met: a key may hold another walk since)."""
        self._size = size
        self._found: tuple[Sequence[Any] | None, int, int] = (None, 0, 0)
        """The list ``find`` was given last, the key of the walk it found, and their shared items."""

    def find(self, items: Sequence[Any]) -> tuple[W | None, int]:
        """The walk of the list ``items`` extends, and how many first items the two share (by
        identity); ``(None, 0)`` if none is held."""
        best: tuple[W, int, int] | None = None
        others = []
        get = self._items.get
        for item in reversed(items[-LOOKBACK:]):
            first = id(item) * WAYS
            for key in range(first, first + WAYS):
                hit = get(key)
                if hit is None:
                    continue
                inputs = hit[0]
                n = len(inputs)
                # a walk this list extends holds its last input where the list does: compared
                # whole only then (the others share less; each compare walks the shared items)
                if (n <= len(items) and inputs[-1] is items[n - 1] and (best is None or n > best[2])
                        and same_objects(inputs, items) == n):
                    best = (hit[1], key, n)
                    continue
                others.append((hit, key))
            if best is not None:
                # every walk that ends in an earlier item and that the list extends is shorter:
                # the rest are not probed (32 probes a find were most of its cost: bench_turns)
                break
        if best is None:
            for item in items[-(LOOKBACK + TAIL):]:
                for key in self._anchors.get(id(item), ()):
                    hit = self._items.get(key)
                    if hit is not None and len(hit[0]) > TAIL and hit[0][-1 - TAIL] is item:
                        others.append((hit, key))
            for hit, key in others:
                shared = same_objects(hit[0], items)
                if best is None or shared > best[2]:
                    best = (hit[1], key, shared)
        if best is None:
            self._found = (None, 0, 0)
            return None, 0
        self._found = (items, best[1], best[2])
        return best[0], best[2]

    def keep(self, items: Sequence[Any], walk: W) -> None:
        size = self._superseded(items)
        first = id(items[-1]) * WAYS
        free = [k for k in range(first, first + WAYS) if k not in self._items]
        key = free[0] if free else first + WAYS - 1  # all taken: the last way is given up
        self._drop(key)
        self._items.put(key, (list(items), walk, size), size)
        if len(items) > TAIL:
            anchor = id(items[-1 - TAIL])
            keys = self._anchors.get(anchor)
            if keys is None:
                self._anchors.put(anchor, [key])
            elif key not in keys:
                keys[:] = [*keys[1 - WAYS:], key]

    def _drop(self, key: int) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self._items.chars -= old[2]

    def _superseded(self, items: Sequence[Any]) -> int:
        """The size of ``items``; the walk ``find`` gave for them, when they extend all of its
        list but at most its last ``TAIL`` items, is dropped (this one supersedes it) and its size
        is reused."""
        found, key, shared = self._found
        self._found = (None, 0, 0)
        if found is items:
            held = self._items.get(key)
            if held is not None and shared >= len(held[0]) - TAIL and (
                    shared > SHARED_START or shared == len(held[0])):  # (a shared start stays, whole)
                if shared > SHARED_START:
                    self._drop(key)
                return held[2] - sum(map(self._size, held[0][shared:])) + sum(map(self._size, items[shared:]))
        return sum(map(self._size, items))
