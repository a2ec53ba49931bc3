"""What the engine knows about each message, computed once when it is appended."""

from __future__ import annotations

from dataclasses import dataclass

from budgeter.core.classify import FileOp, ResultStatus, file_op, result_status
from budgeter.core.jsonargs import ArgVerdict, classify_arguments
from budgeter.core.messages import Message
from budgeter.core.policy import Policy


@dataclass(frozen=True, slots=True)
class CallFacts:
    id: str
    name: str
    verdict: ArgVerdict
    op: FileOp
    path: str


@dataclass(frozen=True, slots=True)
class Facts:
    calls: tuple[CallFacts, ...] = ()
    result: ResultStatus | None = None


def facts_of(m: Message, policy: Policy) -> Facts:
    if m.role == "tool":
        return Facts(result=result_status(m.content, declared=m.status))
    calls = []
    for c in m.tool_calls:
        verdict = classify_arguments(c.arguments, finish_reason=m.finish_reason)
        op, path = file_op(c.name, verdict.value, policy.file_tools)
        calls.append(CallFacts(c.id, c.name, verdict, op, path))
    return Facts(calls=tuple(calls))
