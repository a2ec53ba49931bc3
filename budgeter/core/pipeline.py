"""The compaction pipeline: a list of small functions ``(view, ctx) -> (view, report)``.

A view is a tuple of ``Item``s: the messages of the prompt being built, each with the index of the
history message it stands for. Steps never reorder items, never break a call from its results,
and record every payload they elide in ``ctx.payloads`` under its handle.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, TypeVar

from budgeter.core.chains import Digested, Link
from budgeter.core.counting import count_rendered
from budgeter.core.facts import Facts, History
from budgeter.core.incremental import RenderMemo
from budgeter.core.memo import same_objects
from budgeter.core.messages import INSTRUCTIONS, Message
from budgeter.core.policy import Policy
from budgeter.core.typing import JSONDict, PromptCounter

T = TypeVar("T")


class Kind(StrEnum):
    """What an item of a view is, relative to the history message it stands for."""

    RAW = "raw"
    REPAIRED = "repaired"
    STAND_IN = "stand_in"
    STUB = "stub"
    STALE = "stale"
    SHRUNK = "shrunk"
    REPEATED = "repeated"
    DIGEST = "digest"
    SYNTHETIC = "synthetic"
    ORPHAN = "orphan"


@dataclass(frozen=True, slots=True)
class Item:
    index: int
    """History position this item stands for (for a digest: the first dropped message)."""
    message: Message
    kind: Kind = Kind.RAW
    covers: tuple[int, ...] = ()
    """For a digest: every history index it replaces."""


View = tuple[Item, ...]


@dataclass(frozen=True, slots=True)
class Action:
    index: int
    what: str
    detail: str = ""
    handle: str = ""
    tokens_saved: int = 0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "action": self.what}
        for key in ("detail", "handle"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.tokens_saved:
            out["tokens_saved"] = self.tokens_saved
        return out


@dataclass(frozen=True, slots=True)
class StepReport:
    step: str
    tokens_before: int
    tokens_after: int
    actions: tuple[Action, ...] = ()
    ms: float = 0.0
    """Time the step took (set by ``run``)."""

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "tokens_before": self.tokens_before,
                "tokens_after": self.tokens_after, "actions": [a.as_dict() for a in self.actions]}


@dataclass
class Context:
    counter: PromptCounter
    tools: Sequence[JSONDict]
    policy: Policy
    log: History
    target: int
    payloads: dict[str, str] = field(default_factory=dict)
    """Every payload a step elided in this build, by handle."""
    links: dict[str, Link] = field(default_factory=dict)
    """Payloads made in this build as links to earlier ones (digests), by handle."""
    superseded: dict[str, int] = field(default_factory=dict)
    """path -> history length when the caller declared snapshots of it stale (PlanEdits)."""
    total: int = 0
    """The exact count of the view as the last ``exact`` call (or the fit step) left it."""
    text: str = ""
    """The rendered prompt that ``total`` counted ('' where the encoding has no text form)."""
    memo: RenderMemo | None = None
    """The session's previous render, so that a prompt extending it renders only its tail."""
    fresh: int = 0
    """History index of the first message new to this session's plan: items standing for earlier
    ones went through every ``ALWAYS`` step in an earlier build (0: every item is new)."""
    dirty: set[tuple[int, int]] | None = None
    """The failed calls whose state changed since the previous build, when that build's prompt is
    this view's start as ``tidy_failures`` left it (no compaction since): the others need no other
    form (None: look at every failed call)."""
    paired: int = 0
    """How many leading items are the previous build's prompt with every call answered in place and
    no stand-in (``normalize_pairing`` walks only the items after them; 0: every item)."""
    paired_view: View | None = None
    """The view as ``normalize_pairing`` left it in this build."""
    _delta: int = 0
    _counted: View | None = None
    digest: Digested | None = None
    """The last digest this session's builds made (``steps/drop``): an engine hands on its previous
    build's."""
    summed: tuple[View | None, int] = (None, 0)
    """The last view summed and its sum: a step that changes nothing hands the next one the view it
    was given, and a step's closing estimate is the next one's opening estimate (an engine hands
    on its previous build's)."""

    _shaped: tuple[View | None, Hashable] = (None, None)
    _derived: dict[str, tuple[Hashable, Any]] = field(default_factory=dict)

    def derived(self, name: str, view: View, make: Callable[[View], T]) -> T:
        """``make(view)``, made once per build for the views of one ``shape``: the compaction steps
        look up the same turns, protected positions and file events, each a walk of the whole
        prompt, three or four times a compacting build (``bench_proxy --growth``). What it returns
        is shared: read only."""
        if self._shaped[0] is view:
            key = self._shaped[1]
        else:
            key = shape(view)
            self._shaped = (view, key)
        hit = self._derived.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]  # type: ignore[no-any-return]
        value = make(view)
        self._derived[name] = (key, value)
        return value

    def turns(self, view: View) -> list[list[int]]:
        """``units(view)``, shared (``derived``)."""
        return self.derived("units", view, units)

    def protected(self, view: View) -> set[int]:
        """``protected_positions(view, policy)``, shared (``derived``)."""
        return self.derived("protected", view, lambda v: protected_positions(v, self.policy, self.turns(v)))

    @property
    def history(self) -> Sequence[Message]:
        return self.log.messages

    @property
    def facts(self) -> Sequence[Facts]:
        return self.log.facts

    @property
    def budget(self) -> int:
        return self.policy.budget

    def exact(self, view: View) -> int:
        self.total, self.text = count_rendered(self.counter, list(map(_MESSAGE, view)), self.tools,
                                               memo=self.memo)
        self._counted = view  # the overhead against per-message costs is worked out if a step asks
        return self.total

    def estimate(self, view: View) -> int:
        """Planning estimate: cached per-message costs plus the template's context overhead as
        measured by the last exact count."""
        if self._counted is not None:
            self._delta, self._counted = self.total - self._sum(self._counted), None
        return self._sum(view) + self._delta

    def cost(self, m: Message) -> int:
        return self.counter.message_cost(m)

    def _sum(self, view: View) -> int:
        """The per-message costs of ``view``, summed. Against the last view summed, only the items
        between the two views' shared start and shared end are priced: a step changes a few items
        of a prompt of hundreds, and pricing each again grew with the prompt (``bench_flat``)."""
        last, total = self.summed
        if view is last:
            return total
        cost = self.counter.message_cost
        if last is None:
            total = sum(cost(i.message) for i in view)
        else:
            start = same_objects(last, view)
            end = min(len(last), len(view)) - start
            if end:  # (most builds only append: no shared end to look for, nor two reversed copies)
                end = min(same_objects(last[::-1], view[::-1]), len(last) - start, len(view) - start)
            total += (sum(cost(i.message) for i in view[start:len(view) - end])
                      - sum(cost(i.message) for i in last[start:len(last) - end]))
        self.summed = (view, total)
        return total


