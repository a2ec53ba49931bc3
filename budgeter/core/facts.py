"""The one home for the facts about history, computed once when a message is appended.

``History`` holds the messages and, per message, its ``Facts``: for an assistant message, one
``CallFacts`` per tool call (the call's verdict, which is ``validate_tool_call``'s, its file
operation and path, and its failure key); for a tool result, its status. It also keeps the indexes
every step, guard and profile queries instead of rebuilding them: where each call and its first
result are, which calls failed (by failure key, in order), which later call succeeded with a
failed call's payload, and where the last assistant message is (a failure is *answered* once an
assistant message follows its result: the model has seen the error).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from budgeter.core.classify import FileOp, ResultStatus, file_op, result_status
from budgeter.core.guards import CallVerdict, FailureKey, validate_tool_call
from budgeter.core.jsonargs import ArgStatus
from budgeter.core.messages import Message
from budgeter.core.policy import Policy
from budgeter.core.typing import JSONDict


@dataclass(frozen=True, slots=True)
class CallFacts:
    id: str
    name: str
    verdict: CallVerdict
    op: FileOp
    path: str
    value: dict[str, Any] | None
    """The parsed arguments (VALID or REPAIRED), else None."""

    @property
    def key(self) -> FailureKey:
        """Identical calls share a key: the tool and its canonical arguments."""
        return self.name, self.verdict.arguments

    @property
    def bad_arguments(self) -> bool:
        return self.verdict.status in (ArgStatus.TRUNCATED, ArgStatus.INVALID)


@dataclass(frozen=True, slots=True)
class Facts:
    calls: tuple[CallFacts, ...] = ()
    result: ResultStatus | None = None


CallRef = tuple[int, int]
"""(history index of the assistant message, position of the call in it)."""


@dataclass
class History:
    policy: Policy = field(default_factory=Policy)
    tools: Sequence[JSONDict] = ()
    messages: list[Message] = field(default_factory=list)
    facts: list[Facts] = field(default_factory=list)
    call_at: dict[str, CallRef] = field(default_factory=dict)
    result_at: dict[str, int] = field(default_factory=dict)
    failures: dict[FailureKey, list[CallRef]] = field(default_factory=dict)
    """Failed calls by failure key, oldest first (a call fails by its arguments or its result)."""
    first_error: dict[FailureKey, tuple[int, str]] = field(default_factory=dict)
    """Failure key -> (index of the first failed call, first line of its error)."""
    retries: dict[CallRef, list[CallRef]] = field(default_factory=dict)
    """Failed call -> its run of identical retries (shared list, oldest first): identical failures
    with no successful call between them. A later identical failure after other work succeeded
    (the same test run again after an edit) starts a new run."""
    owned_failures: list[CallRef] = field(default_factory=list)
    """Failed calls that own their id (the first call with that id, which its results answer),
    oldest failure first. A call's failure, once recorded, never changes (a second result for an
    id is not recorded)."""
    resolved_by: dict[CallRef, int] = field(default_factory=dict)
    """Failed call -> index of the later call that succeeded with the same payload."""
    last_assistant: int = -1
    last_success: int = -1
    """History index of the last OK tool result."""
    html_writes: list[int] = field(default_factory=list)
    memo: dict[str, dict[Any, Any]] = field(default_factory=dict)
    """Per-step caches of results that are functions of the history's state (e.g. a collapsed
    failure), so a step does not redo them on every build."""
    changed_failures: list[CallRef] = field(default_factory=list)
    """Failed calls in the order their state changed (recorded, got their result, joined by a
    retry, answered by a later assistant message, resolved by a later success; a call may appear
    more than once): a build that knows how far it read here looks only at the calls past that."""
    _unanswered: list[tuple[int, CallRef]] = field(default_factory=list)
    """(result index, failed call) of failures the model has not answered yet."""

    def __len__(self) -> int:
        return len(self.messages)

    @property
    def unanswered(self) -> frozenset[CallRef]:
        """Failed calls whose result the model has not answered yet (no assistant message after it)."""
        return frozenset(ref for _, ref in self._unanswered)

    def append(self, m: Message, facts: Facts | None = None) -> Facts:
        """Record ``m``; ``facts``: what ``preview`` gave for it, to skip computing them again."""
        facts = facts if facts is not None else self.facts_for(m)
        index = len(self.messages)
        self.messages.append(m)
        self.facts.append(facts)
        if m.role == "assistant":
            self.last_assistant = index
            if self._unanswered:  # the model has now seen these failures' results
                self.changed_failures.extend(ref for _, ref in self._unanswered)
                self._unanswered.clear()
        for no, cf in enumerate(facts.calls):
            self.call_at.setdefault(cf.id, (index, no))
            if cf.op is FileOp.WRITE and cf.path.lower().endswith((".html", ".htm")):
                self.html_writes.append(index)
            if cf.bad_arguments:
                self._failed((index, no), cf, _bad(cf))
        if m.role == "tool" and m.tool_call_id is not None and m.tool_call_id not in self.result_at:
            self._result(index, m, facts)
        return facts

    def extend(self, messages: Iterable[Message]) -> list[Facts]:
        return [self.append(m) for m in messages]

    def facts_for(self, m: Message, *, failures: dict[FailureKey, tuple[int, str]] | None = None) -> Facts:
        """The facts ``append`` would record for ``m`` now (nothing is recorded)."""
        if m.role == "tool":
            return Facts(result=result_status(m.content, declared=m.status))
        known = self.first_error if failures is None else failures
        calls = []
        for c in m.tool_calls:
            verdict = validate_tool_call(c, self.tools, finish_reason=m.finish_reason, failures=known)
            value = verdict.value
            op, path = file_op(c.name, value, self.policy.file_tools)
            calls.append(CallFacts(c.id, c.name, verdict, op, path, value))
        return Facts(calls=tuple(calls))

    def preview(self, messages: Sequence[Message]) -> list[Facts]:
        """Facts of messages about to be appended together (earlier ones in the batch count)."""
        failures = dict(self.first_error)
        calls: dict[str, CallFacts] = {}
        out = []
        for i, m in enumerate(messages):
            facts = self.facts_for(m, failures=failures)
            out.append(facts)
            for cf in facts.calls:
                calls[cf.id] = cf
                if cf.bad_arguments:
                    failures.setdefault(cf.key, (len(self) + i, _bad(cf)))
            cf_ = calls.get(m.tool_call_id or "") or self._call_facts(m.tool_call_id)
            if m.role == "tool" and facts.result is ResultStatus.ERROR and cf_ is not None:
                failures.setdefault(cf_.key, (len(self) + i, _first_line(m.content)))
        return out

    # -- queries -----------------------------------------------------------------------------

    def call(self, ref: CallRef) -> CallFacts:
        return self.facts[ref[0]].calls[ref[1]]

    def result_of(self, call_id: str) -> int | None:
        return self.result_at.get(call_id)

    def failed(self, ref: CallRef) -> bool:
        cf = self.call(ref)
        if cf.bad_arguments:
            return True
        at = self.result_at.get(cf.id)
        return at is not None and self.facts[at].result is ResultStatus.ERROR

    def answered(self, ref: CallRef) -> bool:
        """The model has seen this call's outcome: an assistant message follows its result."""
        at = self.result_at.get(self.call(ref).id)
        return at is not None and self.last_assistant > at

    def failures_except(self, call_id: str) -> dict[FailureKey, tuple[int, str]]:
        """``first_error`` without the failure this very call recorded (a call validated after it
        was appended is not a repeat of itself)."""
        ref = self.call_at.get(call_id)
        if ref is None:
            return dict(self.first_error)
        return {k: v for k, v in self.first_error.items() if self.failures[k][0] != ref}

    def html_pages_before(self, index: int) -> int:
        return sum(1 for i in self.html_writes if i < index)

    def _call_facts(self, call_id: str | None) -> CallFacts | None:
        ref = self.call_at.get(call_id or "")
        return self.call(ref) if ref is not None else None

    # -- bookkeeping -------------------------------------------------------------------------

    def _result(self, index: int, m: Message, facts: Facts) -> None:
        call_id = m.tool_call_id or ""
        self.result_at[call_id] = index
        ref = self.call_at.get(call_id)
        if ref is None:
            return
        cf = self.call(ref)
        if facts.result is ResultStatus.ERROR and not cf.bad_arguments:
            self._failed(ref, cf, _first_line(m.content))
        elif facts.result is ResultStatus.OK and not cf.bad_arguments:
            self.last_success = index
            if cf.value is not None:
                self._resolve(ref, cf)
        if cf.bad_arguments or facts.result is ResultStatus.ERROR:  # a failed call has its result now
            self.changed_failures.append(ref)
            self._unanswered.append((index, ref))

    def _failed(self, ref: CallRef, cf: CallFacts, error: str) -> None:
        same = self.failures.setdefault(cf.key, [])
        previous = same[-1] if same else None
        if previous is not None and self.last_success < previous[0]:
            run = self.retries[previous]
            run.append(ref)
        else:
            run = [ref]
        self.retries[ref] = run
        if self.call_at.get(cf.id) == ref:
            self.owned_failures.append(ref)
        self.changed_failures.extend(run)
        same.append(ref)
        self.first_error.setdefault(cf.key, (ref[0], error))

    def _resolve(self, ref: CallRef, ok: CallFacts) -> None:
        """Earlier failures of this tool whose every non-empty argument the success repeats."""
        assert ok.value is not None
        for refs in self.failures.values():
            for failed in refs:
                cf = self.call(failed)
                if cf.name != ok.name or failed in self.resolved_by or cf.value is None:
                    continue
                given = {k: v for k, v in cf.value.items() if v not in ("", None, [], {})}
                if given and all(ok.value.get(k) == v for k, v in given.items()):
                    self.resolved_by[failed] = ref[0]
                    self.changed_failures.append(failed)


def _bad(cf: CallFacts) -> str:
    return "arguments " + cf.verdict.status.value.lower()


def _first_line(text: str) -> str:
    return next((ln for ln in text.splitlines() if ln.strip()), "")[:200]
