"""Protobuf <-> domain conversion, the only place where both meet."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from budgeter.core.edits import Edit, EditPlan
from budgeter.core.guards import CallVerdict
from budgeter.core.jsonargs import dumps_compact, dumps_text, escape_surrogates
from budgeter.core.memo import IdentityMemo
from budgeter.core.messages import Message, ToolCall
from budgeter.core.policy import policy_to_dict
from budgeter.core.sniff import PathSuggestion
from budgeter.errors import InvalidInput
from budgeter.sessions.model import Built, CallInfo
from budgeter.sessions.sessions import AppendResult, CountResult, SessionInfo, external_id
from budgeter.v1 import budgeter_pb2 as pb
from budgeter.wire import (  # noqa: F401 - re-exported: the servicer converts through this module
    STATUS_TO_STR,
    STR_TO_ROLE,
    STR_TO_STATUS,
    message_from_pb,
    message_json,
    message_to_pb,
    messages_from_pb,
)

ARG_STATUS = {"VALID": pb.ARGUMENT_STATUS_VALID, "REPAIRED": pb.ARGUMENT_STATUS_REPAIRED,
              "TRUNCATED": pb.ARGUMENT_STATUS_TRUNCATED, "INVALID": pb.ARGUMENT_STATUS_INVALID}
FILE_OP = {"NONE": pb.FILE_OPERATION_NONE, "READ": pb.FILE_OPERATION_READ,
           "WRITE": pb.FILE_OPERATION_WRITE, "EDIT": pb.FILE_OPERATION_EDIT}
RESULT = {"OK": pb.RESULT_STATUS_OK, "ERROR": pb.RESULT_STATUS_ERROR}
POLICY_FIELDS = ("reserve", "low_water", "protect_tail_turns", "keep_latest_failure",
                 "shrink_min_chars", "shrink_keep_chars", "path_root")


def tools_from_json(text: str) -> list[dict[str, Any]]:
    if not text:
        return []
    try:
        tools = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(f"tools_json is not JSON: {exc}", field="tools_json") from exc
    if not isinstance(tools, list):
        raise InvalidInput("tools_json must be a JSON array", field="tools_json")
    return tools


def policy_from_pb(p: pb.Policy) -> dict[str, Any]:
    out: dict[str, Any] = {"window": p.window} if p.window else {}
    out.update({f: getattr(p, f) for f in POLICY_FIELDS if p.HasField(f)})
    if p.HasField("file_tools"):
        ft = p.file_tools
        tools: dict[str, Any] = {"reads": list(ft.reads), "writes": list(ft.writes),
                                 "edits": list(ft.edits)}
        if ft.HasField("by_shape"):
            tools["by_shape"] = ft.by_shape
        out["file_tools"] = tools
    return out


def overrides_from_pb(o: pb.PromptOverrides) -> dict[str, Any]:
    return {f: getattr(o, f) for f in ("window", "reserve", "low_water", "protect_tail_turns")
            if o.HasField(f)}


def policy_to_pb(policy_dict: dict[str, Any]) -> pb.Policy:
    ft = policy_dict["file_tools"]
    return pb.Policy(window=policy_dict["window"], **{f: policy_dict[f] for f in POLICY_FIELDS},
                     file_tools=pb.FileTools(reads=ft["reads"], writes=ft["writes"],
                                             edits=ft["edits"], by_shape=ft["by_shape"]))


LAST_TIMESTAMP = 253_402_300_799
"""9999-12-31T23:59:59Z, the last second a protobuf Timestamp holds."""
LONGEST_DURATION = 315_576_000_000
"""Seconds, the longest protobuf Duration."""


def _timestamp(seconds: float) -> Timestamp:
    """A time as a Timestamp; past the last one it can hold (a session stored before TTLs had a
    bound), the last one, so that the session can still be read and listed."""
    ts = Timestamp()
    ts.FromNanoseconds(int(min(seconds, LAST_TIMESTAMP) * 1e9))
    return ts


_tools_json = IdentityMemo(size=len)
"""A session's tools as JSON, written once per parsed config (``SessionConfig.from_json``)."""


def session_to_pb(info: SessionInfo) -> pb.Session:
    rec = info.record
    out = pb.Session(name=f"sessions/{external_id(info.id)}", tokenizer=info.config.tokenizer,
                     policy=policy_to_pb(policy_to_dict(info.config.policy)),
                     tools_json=_tools_json.one(info.config.tools, dumps_text, list(info.config.tools)),
                     message_count=rec.version, etag=info.etag, create_time=_timestamp(rec.created))
    if rec.expires is not None:
        out.expire_time.CopyFrom(_timestamp(rec.expires))
    if rec.ttl:
        out.ttl.FromNanoseconds(int(min(rec.ttl, LONGEST_DURATION) * 1e9))
    return out


def ttl_from_pb(has: bool, d: Duration) -> float | None:
    return d.ToNanoseconds() / 1e9 if has else None


def append_to_pb(r: AppendResult) -> pb.AppendMessagesResponse:
    return pb.AppendMessagesResponse(
        etag=r.etag, message_count=r.message_count, replayed=r.replayed, notes=r.notes,
        messages=[pb.AppendedMessage(
            index=a.index, tokens=a.tokens,
            result_status=RESULT.get(a.result or "", pb.RESULT_STATUS_UNSPECIFIED),
            tool_calls=[call_to_pb(c) for c in a.calls])
            for a in r.messages])


