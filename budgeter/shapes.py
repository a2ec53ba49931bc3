"""One plain-JSON shape for each result, shared by the client, the CLI and the README.

A tool-call verdict is the same dict wherever it comes from (``budgeter validate``,
``Client.validate_tool_call``, each call of ``Client.append``):
``{"id", "name", "status", "runnable", "arguments", "detail", "problems", "repeat_of",
"repeat_error", "operation", "path"}`` with ``status`` one of ``VALID``, ``REPAIRED``, ``TRUNCATED``,
``INVALID`` and ``problems`` a list of ``{"code", "field", "message"}``. Indexes and counts are
numbers, enums are their short names. Only the generated messages (``budgeter.v1``) and the core
are imported here, never the server.
"""

from __future__ import annotations

from typing import Any

from budgeter.core.edits import EditPlan
from budgeter.core.guards import CallVerdict
from budgeter.core.jsonargs import classify_arguments, dumps
from budgeter.core.sniff import PathSuggestion
from budgeter.v1 import budgeter_pb2 as pb


def _short(enum: Any, value: int, prefix: str) -> str | None:
    name = enum.Name(value)
    return None if name.endswith("_UNSPECIFIED") else name.removeprefix(prefix)


def verdict(*, id: str = "", name: str = "", status: str, runnable: bool, arguments: str = "",
            detail: str = "", problems: list[dict[str, str]] | None = None, repeat_of: int | None = None,
            repeat_error: str = "", operation: str | None = None, path: str = "") -> dict[str, Any]:
    return {"id": id, "name": name, "status": status, "runnable": runnable, "arguments": arguments,
            "detail": detail, "problems": problems or [], "repeat_of": repeat_of,
            "repeat_error": repeat_error, "operation": operation, "path": path}


def verdict_of(v: CallVerdict, *, id: str = "", name: str = "") -> dict[str, Any]:
    """The core verdict (``budgeter validate``)."""
    return verdict(id=id, name=name, status=v.status.value, runnable=v.runnable, arguments=v.arguments,
                   detail=v.repair or v.detail, problems=_problems(v.problems), repeat_of=v.repeat_of,
                   repeat_error=v.repeat_error)


def _problems(items: Any) -> list[dict[str, str]]:
    return [{"code": p.code, "field": p.field, "message": p.message} for p in items]


def verdict_from_pb(v: pb.ValidateToolCallResponse, *, id: str = "", name: str = "") -> dict[str, Any]:
    return verdict(id=id, name=name, status=_short(pb.ArgumentStatus, v.status, "ARGUMENT_STATUS_") or "",
                   runnable=v.runnable, arguments=v.arguments, detail=v.detail, problems=_problems(v.problems),
                   repeat_of=v.repeat_of_index if v.HasField("repeat_of_index") else None,
                   repeat_error=v.repeat_error)


def call_from_pb(c: pb.ToolCallVerdict, arguments: str = "") -> dict[str, Any]:
    """``arguments``: the call's arguments as sent; the verdict carries what to run (canonical JSON
    for VALID and REPAIRED, as ``validate_tool_call`` gives it)."""
    status = _short(pb.ArgumentStatus, c.status, "ARGUMENT_STATUS_") or ""
    if status in ("VALID", "REPAIRED"):
        value = classify_arguments(arguments).value
        arguments = dumps(value) if value is not None else arguments
    return verdict(id=c.id, name=c.name, status=status,
                   runnable=c.runnable, arguments=arguments, detail=c.detail, problems=_problems(c.problems),
                   repeat_of=c.repeat_of_index if c.HasField("repeat_of_index") else None,
                   repeat_error=c.repeat_error,
                   operation=_short(pb.FileOperation, c.file_operation, "FILE_OPERATION_"), path=c.path)


def append_from_pb(r: pb.AppendMessagesResponse, arguments: dict[str, str] | None = None) -> dict[str, Any]:
    """``{"messages": [{"index", "tokens", "result_status", "tool_calls": [verdict...]}], "etag",
    "message_count", "replayed", "notes"}``. ``arguments``: call id -> the arguments as sent."""
    args = arguments or {}
    return {
        "messages": [{"index": m.index, "tokens": m.tokens,
                      "result_status": _short(pb.ResultStatus, m.result_status, "RESULT_STATUS_"),
                      "tool_calls": [call_from_pb(c, args.get(c.id, "")) for c in m.tool_calls]}
                     for m in r.messages],
        "etag": r.etag, "message_count": r.message_count, "replayed": r.replayed, "notes": list(r.notes),
    }


def report_from_pb(r: pb.BuildReport) -> dict[str, Any]:
    """The build report, with the keys of ``BuildResult.report()`` (``budgeter trim --report``)."""
    return {
        "tokens_before": r.tokens_before, "tokens_after": r.tokens_after, "fits": r.fits,
        "compacted": r.compacted, "cache_break_at": r.cache_break_at,
        "cache_break_tokens": r.cache_break_tokens, "reread_tokens": r.reread_tokens,
        "steps": [{"step": s.step, "tokens_before": s.tokens_before, "tokens_after": s.tokens_after,
                   "actions": [{k: v for k, v in (("index", a.index), ("action", a.action), ("detail", a.detail),
                                                 ("handle", a.handle), ("tokens_saved", a.tokens_saved))
                                if v or k in ("index", "action")} for a in s.actions]}
                  for s in r.steps],
        "handles": list(r.handles), "notes": list(r.notes),
    }


def plan_of(plan: EditPlan) -> dict[str, Any]:
    """``{"ok", "order", "text", "edits": [{"index", "status", "message", "shift"}]}``."""
    return {"ok": plan.ok, "order": list(plan.order), "text": plan.text,
            "edits": [{"index": r.index, "status": r.status, "message": r.message, "shift": r.shift}
                      for r in plan.results]}


def plan_from_pb(r: pb.PlanEditsResponse) -> dict[str, Any]:
    return {"ok": r.ok, "order": list(r.order), "text": r.text,
            "edits": [{"index": e.index, "status": _short(pb.EditStatus, e.status, "EDIT_STATUS_"),
                       "message": e.message, "shift": e.shift} for e in r.edits]}


def suggestion_of(s: PathSuggestion | pb.SuggestPathResponse) -> dict[str, Any]:
    """``{"kind", "path", "confidence", "reason"}``."""
    return {"kind": s.kind, "path": s.path, "confidence": round(s.confidence, 4), "reason": s.reason}
