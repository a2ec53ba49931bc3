"""A prompt's text held as the pieces it was made of (``Rope``), so that a turn that replaces only
its tail copies only the tail.

A windowed render (``core/incremental.py``) makes the new prompt text from the previous one cut at
an anchor plus the window's render. As one ``str`` that is a copy of the whole prompt on every
turn: ~120K characters at a 32K window, four bytes each once the prompt holds a single character
outside the BMP (an emoji in a tool output makes the whole string UCS-4), so ~480 KB written per
turn (~28 us), and a second full copy kept alive beside the session's previous text. A ``Rope``
keeps the pieces: cutting it copies only the piece the cut falls in (the previous window's text),
and consecutive texts share their unchanged pieces. Readers take ``str`` slices of it, which is
all that counting and comparing need (special-token scans and piece counts near the end).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import accumulate

MERGE = 32
"""Past this many pieces the oldest are joined into one (one copy every ``MERGE // 2`` turns):
slicing stays a short search, and a long session's rope stays short."""


class Rope:
    """An immutable text made of pieces. ``len``, slicing (to a ``str``), ``cut``, equality with a
    ``str`` or another rope, ``startswith``/``endswith``; ``str()`` joins it."""

    __slots__ = ("parts", "ends")

    def __init__(self, parts: Sequence[str]) -> None:
        kept = [p for p in parts if p]
        if len(kept) > MERGE:
            keep = MERGE // 2
            kept = ["".join(kept[:-keep]), *kept[-keep:]]
        self.parts = tuple(kept)
        self.ends = list(accumulate(map(len, kept)))

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    def __str__(self) -> str:
        return "".join(self.parts)

    def __repr__(self) -> str:
        return f"Rope({len(self.parts)} parts, {len(self)} chars)"

    def __getitem__(self, key: slice) -> str:
        if not isinstance(key, slice):
            raise TypeError("a Rope is read by slices")
        start, stop, step = key.indices(len(self))
        if step != 1:
            raise ValueError("a Rope is read by contiguous slices")
        if start >= stop:
            return ""
        ends, parts = self.ends, self.parts
        i = bisect_right(ends, start)  # the piece holding position start
        j = bisect_left(ends, stop)  # the piece holding position stop - 1
        base = ends[i - 1] if i else 0
        if i == j:
            return parts[i][start - base:stop - base]
        return "".join([parts[i][start - base:], *parts[i + 1:j], parts[j][:stop - ends[j - 1]]])

    def cut(self, at: int, tail: str) -> Rope:
        """``self[:at] + tail``: only the piece that holds position ``at - 1`` is copied (its head)."""
        at = max(0, min(at, len(self)))
        j = bisect_left(self.ends, at)
        base = self.ends[j - 1] if j else 0
        head = [*self.parts[:j], self.parts[j][:at - base]] if at > base else list(self.parts[:j])
        return Rope([*head, tail])

    def startswith(self, prefix: str) -> bool:
        return len(prefix) <= len(self) and self[:len(prefix)] == prefix

    def endswith(self, suffix: str, start: int = 0, end: int | None = None) -> bool:
        n = len(self)
        start, end = _adjust(start, n), n if end is None else _adjust(end, n)
        return end - start >= len(suffix) and self[end - len(suffix):end] == suffix

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Rope):
            return len(other) == len(self) and str(other) == str(self)
        if isinstance(other, str):
            return len(other) == len(self) and other == str(self)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(str(self))


def _adjust(index: int, n: int) -> int:
    """A ``str.endswith`` bound: negative counts from the end; clipped to ``0..n``."""
    return min(n, index) if index >= 0 else max(0, index + n)


Text = str | Rope
"""A prompt's text: a ``str`` (a full render) or a ``Rope`` (a windowed one)."""


def cut(text: Text, at: int, tail: str) -> Rope:
    """``text[:at] + tail`` as a rope."""
    return (text if isinstance(text, Rope) else Rope([text])).cut(at, tail)
