"""The engine: a session that appends history message by message and builds prompts that fit.

``Session.append`` classifies each message and caches its cost (each message is tokenized once).
``Session.build`` returns the prompt to send now. While the previous plan plus the new messages
fits the budget, the prompt only extends the previous one (inference servers reuse their KV cache
for the unchanged prefix). When it does not fit, the compaction steps run on the current plan
down to the low-water mark, so the following turns append again. ``trim`` is the stateless form.
The reported count is always the exact count of the returned prompt's full render.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from budgeter.core.facts import Facts, facts_of
from budgeter.core.messages import Message, to_openai
from budgeter.core.pipeline import Context, Item, StepReport, View
from budgeter.core.policy import Policy
from budgeter.core.steps import ALWAYS, COMPACT, cut_oversize, drop_until
from budgeter.core.typing import JSONDict, PromptCounter
from budgeter.errors import InvalidInput, PinnedOverBudget


@dataclass(frozen=True, slots=True)
class AppendInfo:
    index: int
    tokens: int
    facts: Facts


@dataclass(frozen=True, slots=True)
class BuildResult:
    messages: tuple[Message, ...]
    tokens: int
    budget: int
    tokens_before: int
    compacted: bool
    extends_previous: bool
    prefix_changed_at: int
    steps: tuple[StepReport, ...]
    payloads: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def report(self) -> dict[str, Any]:
        return {
            "tokens_before": self.tokens_before, "tokens_after": self.tokens, "budget": self.budget,
            "fits": self.tokens <= self.budget, "compacted": self.compacted,
            "extends_previous": self.extends_previous, "prefix_changed_at": self.prefix_changed_at,
            "steps": [s.as_dict() for s in self.steps if s.actions or s.tokens_before != s.tokens_after],
            "handles": sorted(self.payloads), "notes": list(self.notes),
        }

    def openai_messages(self) -> list[dict[str, Any]]:
        return [to_openai(m) for m in self.messages]


class Session:
    def __init__(self, counter: PromptCounter, *, policy: Policy | None = None,
                 tools: Sequence[JSONDict] = ()) -> None:
        self.policy = policy or Policy()
        problems = self.policy.validate()
        if problems:
            field_, why = problems[0]
            raise InvalidInput(f"policy.{field_} {why}", field=f"policy.{field_}")
        self.counter = counter
        self.tools = list(tools)
        self.history: list[Message] = []
        self.facts: list[Facts] = []
        self.payloads: dict[str, str] = {}
        self.superseded: dict[str, int] = {}
        self._plan: View = ()
        self._planned = 0
        self._last: tuple[Message, ...] = ()

    def append(self, messages: Sequence[Message]) -> list[AppendInfo]:
        out = []
        for m in messages:
            self.history.append(m)
            self.facts.append(facts_of(m, self.policy))
            out.append(AppendInfo(len(self.history) - 1, self.counter.message_cost(m), self.facts[-1]))
        return out

    def supersede(self, path: str, *, at: int | None = None) -> None:
        """Declare every snapshot of ``path`` read before history index ``at`` (default: so far)
        stale, as edits were planned against it; the next compaction stubs them."""
        self.superseded[path] = len(self.history) if at is None else at

    def build(self) -> BuildResult:
        ctx = Context(self.counter, self.tools, self.policy, self.history, self.facts,
                      target=int(self.policy.budget * self.policy.low_water),
                      superseded=self.superseded)
        view = self._plan + tuple(Item(i, self.history[i]) for i in range(self._planned, len(self.history)))
        steps: list[StepReport] = []
        for step in ALWAYS:
            view, report = step(view, ctx)
            steps.append(report)
        total = before = ctx.exact(view)
        compacted = total > self.policy.budget
        if compacted:
            view, total = self._compact(view, ctx, steps)
        self.payloads.update(ctx.payloads)
        self._plan = tuple(i for i in view if i.kind != "synthetic")
        self._planned = len(self.history)
        return self._result(view, total, before, compacted, steps, ctx)

    def _compact(self, view: View, ctx: Context, steps: list[StepReport]) -> tuple[View, int]:
        for step in COMPACT:
            view, report = step(view, ctx)
            steps.append(report)
        total = ctx.exact(view)
        for _ in range(64):
            if total <= self.policy.budget:
                break
            smaller, report = drop_until(view, ctx, ctx.estimate(view) - (total - self.policy.budget) - 1)
            if smaller == view:
                self._check_pinned(view, ctx, total)
                smaller, report = cut_oversize(view, ctx, total - self.policy.budget)
                if smaller == view:
                    break  # nothing left that can shrink
            view = smaller
            steps.append(report)
            total = ctx.exact(view)
        if total > self.policy.budget:
            self._check_pinned(view, ctx, total, force=True)
        return view, total

    def _check_pinned(self, view: View, ctx: Context, total: int, *, force: bool = False) -> None:
        system = [i for i in view if i.message.role == "system"]
        pinned = ctx.counter.count_prompt([i.message for i in system], self.tools) if system else 0
        if pinned > self.policy.budget or force:
            names = [f"system message #{i.index} ({ctx.cost(i.message)} tokens)" for i in system]
            if force and pinned <= self.policy.budget:
                names += [f"{i.message.role} message #{i.index} ({ctx.cost(i.message)} tokens)"
                          for i in view if i.message.role != "system"][:6]
            what = f"what must be kept needs {total}" if force else f"pinned content alone needs {pinned}"
            if self.tools:
                names.append(f"{len(self.tools)} tool schemas")
            raise PinnedOverBudget(
                f"{what} tokens; budget is {self.policy.budget}: "
                + (", ".join(names) or "nothing pinned"),
                metadata={"pinned_tokens": pinned, "budget": self.policy.budget, "prompt_tokens": total},
            )

    def _result(self, view: View, total: int, before: int, compacted: bool,
                steps: list[StepReport], ctx: Context) -> BuildResult:
        messages = tuple(i.message for i in view)
        last = self._last
        same = next((k for k, (a, b) in enumerate(zip(last, messages, strict=False)) if a != b),
                    min(len(last), len(messages)))
        extends = bool(last) and same == len(last)
        self._last = messages
        return BuildResult(messages, total, self.policy.budget, before, compacted, extends,
                           same if not extends else len(last), tuple(steps),
                           ctx.payloads,
                           self.counter.notes)


def trim(messages: Sequence[Message], *, counter: PromptCounter, tools: Sequence[JSONDict] = (),
         policy: Policy | None = None) -> BuildResult:
    """Stateless: compact one request body so it fits ``policy.budget`` by the exact count."""
    session = Session(counter, policy=policy, tools=tools)
    session.append(messages)
    return session.build()
