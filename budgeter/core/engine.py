"""The engine: a session that appends history message by message and builds prompts that fit.

``Engine.append`` classifies each message and caches its cost (each message is tokenized once).
``Engine.build`` returns the prompt to send now. While the previous plan plus the new messages
fits the budget, the prompt only extends the previous one (inference servers reuse their KV cache
for the unchanged prefix). When it does not fit, the compaction steps run on the current plan
down to the low-water mark, so the following turns append again. ``trim`` is the stateless form.
The reported count is always the exact count of the returned prompt's full render.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from budgeter.core.chains import Digested, Link, assemble
from budgeter.core.counting import count_rendered, shared_prefix
from budgeter.core.facts import Facts, History
from budgeter.core.incremental import RenderMemo, common_length
from budgeter.core.markers import contains_marker, handles_in
from budgeter.core.memo import CharMemo, leading_same, same_objects
from budgeter.core.messages import Message, to_openai
from budgeter.core.pipeline import Context, Item, Kind, StepReport, View, run
from budgeter.core.policy import Policy
from budgeter.core.steps import ALWAYS, COMPACT
from budgeter.core.typing import JSONDict, PromptCounter
from budgeter.errors import InvalidInput, PayloadNotFound


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
    """The exact count of the request as received (the session's whole history), before any step."""
    compacted: bool
    extends_previous: bool
    prefix_changed_at: int
    steps: tuple[StepReport, ...]
    payloads: dict[str, str] = field(default_factory=dict)
    """Payloads elided by this build's steps, by handle (the store keeps the new ones)."""
    links: dict[str, Link] = field(default_factory=dict)
    """Payloads this build made as links to earlier ones (digests; ``Engine.payload`` reads one)."""
    notes: tuple[str, ...] = ()
    handles: tuple[str, ...] = ()
    """Every handle that appears in the returned prompt (each resolves to its elided payload)."""
    cache_break_tokens: int = 0
    """Prompt tokens before the first change against the previous prompt: what a server can reuse."""
    serial: int = 0
    """This session's build count: the previous prompt is ``serial - 1``, and its first
    ``prefix_changed_at`` messages are this prompt's first."""

    @property
    def reread_tokens(self) -> int:
        """Prompt tokens after the first change: what the inference server must read again."""
        return self.tokens - self.cache_break_tokens

    def report(self) -> dict[str, Any]:
        return {
            "tokens_before": self.tokens_before, "tokens_after": self.tokens, "budget": self.budget,
            "fits": self.tokens <= self.budget, "compacted": self.compacted,
            "extends_previous": self.extends_previous, "prefix_changed_at": self.prefix_changed_at,
            "cache_break_at": self.prefix_changed_at, "cache_break_tokens": self.cache_break_tokens,
            "reread_tokens": self.reread_tokens,
            "steps": [s.as_dict() for s in self.steps if s.actions or s.tokens_before != s.tokens_after],
            "handles": list(self.handles), "notes": list(self.notes),
        }

    def openai_messages(self) -> list[dict[str, Any]]:
        return [to_openai(m) for m in self.messages]


class Engine:
    def __init__(self, counter: PromptCounter, *, policy: Policy | None = None,
                 tools: Sequence[JSONDict] = ()) -> None:
        self.policy = policy or Policy()
        problems = self.policy.validate()
        if problems:
            field_, why = problems[0]
            raise InvalidInput(f"policy.{field_} {why}", field=f"policy.{field_}")
        self.counter = counter
        self.tools = list(tools)
        self.log = History(self.policy, self.tools)
        self.payloads: dict[str, str] = {}
        self.links: dict[str, Link] = {}
        self.superseded: dict[str, int] = {}
        self._plan: View = ()
        self._planned = 0
        self._last: tuple[Message, ...] = ()
        self._last_handles: list[tuple[str, ...]] = []
        """The handles of each message of the previous prompt: a build looks up only the messages
        after those it shares with it (a prompt holds hundreds in a long session: ``bench_instructions``)."""
        self._handles: tuple[str, ...] = ()
        """Every handle of the previous prompt, sorted (``BuildResult.handles``)."""
        self._last_text: str = ""
        self._cost_sums: tuple[tuple[Message, ...], list[int]] = ((), [0])
        """A prompt and the running sums of its messages' costs (``_costs_before``)."""
        self.builds = 0
        self._memo = RenderMemo()
        self._settled = False
        """The plan is the previous build's prompt as the every-build steps left it (not compacted)."""
        self._failures_seen = 0
        self._paired = 0
        """How many leading items of the plan ``normalize_pairing`` need not walk (``_well_paired``)."""
        self._received_memo = RenderMemo(tail=True, appends=True, peer=self._memo)
        """The previous render of the history as received (``tokens_before``)."""
        self._summed: tuple[View | None, int] = (None, 0)
        """The last view a build summed the costs of, and the sum (``Context.summed``)."""
        self._digest: Digested | None = None
        """The last digest a build made (``Context.digest``)."""

    def payload(self, handle: str) -> str:
        """What ``handle`` stands for in a prompt: an elided payload, or the messages a digest
        replaced (a JSON list). Raises ``PayloadNotFound``."""
        text = self.payloads.get(handle)
        if text is not None:
            return text
        if handle not in self.links:
            raise PayloadNotFound(f"no payload {handle!r}", metadata={"handle": handle})
        return assemble(handle, self.links.__getitem__)

    @property
    def history(self) -> list[Message]:
        return self.log.messages

    @property
    def facts(self) -> list[Facts]:
        return self.log.facts

    def append(self, messages: Sequence[Message], facts: Sequence[Facts] | None = None) -> list[AppendInfo]:
        """``facts``: what ``log.preview(messages)`` gave, when the caller has it."""
        out = []
        for k, m in enumerate(messages):
            facts_ = self.log.append(m, facts[k] if facts is not None else None)
            out.append(AppendInfo(len(self.log) - 1, self.counter.message_cost(m), facts_))
        return out

    def supersede(self, path: str, *, at: int | None = None) -> None:
        """Declare every snapshot of ``path`` read before history index ``at`` (default: so far)
        stale, as edits were planned against it; the next compaction stubs them."""
        self.superseded[path] = len(self.log) if at is None else at

    def fork(self, policy: Policy) -> Engine:
        """An engine over this one's history (shared, read only) under another policy: a one-off
        build that leaves this engine's plan as it was."""
        other = Engine(self.counter, policy=policy, tools=self.tools)
        other.log = self.log
        other.superseded = dict(self.superseded)
        return other

    def build(self) -> BuildResult:
        ctx = Context(self.counter, self.tools, self.policy, self.log,
                      target=int(self.policy.budget * self.policy.low_water),
                      superseded=self.superseded, memo=self._memo, fresh=self._planned, summed=self._summed,
                      digest=self._digest)
        changed = self.log.changed_failures
        if self._settled:
            ctx.dirty = set(changed[self._failures_seen:])
        self._failures_seen = len(changed)
        view = self._plan + tuple(Item(i, self.log.messages[i]) for i in range(self._planned, len(self.log)))
        ctx.paired = self._paired
        view, steps = run(ALWAYS, view, ctx)
        tidied = ctx.exact(view)
        before = self._received(view, tidied)
        compacted = tidied > self.policy.budget
        if compacted:
            view, more = run(COMPACT, view, ctx)
            steps += more
        self.payloads.update(ctx.payloads)
        self.links.update(ctx.links)
        # (most builds make no stand-in: the view is kept as it is, without a walk in Python)
        self._plan = tuple(i for i in view if i.kind is not Kind.SYNTHETIC) if Kind.SYNTHETIC in map(_kind, view) \
            else view
        self._summed = ctx.summed
        self._digest = ctx.digest
        self._planned = len(self.log)
        self._settled = not compacted
        self._paired = len(view) if self._well_paired(view, ctx.paired_view, compacted) else 0
        return self._result(view, before, compacted, steps, ctx)

    def _received(self, view: View, tidied: int) -> int:
        """The exact count of the history as the client sent it, before any step: ``tidied`` (the
        view's count) when the view is the history itself, else the history rendered with its own
        memo (it only grows, so a build renders only its tail). A history the template refuses as
        sent (the steps made it renderable) is priced by its messages' costs."""
        history = self.log.messages
        if len(view) == len(history) and same_objects(list(map(_message, view)), history) == len(history):
            return tidied
        try:
            return count_rendered(self.counter, history, self.tools, memo=self._received_memo)[0]
        except Exception:  # any template or encoder refusal: a report figure never fails a build
            return sum(map(self.counter.message_cost, history))

    def _well_paired(self, view: View, paired: View | None, compacted: bool) -> bool:
        """Whether the prompt has every call answered in place and no stand-in, so that the next
        build's ``normalize_pairing`` need not walk it again: it was not compacted, holds no
        stand-in (it is the plan) and has the items ``normalize_pairing`` left, in their order (the
        steps after it rewrote messages in place, keeping roles and call ids: a step that removes a
        call removes its result too, and the items change). The items both share are skipped in
        C: a rewrite is of a failure, near the prompt's end (reading every item's index on each
        build grew with a long session's prompt: ``bench_instructions``)."""
        if compacted or self._plan is not view or paired is None:
            return False
        if view is paired:
            return True
        if len(view) != len(paired):
            return False
        k = leading_same(view, paired)
        return list(map(_index, view[k:])) == list(map(_index, paired[k:]))

    def _result(self, view: View, before: int, compacted: bool, steps: list[StepReport],
                ctx: Context) -> BuildResult:
        messages = tuple(map(_message, view))
        last = self._last
        same = common_length(last, messages)
        extends = bool(last) and same == len(last)
        reuse = self._reusable_tokens(messages, same, ctx)
        new = list(map(message_handles, messages[same:]))
        found = self._last_handles[:same] + new
        if same == len(self._last_handles) and not any(new):  # (most builds: only messages without markers added)
            handles = self._handles
        else:
            handles = tuple(sorted(set(itertools.chain.from_iterable(found))))
        self._last, self._last_text, self._last_handles, self._handles = messages, ctx.text, found, handles
        self.builds += 1
        return BuildResult(messages, ctx.total, self.policy.budget, before, compacted, extends,
                           same if not extends else len(last), tuple(steps), ctx.payloads,
                           ctx.links, self.counter.notes, handles, reuse, self.builds)

    def _reusable_tokens(self, messages: tuple[Message, ...], same: int, ctx: Context) -> int:
        after = getattr(self.counter, "tokens_after", None)
        if ctx.text and after is not None:
            if not self._last:
                return 0
            if self._last_text:
                # what a windowed render copied from the last prompt needs no compare (the last
                # prompt's text is held here, so its id is its own: ``RenderMemo.kept``)
                before, known = self._memo.kept
                known = known if before == id(self._last_text) and ctx.text is self._memo.text else 0
                changed = shared_prefix(self._last_text, ctx.text, known)
                return ctx.total - after(ctx.text, changed, total=ctx.total)
        return self._costs_before(messages, same)  # no text form: the plan costs

    def _costs_before(self, messages: tuple[Message, ...], same: int) -> int:
        """The costs of the first ``same`` messages, which ``messages`` shares with the previous
        prompt, summed: read from the previous prompt's running sums, which are extended by the new
        messages only (summing every message of the prompt again cost each build of a counter with
        no text form a call per message: ``bench_turns --profile mistral-tekken``)."""
        held, sums = self._cost_sums
        if held is not self._last:  # (not summed here before)
            sums = [0, *itertools.accumulate(map(self.counter.message_cost, self._last))]
        new = sums[:same]
        new.extend(itertools.accumulate(map(self.counter.message_cost, messages[same:]), initial=sums[same]))
        self._cost_sums = (messages, new)
        return sums[same]


_message = operator.attrgetter("message")
_kind = operator.attrgetter("kind")
_index = operator.attrgetter("index")


_handles_memo: CharMemo[Message, tuple[str, ...]] = CharMemo()


def message_handles(m: Message) -> tuple[str, ...]:
    """Handles in one message's markers (memoized: after a compaction, a prompt shares few leading
    messages with the previous one but holds most of its messages again)."""
    found = _handles_memo.get(m)
    if found is None:
        texts = [m.content, *(c.arguments for c in m.tool_calls)]
        found = _handles_memo.put(m, tuple(h for t in texts if contains_marker(t) for h in handles_in(t)), m.size)
    return found


def trim(messages: Sequence[Message], *, counter: PromptCounter, tools: Sequence[JSONDict] = (),
         policy: Policy | None = None) -> BuildResult:
    """Stateless: compact one request body so it fits ``policy.budget`` by the exact count."""
    if not messages:  # (a server refuses an empty conversation; an empty prompt fits nothing)
        raise InvalidInput("messages must not be empty", field="messages")
    session = Engine(counter, policy=policy, tools=tools)
    session.append(messages)
    return session.build()
