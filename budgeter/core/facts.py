"""The one home for the facts about history, computed once when a message is appended.

``History`` holds the messages and, per message, its ``Facts``: for an assistant message, one
``CallFacts`` per tool call (the call's verdict, which is ``validate_tool_call``'s, its file
operation and path, and its failure key); for a tool result, its status and the evidence for it.
It also keeps the indexes every step, guard and profile queries instead of rebuilding them: where
each call and its first result are, which calls failed and on what evidence (``failed_by``), which
later call succeeded with a failed call's payload, and where the last assistant message is (a
failure is *answered* once an assistant message follows its result: the model has seen the error).

A call failed on the strongest evidence at hand (``classify.Evidence``):
- **declared**: its result's status, ``is_error``/``isError`` or an MCP ``isError`` result;
- **verdict**: budgeter judged it not runnable (truncated or invalid arguments from the start; a
  schema problem, an empty required field, an empty path for a file write, or a repeat of a
  failure once its result arrives, whatever the result says); a copied marker or an unsafe path
  is no evidence (``_NO_EVIDENCE``);
- **retried**: the model's next call to the same tool, with no other call succeeding between,
  repeats a write or edit's payload (the same arguments, the same non-empty arguments with more
  given, or the same large content elsewhere after an answer that shows a sign of an error): the
  earlier one did not do its job; or repeats a failed call
  and gets the same answer. A read or command run again is not taken as failed for that alone
  (run again with the same output, it is ``repeated``);
- **same error**: consecutive calls to one tool answered by the same text as a call already known
  to have failed (the model reworks the arguments, the error stays);
- **text**: the result reads as a failure report (``classify.text_failed``).
A result the caller declared ``ok`` is never taken as failed. The later kinds (retried, same
error) are recorded when the model's next call or result shows them; they replace ``text``, the
only evidence that ever changes once recorded.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from budgeter.core.classify import (
    CallKind,
    Evidence,
    FileOp,
    ResultStatus,
    call_kind,
    error_cue,
    file_op,
    result_status,
)
from budgeter.core.guards import CallVerdict, FailureKey, Problem, validate_tool_call
from budgeter.core.jsonargs import ArgStatus
from budgeter.core.memo import CharMemo
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
    kind: CallKind = CallKind.OTHER

    @property
    def key(self) -> FailureKey:
        """Identical calls share a key: the tool and its canonical arguments."""
        return self.name, self.verdict.arguments

    @property
    def bad_arguments(self) -> bool:
        return self.verdict.status in (ArgStatus.TRUNCATED, ArgStatus.INVALID)

    @property
    def not_runnable(self) -> bool:
        """Budgeter's verdict says the call could not do its job: bad arguments, a problem other
        than a type a runtime commonly coerces (``"5"`` for an integer), a copied marker (which
        budgeter's own shrunk prompt holds too, so trimming its output again would take the call
        for failed) or an unsafe path (``_NO_EVIDENCE``), or a file write or edit with an empty
        path. A repeat of a failure counts only as a retry, with no success between
        (``History._result``): the same test run again after an edit may pass."""
        if self.bad_arguments or any(not _lenient(p) for p in self.verdict.problems):
            return True
        return self.kind is CallKind.MUTATE and not self.path and self.value is not None and any(
            self.value.get(k) == "" for k in _PATH_KEYS)


def _lenient(p: Problem) -> bool:
    if p.code in _NO_EVIDENCE or p.message.startswith("the tool's own schema"):
        return True  # (a schema that cannot check a call says nothing of how the call went)
    return p.code == "SCHEMA" and "is not of type" in p.message and any(
        t in p.message for t in ("'integer'", "'number'", "'boolean'"))


_NO_EVIDENCE = ("COPIED_MARKER", "REPEATED_FAILURE", "UNSAFE_PATH")
"""Problems that say nothing of how a call went. An UNSAFE_PATH call that a runtime ran anyway (one
that ignores the verdict, or whose tools take absolute paths in a workspace the policy names no
root for) may well have worked, and a success must never be shown as a failure."""

_PATH_KEYS = ("path", "file_path", "filepath", "file", "filename")


@dataclass(frozen=True, slots=True)
class Facts:
    calls: tuple[CallFacts, ...] = ()
    result: ResultStatus | None = None
    evidence: Evidence | None = None
    """What decided ``result``: declared, verdict or text; None for an OK nobody declared."""


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
    """Failed calls by failure key, in the order their failure was recorded."""
    failed_by: dict[CallRef, Evidence] = field(default_factory=dict)
    """Failed call -> the evidence it was taken as failed on (the first recorded)."""
    first_error: dict[FailureKey, tuple[int, str]] = field(default_factory=dict)
    """Failure key -> (index of the first failed call, first line of its error), for the failures
    known when their result arrived (arguments, declared, verdict, text): what a later identical
    call is checked against (``REPEATED_FAILURE``), the same whether messages come one by one or
    in a batch (``preview``)."""
    retries: dict[CallRef, list[CallRef]] = field(default_factory=dict)
    """Failed call -> its run of identical retries (shared list, oldest first): identical failures
    with no successful call between them. A later identical failure after other work succeeded
    (the same test run again after an edit) starts a new run."""
    owned_failures: dict[CallRef, None] = field(default_factory=dict)
    """Failed calls that own their id (the first call with that id, which its results answer),
    in the order their failure was recorded. A call's failure, once recorded, never changes (a
    second result for an id is not recorded)."""
    resolved_by: dict[CallRef, int] = field(default_factory=dict)
    """Failed call -> index of the later call that succeeded with the same payload."""
    repeated: dict[CallRef, int] = field(default_factory=dict)
    """Call not taken as failed -> the result index of the identical call made right after it
    (no other call succeeding between) that got the same output: the earlier one is superseded,
    never called failed (a read or command run again). In history order."""
    last_assistant: int = -1
    successes: list[int] = field(default_factory=list)
    """History indexes of the OK tool results whose call is not taken as failed, ascending."""
    previous_call: dict[CallRef, CallRef] = field(default_factory=dict)
    """Call -> the call to the same tool before it (what "retried" and "same error" compare)."""
    _last_of_tool: dict[str, CallRef] = field(default_factory=dict)
    _unresolved: dict[tuple[str, ...], dict[CallRef, tuple[int, JSONDict]]] = field(default_factory=dict)
    """Failed calls with arguments that no later success has resolved yet, each with the order it
    was recorded in and its non-empty arguments, filed under (tool, argument, value) for its longest
    string argument, or under (tool,) when none is a string: a success looks only at the calls
    filed under its own values (looking through every unresolved failure of the tool grew with
    history: ``bench_instructions``)."""
    _filed_by: dict[str, set[str]] = field(default_factory=dict)
    """Tool name -> the arguments its unresolved failures were ever filed under."""
    html_writes: list[int] = field(default_factory=list)
    collapsed: CharMemo[Any, Any] = field(default_factory=lambda: CharMemo(20_000))
    """Collapsed failures by the history's state for the call and the two items, so the failures
    step does not redo them on every build (``steps/failures.py``)."""
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
            ref = (index, no)
            if cf.op is FileOp.WRITE and cf.path.lower().endswith((".html", ".htm")):
                self.html_writes.append(index)
            if self.call_at.setdefault(cf.id, ref) != ref:
                continue  # a reused id: its results answer the first call
            if cf.bad_arguments:
                self._failed(ref, cf, _bad(cf), Evidence.VERDICT, known=True)
            self._after(ref, cf)
        if m.role == "tool" and m.tool_call_id is not None and m.tool_call_id not in self.result_at:
            self._result(index, m, facts)
        return facts

    def extend(self, messages: Iterable[Message]) -> list[Facts]:
        return [self.append(m) for m in messages]

    def facts_for(self, m: Message, *, failures: dict[FailureKey, tuple[int, str]] | None = None,
                  call: CallFacts | None = None) -> Facts:
        """The facts ``append`` would record for ``m`` now (nothing is recorded); ``call``: the
        facts of the call a tool result answers, when it is not recorded yet."""
        if m.role == "tool":
            cf = call if call is not None else self._call_facts(m.tool_call_id)
            if cf is None:
                status, evidence = result_status(m.content, declared=m.status)
                return Facts(result=status, evidence=evidence)
            status, evidence = result_status(m.content, declared=m.status, kind=cf.kind, target=cf.path,
                                             tool=cf.name)
            if evidence is not Evidence.DECLARED and cf.not_runnable:
                status, evidence = ResultStatus.ERROR, Evidence.VERDICT
            return Facts(result=status, evidence=evidence)
        known = self.first_error if failures is None else failures
        calls = []
        for c in m.tool_calls:
            verdict = validate_tool_call(c, self.tools, finish_reason=m.finish_reason, failures=known,
                                         policy=self.policy)
            value = verdict.value
            op, path = file_op(c.name, value, self.policy.file_tools)
            calls.append(CallFacts(c.id, c.name, verdict, op, path, value, call_kind(c.name, value, op)))
        return Facts(calls=tuple(calls))

    def preview(self, messages: Sequence[Message]) -> list[Facts]:
        """Facts of messages about to be appended together (earlier ones in the batch count)."""
        failures = dict(self.first_error)
        calls: dict[str, CallFacts] = {}
        out = []
        for i, m in enumerate(messages):
            cf_ = calls.get(m.tool_call_id or "") or self._call_facts(m.tool_call_id)
            facts = self.facts_for(m, failures=failures, call=cf_)
            out.append(facts)
            for cf in facts.calls:
                calls.setdefault(cf.id, cf)
                if cf.bad_arguments:
                    failures.setdefault(cf.key, (len(self) + i, _bad(cf)))
            if m.role == "tool" and facts.result is ResultStatus.ERROR and cf_ is not None:
                failures.setdefault(cf_.key, (len(self) + i, _first_line(m.content)))
        return out

    # -- queries -----------------------------------------------------------------------------

    def call(self, ref: CallRef) -> CallFacts:
        return self.facts[ref[0]].calls[ref[1]]

    def result_of(self, call_id: str) -> int | None:
        return self.result_at.get(call_id)

    def failed(self, ref: CallRef) -> bool:
        return ref in self.failed_by

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

    def _succeeded_between(self, after: int, before: int) -> bool:
        """Whether an OK result (of a call not taken as failed) lies strictly between."""
        k = bisect.bisect_right(self.successes, after)
        return k < len(self.successes) and self.successes[k] < before

    # -- bookkeeping -------------------------------------------------------------------------

    def _result(self, index: int, m: Message, facts: Facts) -> None:
        call_id = m.tool_call_id or ""
        self.result_at[call_id] = index
        ref = self.call_at.get(call_id)
        if ref is None:
            return
        cf = self.call(ref)
        if cf.bad_arguments:  # failed from the start; the same answer still tells of the call before
            self._same_error(ref, cf, m.content)
        elif facts.result is ResultStatus.ERROR:
            assert facts.evidence is not None
            evidence = facts.evidence
            if evidence is Evidence.TEXT:  # the model's behaviour, where it shows, is the stronger evidence
                evidence = self._same_error(ref, cf, m.content) or evidence
            self._failed(ref, cf, _first_line(m.content), evidence, known=True)
        elif facts.result is ResultStatus.OK:
            same = self._same_error(ref, cf, m.content) if facts.evidence is not Evidence.DECLARED else None
            if same is None and facts.evidence is not Evidence.DECLARED and self._repeats_failure(ref, cf):
                same = Evidence.VERDICT
            if same is not None:
                self._failed(ref, cf, _first_line(m.content), same)
            else:
                self._repeated(ref, cf, m.content, index)
                self.successes.append(index)
                if cf.value is not None:
                    self._resolve(ref, cf)
        if self.failed(ref):  # a failed call has its result now
            self.changed_failures.append(ref)
            self._unanswered.append((index, ref))

    def _after(self, ref: CallRef, cf: CallFacts) -> None:
        """A new call: the model's next move shows whether the previous call to the same tool, a
        write or an edit, did its job ("retried")."""
        before = self._last_of_tool.get(cf.name)
        self._last_of_tool[cf.name] = ref
        if before is None:
            return
        self.previous_call[ref] = before
        found = self._answered_before(ref)
        if found is None:
            return
        prev, at = self.call(before), found[1]
        if prev.kind is not CallKind.MUTATE or self.facts[at].evidence is Evidence.DECLARED:
            return
        if prev.value is None or cf.value is None:
            return
        how = _repeats(prev.value, cf.value)
        answer = self.messages[at].content
        if how == "given again" or how == "moved" and error_cue(answer):
            self._unsucceed(at)
            self._failed(before, prev, _first_line(answer), Evidence.RETRIED)

    def _same_error(self, ref: CallRef, cf: CallFacts, text: str) -> Evidence | None:
        """The previous call to this tool, known to have failed, got the same answer with no success
        between: this one failed too ("same error"; for a call repeated as it was, "retried"). An
        answer to a call that failed on its verdict or a retry must also show a sign of an error.
        Returns the evidence for this call, None when not."""
        found = self._answered_before(ref)
        if found is None:
            return None
        before, at = found
        prev = self.call(before)
        if not text.strip() or self.messages[at].content.strip() != text.strip():
            return None
        evidence = Evidence.RETRIED if prev.key == cf.key else Evidence.SAME_ERROR
        known = self.failed_by.get(before)
        if known is None:
            return None  # the same answer to a call not known to have failed (grep hits run twice)
        if known in (Evidence.VERDICT, Evidence.RETRIED) and not error_cue(text):
            return None  # the same "OK" after a call that failed for another reason is not an error
        self._failed(before, prev, _first_line(text), evidence)
        return evidence

    def _repeated(self, ref: CallRef, cf: CallFacts, text: str, index: int) -> None:
        """The previous call to this tool, made just before with the same arguments, got the same
        output: it is superseded by this one (the folds of ``steps/failures`` say "repeated")."""
        found = self._answered_before(ref)
        if found is None:
            return
        before, at = found
        if self.failed(before) or self.call(before).key != cf.key or self.messages[at].content != text:
            return
        self.repeated[before] = index
        self.changed_failures.append(before)

    def _answered_before(self, ref: CallRef) -> tuple[CallRef, int] | None:
        """The previous call to this call's tool and the index of its result, when it has one and
        no other call succeeded between them (what "retried", "same error" and "repeated" read)."""
        before = self.previous_call.get(ref)
        at = self.result_at.get(self.call(before).id) if before is not None else None
        if before is None or at is None or self._succeeded_between(at, ref[0]):
            return None
        return before, at

    def _repeats_failure(self, ref: CallRef, cf: CallFacts) -> bool:
        """The call repeats a failure with no success since: budgeter's verdict said not to run it."""
        earlier = cf.verdict.repeat_of
        return earlier is not None and not self._succeeded_between(earlier, ref[0])

    def _unsucceed(self, at: int) -> None:
        k = bisect.bisect_left(self.successes, at)
        if k < len(self.successes) and self.successes[k] == at:
            del self.successes[k]

    def _failed(self, ref: CallRef, cf: CallFacts, error: str, evidence: Evidence, *, known: bool = False) -> None:
        """Record a failure; ``known``: found when the call or its result arrived (what later
        identical calls are checked against). A call known by its text alone takes the model's
        behaviour as its evidence when that comes (it is then stubbed, ``steps/failures``)."""
        if ref in self.failed_by:
            if self.failed_by[ref] is Evidence.TEXT and evidence in (Evidence.RETRIED, Evidence.SAME_ERROR):
                self.failed_by[ref] = evidence
                self.changed_failures.extend(self.retries[ref])
            return
        self.failed_by[ref] = evidence
        same = self.failures.setdefault(cf.key, [])
        previous = same[-1] if same else None
        if previous is not None and not self._succeeded_between(previous[0], ref[0]):
            run = self.retries[previous]
            run.append(ref)
            run.sort()
        else:
            run = [ref]
        self.retries[ref] = run
        self.owned_failures[ref] = None
        self.changed_failures.extend(run)
        same.append(ref)
        if cf.value is not None:
            self._unresolve(ref, cf.name, cf.value)
        if known:
            self.first_error.setdefault(cf.key, (ref[0], error))

    def _unresolve(self, ref: CallRef, name: str, value: JSONDict) -> None:
        """File a failed call for the success that may resolve it (one with no non-empty argument
        never is)."""
        given = _given(value)
        if not given:
            return
        # the first of the longest string arguments: the most telling
        arg = max((k for k, v in given.items() if isinstance(v, str)), key=lambda k: len(given[k]), default=None)
        where: tuple[str, ...] = (name,) if arg is None else (name, arg, given[arg])
        if arg is not None:
            self._filed_by.setdefault(name, set()).add(arg)
        self._unresolved.setdefault(where, {})[ref] = (len(self.failed_by), given)

    def _resolve(self, ref: CallRef, ok: CallFacts) -> None:
        """Earlier failures of this tool whose every non-empty argument the success repeats."""
        value = ok.value
        assert value is not None
        places = [(ok.name,)] + [(ok.name, arg, v) for arg in self._filed_by.get(ok.name, ())
                                 if isinstance(v := value.get(arg), str)]
        done = []
        for where in places:
            pending = self._unresolved.get(where)
            if pending:
                done += [(order, failed, where) for failed, (order, given) in pending.items()
                         if failed[0] < ref[0] and all(value.get(k) == v for k, v in given.items())]
        for _, failed, where in sorted(done):  # in the order the failures were recorded
            self.resolved_by[failed] = ref[0]
            self.changed_failures.append(failed)
            pending = self._unresolved[where]
            del pending[failed]
            if not pending:
                del self._unresolved[where]


def _given(value: JSONDict) -> JSONDict:
    """The arguments given a non-empty value."""
    return {k: v for k, v in value.items() if v not in ("", None, [], {})}


RETRY_PAYLOAD_CHARS = 256
"""A write's content this long, written again at once by the same tool elsewhere, shows the first
write did not do its job (short contents, such as an empty ``__init__.py``, are written to many
places)."""


def _repeats(before: dict[str, Any], after: dict[str, Any]) -> str:
    """How the later arguments repeat the earlier payload: "given again" (every non-empty earlier
    argument: the same call, or one that adds what was missing), "moved" (the same large content
    with other arguments: a copy to a second path looks alike, so it counts only when the earlier
    answer shows a sign of an error), or ""."""
    given = _given(before)
    if given and all(after.get(k) == v for k, v in given.items()):
        return "given again"
    big = {v for v in before.values() if isinstance(v, str) and len(v) >= RETRY_PAYLOAD_CHARS}
    return "moved" if any(isinstance(v, str) and v in big for v in after.values()) else ""


def _bad(cf: CallFacts) -> str:
    return "arguments " + cf.verdict.status.value.lower()


def _first_line(text: str) -> str:
    return next((ln for ln in text.splitlines() if ln.strip()), "")[:200]
