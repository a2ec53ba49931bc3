"""Payloads kept as links: the payload one extends, plus what it adds.

A digest's payload is the JSON list of every message it replaced, and each drop merges the newly
dropped turns into the digest before it. Kept whole, every digest would hold again all the messages
of the one before: the payloads of a session would grow with the square of its history (two 1M-char
sessions stored 3.3M chars of them). A ``Link`` holds only the messages a digest adds, each at its
place in history, and names the digest it extends; the payload, a JSON list byte for byte, is put
back together when asked for (``assemble``). Its handle is the hash of that assembled text, as any
handle is of its payload, so it depends on the dropped messages alone, not on the drops that led to
them.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

LINK = "~"
"""Links are stored under their handle with this prefix (handles are hex digits): a plain payload
and a link never share a key, and a link is never answered as a payload."""

MAX_LINKS = 100_000
"""More links than any chain can hold (each adds at least one message): past it, a chain is taken
for a loop in a corrupted store."""


@dataclass(frozen=True, slots=True)
class Link:
    base: str
    """The handle of the payload this one extends ('' for none)."""
    items: tuple[tuple[int, str], ...]
    """(history index, the message's JSON) for each message the base does not hold."""

    def encode(self) -> str:
        """One line for the base, then one line per item: the index, a tab, the JSON (compact JSON
        holds no newline: a newline in a string is escaped)."""
        return "\n".join([self.base, *(f"{i}\t{text}" for i, text in self.items)])

    @classmethod
    def decode(cls, text: str) -> Link:
        base, *lines = text.split("\n")
        items = []
        for line in lines:
            index, _, item = line.partition("\t")
            items.append((int(index), item))
        return cls(base, tuple(items))


def joined(items: Iterable[str]) -> str:
    """The JSON list of items already serialized (compact: as ``dumps`` writes the list)."""
    return "[" + ",".join(items) + "]"


class ListHash:
    """The hash of a JSON list of items already serialized, open at its end: a digest that extends
    another hashes only the items it adds, where hashing them all again grew with the history
    dropped (``bench_instructions`` at 2M chars)."""

    __slots__ = ("_h", "count")

    def __init__(self) -> None:
        self._h = hashlib.sha256(b"[")
        self.count = 0

    def extended(self, items: Iterable[str]) -> ListHash:
        """A new hash with ``items`` appended to the list (this one is left as it was)."""
        out = ListHash.__new__(ListHash)
        out._h, out.count = self._h.copy(), self.count
        for item in items:
            if out.count:
                out._h.update(b",")
            out._h.update(item.encode("utf-8", "surrogatepass"))
            out.count += 1
        return out

    def handle(self) -> str:
        """``handle_for`` of the list as it stands."""
        h = self._h.copy()
        h.update(b"]")
        return h.hexdigest()[:16]


MARK_EVERY = 64
"""Covered messages between two kept states of a digest's hash. A drop mostly adds turns newer
than all the digest holds, and with them a few older ones that were the newest read of a file or
a user's message; the hash resumes from the last state before the first of them."""


@dataclass(frozen=True, slots=True)
class Digested:
    """The last digest a session's builds made, as they left it: the next drop, which extends it,
    reads, hashes and tallies only what it adds (read again, the messages a digest covers made a
    compacting build's cost grow with the history dropped: ``bench_instructions`` at 2M chars)."""

    handle: str
    covers: tuple[int, ...]
    marks: tuple[ListHash, ...]
    """The payload's hash after each ``MARK_EVERY`` covered messages (the first: the empty list)."""
    outcomes: Counter[str]
    users: int
    failures_seen: int
    """``len(log.changed_failures)`` when ``outcomes`` were tallied: a failure recorded since then
    for a call the digest covers means tallying them again."""


def list_handle(items: Iterable[str]) -> str:
    """``handle_for(joined(items))``, without making the joined text."""
    return ListHash().extended(items).handle()


def assemble(handle: str, link: Callable[[str], Link]) -> str:
    """The payload of ``handle`` from its chain of links; ``link(h)`` reads one (raising where it
    is absent)."""
    items: dict[int, str] = {}
    seen: set[str] = set()
    while handle:
        if handle in seen or len(seen) >= MAX_LINKS:
            raise ValueError(f"the links of payload {handle!r} loop")
        seen.add(handle)
        node = link(handle)
        for index, item in node.items:
            items.setdefault(index, item)
        handle = node.base
    return joined(items[i] for i in sorted(items))