def call_to_pb(c: CallInfo) -> pb.ToolCallVerdict:
    # text from decoded JSON arguments (a path, a key) may hold a lone surrogate from a "\ud800"
    # escape, which a protobuf string cannot carry: escape_surrogates sends it as that escape
    out = pb.ToolCallVerdict(
        id=c.id, name=c.name, status=ARG_STATUS[c.status], detail=escape_surrogates(c.detail),
        runnable=c.runnable, file_operation=FILE_OP[c.operation], path=escape_surrogates(c.path),
        repeat_error=escape_surrogates(c.repeat_error),
        problems=[_problem(code, field, message) for code, field, message in c.problems])
    if c.repeat_of is not None:
        out.repeat_of_index = c.repeat_of
    return out


def body_json(messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> str:
    """``{"messages":[...],"tools":[...]}`` as compact JSON, joined from memoized message texts (no
    ``tools`` key when ``tools`` is empty)."""
    out = '{"messages":[' + ",".join([message_json(m) for m in messages]) + "]"
    if tools:
        out += ',"tools":' + dumps_compact(list(tools))
    return out + "}"


_sent_texts = IdentityMemo(size=len)


def sent_json(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> str:
    """``body_json`` of a rewritten conversation (``core.counting.sent``), each message's text
    memoized by the identity of its dict (the same rewritten message comes back on later builds)."""
    out = '{"messages":[' + ",".join([_sent_texts.get((m,), dumps_compact, m) for m in messages]) + "]"
    if tools:
        out += ',"tools":' + dumps_compact(list(tools))
    return out + "}"


def build_to_pb(built: Built, view: int = pb.PROMPT_VIEW_FULL) -> pb.BuildPromptResponse:
    """``built.kept`` > 0 (the caller holds the previous prompt): the typed messages and the JSON
    body carry only the messages from there on, and the body no tools."""
    result, info, kept = built.result, built.info, built.kept
    report = pb.BuildReport(
        tokens_before=result.tokens_before, tokens_after=result.tokens,
        fits=result.tokens <= result.budget, compacted=result.compacted,
        handles=list(result.handles), notes=list(result.notes), cache_break_at=result.prefix_changed_at,
        cache_break_tokens=result.cache_break_tokens, reread_tokens=result.reread_tokens,
        steps=[pb.StepReport(step=s.step, tokens_before=s.tokens_before, tokens_after=s.tokens_after,
                             actions=[pb.CompactionAction(index=a.index, action=a.what, detail=a.detail,
                                                          handle=a.handle, tokens_saved=a.tokens_saved)
                                      for a in s.actions])
               for s in result.steps if s.actions or s.tokens_before != s.tokens_after])
    typed = view != pb.PROMPT_VIEW_JSON
    text = view != pb.PROMPT_VIEW_TYPED
    body = ""
    if text:
        if built.sent is not None:
            messages, tools = built.sent
            body = sent_json(messages[built.kept_body:], () if built.kept_body else tools)
        else:
            body = body_json(result.messages[kept:], () if kept else info.config.tools)
    return pb.BuildPromptResponse(
        messages=[message_to_pb(m) for m in result.messages[kept:]] if typed else (),
        body_json=body,
        tokens=result.tokens, budget=result.budget, extends_previous=result.extends_previous,
        prefix_changed_at=result.prefix_changed_at, report=report, etag=info.etag,
        tokenizer=info.config.tokenizer, prompt_id=built.prompt_id, kept_messages=kept,
        kept_body_messages=built.kept_body)


def count_to_pb(r: CountResult) -> pb.CountTokensResponse:
    return pb.CountTokensResponse(tokens=r.tokens, message_tokens=list(r.message_tokens),
                                  tokenizer=r.tokenizer, notes=list(r.notes))


EDIT_STATUS = {"APPLIED": pb.EDIT_STATUS_APPLIED, "OUT_OF_RANGE": pb.EDIT_STATUS_OUT_OF_RANGE,
               "OVERLAP": pb.EDIT_STATUS_OVERLAP, "MISMATCH": pb.EDIT_STATUS_MISMATCH}


def tool_call_from_pb(c: pb.ToolCall) -> ToolCall:
    return ToolCall(c.id, c.name, c.arguments)


def verdict_to_pb(v: CallVerdict) -> pb.ValidateToolCallResponse:
    out = pb.ValidateToolCallResponse(
        status=ARG_STATUS[v.status.value], runnable=v.runnable, arguments=v.arguments,
        detail=escape_surrogates(v.repair or v.detail), repeat_error=escape_surrogates(v.repeat_error),
        problems=[_problem(p.code, p.field, p.message) for p in v.problems])
    if v.repeat_of is not None:
        out.repeat_of_index = v.repeat_of
    return out


def _problem(code: str, field: str, message: str) -> pb.Problem:
    return pb.Problem(code=code, field=escape_surrogates(field), message=escape_surrogates(message))


def suggestion_to_pb(s: PathSuggestion) -> pb.SuggestPathResponse:
    return pb.SuggestPathResponse(kind=s.kind, path=s.path, confidence=s.confidence, reason=s.reason)


def edits_from_pb(edits: Sequence[pb.LineEdit]) -> list[Edit]:
    return [Edit(e.start_line, e.end_line, e.body,
                 e.expected_old if e.HasField("expected_old") else None) for e in edits]


def plan_to_pb(plan: EditPlan) -> pb.PlanEditsResponse:
    return pb.PlanEditsResponse(
        text=plan.text, ok=plan.ok, order=list(plan.order),
        edits=[pb.EditOutcome(index=r.index, status=EDIT_STATUS[r.status], message=r.message, shift=r.shift)
               for r in plan.results])
