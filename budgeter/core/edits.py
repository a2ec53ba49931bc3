"""Line-range edits queued against one snapshot, applied bottom-up.

A model that read a file and queues several edits by line number means the numbers of the file it
read. Applied top-down, every edit that grows or shrinks the file moves the lines below it, so
later edits land in the wrong place. ``plan_edits`` validates the ranges (in bounds, no overlaps:
the pair is named), checks the expected old lines where given, then applies the edits from the
bottom up so that each one's numbers still refer to the snapshot.

Ranges are 1-based and inclusive. ``end_line = start_line - 1`` inserts before ``start_line``
(``start_line = len + 1`` appends); an empty ``body`` deletes the range.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

_NUMBERED = re.compile(r"^\s*(\d+)(?:\t|: |\| |→)(.*)$")


@dataclass(frozen=True, slots=True)
class Edit:
    start_line: int
    end_line: int
    body: str
    expected_old: str | None = None


@dataclass(frozen=True, slots=True)
class EditResult:
    index: int
    status: str
    """APPLIED, OUT_OF_RANGE, OVERLAP or MISMATCH."""
    message: str = ""
    shift: int = 0
    """Lines this edit adds (positive) or removes (negative)."""


@dataclass(frozen=True, slots=True)
class EditPlan:
    text: str
    results: tuple[EditResult, ...]
    order: tuple[int, ...] = field(default=())
    """Indices of the applied edits, in the order they were applied (bottom-up)."""

    @property
    def ok(self) -> bool:
        return all(r.status == "APPLIED" for r in self.results)


def strip_line_numbers(text: str) -> str:
    """``cat -n`` / ``N: `` / ``N| `` numbered lines back to the text, when every line is numbered
    consecutively from 1; otherwise the text unchanged."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines = lines[:-1]
    matches = [_NUMBERED.match(line) for line in lines]
    if not lines or not all(matches):
        return text
    if [int(m.group(1)) for m in matches if m] != list(range(1, len(lines) + 1)):
        return text
    return "\n".join(m.group(2) for m in matches if m) + ("\n" if text.endswith("\n") else "")


def _lines(body: str) -> list[str]:
    if body == "":
        return []
    return body[:-1].split("\n") if body.endswith("\n") else body.split("\n")


def plan_edits(snapshot: str, edits: Sequence[Edit]) -> EditPlan:
    trailing = snapshot.endswith("\n")
    lines = _lines(snapshot)
    results: dict[int, EditResult] = {}
    for i, e in enumerate(edits):
        if not (1 <= e.start_line <= len(lines) + 1 and e.start_line - 1 <= e.end_line <= len(lines)):
            results[i] = EditResult(i, "OUT_OF_RANGE", f"edit {i}: lines {e.start_line}-{e.end_line} "
                                    f"are outside the snapshot's 1-{len(lines)}")
    valid = sorted((i for i in range(len(edits)) if i not in results),
                   key=lambda i: (edits[i].start_line, edits[i].end_line))
    reach: int | None = None  # the edit reaching furthest down so far
    for b in valid:
        eb = edits[b]
        if reach is not None:
            ea = edits[reach]
            if eb.start_line <= ea.end_line or eb.start_line == ea.start_line:
                why = (f"edits {reach} and {b} overlap (lines {ea.start_line}-{ea.end_line} and "
                       f"{eb.start_line}-{eb.end_line})")
                results.setdefault(reach, EditResult(reach, "OVERLAP", why))
                results[b] = EditResult(b, "OVERLAP", why)
        if reach is None or eb.end_line > edits[reach].end_line:
            reach = b
    for i in valid:
        e = edits[i]
        if i not in results and e.expected_old is not None:
            old = lines[e.start_line - 1:e.end_line]
            if old != _lines(e.expected_old):
                results[i] = EditResult(i, "MISMATCH", f"edit {i}: lines {e.start_line}-{e.end_line} "
                                        "do not hold the expected old text")
    apply = sorted((i for i in valid if i not in results), key=lambda i: -edits[i].start_line)
    for i in apply:
        e = edits[i]
        new = _lines(e.body)
        lines[e.start_line - 1:e.end_line] = new
        results[i] = EditResult(i, "APPLIED", shift=len(new) - (e.end_line - e.start_line + 1))
    text = "\n".join(lines) + ("\n" if trailing and lines else "")
    return EditPlan(text, tuple(results[i] for i in range(len(edits))), tuple(apply))
