"""Compaction policy: the knobs a caller may set, with defaults that work out of the box."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from budgeter.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class FileTools:
    """How to recognise file tools. Names listed here override the argument-shape rules."""

    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    edits: frozenset[str] = frozenset()
    by_shape: bool = True
    path_keys: tuple[str, ...] = ("path", "file_path", "filepath", "file", "filename")
    content_keys: tuple[str, ...] = ("content", "contents", "text", "data")
    edit_keys: tuple[str, ...] = ("old_string", "new_string", "edits", "patch", "diff",
                                  "old_str", "new_str")
    range_keys: tuple[str, ...] = ("start_line", "end_line", "offset", "limit", "lines",
                                   "line_start", "line_end")


LOW_WATER = 0.5
"""The default low-water mark (``Policy.low_water``), for every front door."""


@dataclass(frozen=True, slots=True)
class Policy:
    window: int = 32768
    reserve: int = 2048
    low_water: float = LOW_WATER
    """When the budget is exceeded, compact down to this share of it, so later turns only append.
    Half: each compaction makes a prefix-caching server read again all it keeps, and at 0.75 these
    re-reads came so often that a long session re-read 1.7-1.9x what the agent appended, against
    1.2-1.3x at 0.5 (``bench_hygiene``'s re-read column, held-out sessions of 900K characters)."""
    protect_tail_turns: int = 2
    """Latest turns (a user message, or an assistant message with its tool results) kept as is."""
    keep_latest_failure: bool = True
    """The latest failed call keeps its error text verbatim, so the model can correct itself."""
    shrink_min_chars: int = 2000
    """Tool results and argument string leaves longer than this are shrunk outside the tail."""
    shrink_keep_chars: int = 600
    """Characters a shrunk text keeps (2/3 head, 1/3 tail)."""
    stub_keep_error_chars: int = 160
    file_tools: FileTools = field(default_factory=FileTools)
    path_root: str = ""
    """An absolute POSIX path the tools' paths may resolve inside (absolute ones included); empty:
    only relative paths that stay inside the workspace (``paths.path_problem``)."""

    @property
    def budget(self) -> int:
        return self.window - self.reserve

    def validate(self) -> list[tuple[str, str]]:
        """(field, problem) pairs; empty when the policy is usable."""
        problems = []
        if self.window <= 0:
            problems.append(("window", "must be positive"))
        if not 0 <= self.reserve < self.window:
            problems.append(("reserve", "must be >= 0 and smaller than the window"))
        if not 0.1 <= self.low_water <= 1.0:
            problems.append(("low_water", "must be between 0.1 and 1.0"))
        if self.protect_tail_turns < 0:
            problems.append(("protect_tail_turns", "must be >= 0"))
        if self.shrink_keep_chars < 60 or self.shrink_min_chars <= self.shrink_keep_chars:
            problems.append(("shrink_min_chars", "must exceed shrink_keep_chars (>= 60)"))
        if self.path_root and (not self.path_root.startswith("/") or "\0" in self.path_root):
            problems.append(("path_root", "must be an absolute POSIX path (or empty)"))
        return problems


_POLICY_FIELDS = tuple(f.name for f in fields(Policy))
_FILE_TOOLS_FIELDS = tuple(f.name for f in fields(FileTools))


def policy_to_dict(policy: Policy) -> dict[str, Any]:
    """Plain JSON-ready values. Every field is immutable, so this reads them instead of
    ``dataclasses.asdict``, whose deep copies were most of a ``GetSession`` call's own work."""
    out = {name: getattr(policy, name) for name in _POLICY_FIELDS}
    ft = policy.file_tools
    out["file_tools"] = {k: sorted(v) if isinstance(v, frozenset) else list(v) if isinstance(v, tuple) else v
                         for k, v in ((name, getattr(ft, name)) for name in _FILE_TOOLS_FIELDS)}
    return out


def policy_from_dict(raw: dict[str, Any]) -> Policy:
    """The inverse of ``policy_to_dict``; unknown or ill-typed fields are an ``InvalidInput``."""
    known = {f.name for f in fields(Policy)}
    extra = set(raw) - known
    if extra:
        raise InvalidInput(f"unknown policy field {sorted(extra)[0]!r}", field=f"policy.{sorted(extra)[0]}")
    values = dict(raw)
    for name, value in values.items():
        default = getattr(_DEFAULT, name)
        if name != "file_tools" and not _same_kind(value, default):
            raise InvalidInput(f"policy.{name} must be {_KINDS[type(default)]}; got {value!r:.40}",
                               field=f"policy.{name}")
    if "file_tools" in values:
        values["file_tools"] = _file_tools(values["file_tools"])
    policy = Policy(**values)
    problems = policy.validate()
    if problems:
        name, why = problems[0]
        raise InvalidInput(f"policy.{name} {why}", field=f"policy.{name}")
    return policy


_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _same_kind(value: Any, default: Any) -> bool:
    """``value`` has the JSON type of the field's default: a boolean for a boolean, a string for
    a string, an integer (not a boolean) for an integer, a finite number for a number."""
    if isinstance(default, bool | str):
        return isinstance(value, type(default))
    if isinstance(value, bool):
        return False
    if isinstance(default, int):
        return isinstance(value, int)
    return isinstance(value, int | float) and math.isfinite(value)


def _file_tools(raw: Any) -> FileTools:
    if isinstance(raw, FileTools):
        return raw
    known = {f.name for f in fields(FileTools)}
    if not isinstance(raw, dict) or set(raw) - known:
        raise InvalidInput("policy.file_tools has unknown fields", field="policy.file_tools")
    conv = {k: frozenset(v) if k in ("reads", "writes", "edits") else
            tuple(v) if isinstance(v, list | tuple) else v for k, v in raw.items()}
    return FileTools(**conv)  # type: ignore[arg-type]  # checked names, JSON-typed values


_DEFAULT = Policy()
"""The defaults, whose types ``policy_from_dict`` checks values against."""
