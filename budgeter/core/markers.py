"""The one marker format for everything budgeter elides.

A marker looks like ``⟦budgeter:elided 7,146 chars html h=3f9a0c1d2b4e5f60⟧``. The mathematical
white brackets (U+27E6/U+27E7) almost never occur in code or prose, so a model that copies
compressed history into a new tool call is caught by ``contains_marker``.
Handles are content addresses: ``h=`` + 16 hex digits of SHA-256 of the elided UTF-8 payload.
"""

from __future__ import annotations

import hashlib
import re

OPEN, CLOSE = "\u27e6", "\u27e7"
PART_CHARS = 200
"""A marker's part (a tool name, a path, an error's first line) is cut to this, so that a marker
stays short enough for ``find_markers`` to read to its handles (a tool named with thousands of
characters made a digest whose handle no one could find)."""
_MARKER = re.compile(OPEN + r"budgeter:[a-z_]+[^" + CLOSE + r"]{0,2000}" + CLOSE + "?")
_HANDLE = re.compile(r"\bh=([0-9a-f]{16})\b")


def handle_for(payload: str) -> str:
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def marker(kind: str, *parts: str) -> str:
    body = " ".join(_part(p) for p in parts if p)
    return f"{OPEN}budgeter:{kind}{' ' + body if body else ''}{CLOSE}"


def _part(text: str) -> str:
    """A part as a marker holds it: no bracket of its own, and at most ``PART_CHARS`` long (a
    handle's part is never cut)."""
    text = text.replace(OPEN, "[").replace(CLOSE, "]")
    return text if len(text) <= PART_CHARS or "h=" in text else text[:PART_CHARS - 1] + "…"


def find_markers(text: str) -> list[str]:
    """Every budgeter marker (or the start of a cut one) in ``text``."""
    return _MARKER.findall(text)


def contains_marker(text: str) -> bool:
    return OPEN + "budgeter:" in text


def handles_in(text: str) -> list[str]:
    return [h for m in find_markers(text) for h in _HANDLE.findall(m)]


def fmt_chars(n: int) -> str:
    return f"{n:,} chars"