# One function of the pipeline.
CompactionStep = Callable[[View, Context], tuple[View, StepReport]]


def run(steps: Sequence[CompactionStep], view: View, ctx: Context) -> tuple[View, list[StepReport]]:
    """Run steps in order; each report carries the time its step took."""
    reports = []
    for step in steps:
        started = time.perf_counter()
        view, report = step(view, ctx)
        reports.append(StepReport(report.step, report.tokens_before, report.tokens_after, report.actions,
                                  (time.perf_counter() - started) * 1000))  # not replace(): a build runs this often
    return view, reports


_SHAPING = (Kind.DIGEST, Kind.SYNTHETIC, Kind.ORPHAN)
_MESSAGE = operator.attrgetter("message")


def shape(view: View) -> Hashable:
    """What a view's turns, protected positions and file events rest on besides the session's
    history: the history index each item stands for, and where the digests and the items made up
    or orphaned stand. A step that rewrites messages in place (a stub, a shrunk output, shrunk
    arguments) keeps it: roles and call ids stay."""
    return tuple(i.index for i in view), tuple(p for p, i in enumerate(view) if i.kind in _SHAPING)


def units(view: View) -> list[list[int]]:
    """Positions grouped into turns: an assistant message with the tool results that follow it,
    or any other single message."""
    out: list[list[int]] = []
    open_ids: set[str] = set()
    for pos, item in enumerate(view):
        m = item.message
        if m.role == "tool" and out and m.tool_call_id in open_ids:
            out[-1].append(pos)
            continue
        out.append([pos])
        open_ids = {c.id for c in m.tool_calls}
    return out


def protected_positions(view: View, policy: Policy, turns: list[list[int]] | None = None) -> set[int]:
    """System messages, the first user message, digests and the protected tail. ``turns``:
    ``units(view)``, where the caller has them."""
    keep = {p for p, i in enumerate(view) if i.message.role in INSTRUCTIONS or i.kind is Kind.DIGEST}
    first_user = next((p for p, i in enumerate(view) if i.message.role == "user"), None)
    if first_user is not None:
        keep.add(first_user)
    if policy.protect_tail_turns:
        turns = turns if turns is not None else units(view)
        keep.update(p for unit in turns[-policy.protect_tail_turns:] for p in unit)
    return keep


def with_message(item: Item, message: Message, kind: Kind) -> Item:
    return replace(item, message=message, kind=kind)
