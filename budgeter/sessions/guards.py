"""Guard rails over sessions: validate a tool call, rescue a lost path, plan line edits.

Each works without a session; with one, it uses the session's history (earlier failures, HTML
pages already written, elided snapshots) and records an event in the session.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from budgeter.core.edits import Edit, EditPlan, plan_edits, strip_line_numbers
from budgeter.core.guards import (
    CallVerdict,
    rescue_path,
    validate_tool_call,
)
from budgeter.core.jsonargs import dumps_text
from budgeter.core.messages import ToolCall
from budgeter.core.paths import path_problem
from budgeter.core.sniff import PathSuggestion
from budgeter.core.typing import JSONDict
from budgeter.errors import InvalidInput
from budgeter.sessions.sessions import Sessions, session_id_of


class Guards:
    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions

    def _record(self, session: str, event: dict[str, Any]) -> None:
        self.sessions.store.add_event(session_id_of(session), dumps_text(event))

    def validate(self, call: ToolCall, *, session: str = "", tools: Sequence[JSONDict] = (),
                 finish_reason: str | None = None) -> CallVerdict:
        if not call.name:
            raise InvalidInput("tool_call.name is required", field="tool_call.name")
        failures, policy = None, None
        if session:
            live = self.sessions.live(session)
            with live.lock:
                failures = live.engine.log.failures_except(call.id)
                tools = tools or live.info.config.tools
                policy = live.engine.policy
        verdict = validate_tool_call(call, tools, finish_reason=finish_reason, failures=failures,
                                     policy=policy)
        if session:
            self._record(session, {"kind": "tool_call_validated", "id": call.id, "name": call.name,
                                   "status": verdict.status.value, "runnable": verdict.runnable,
                                   "problems": [p.code for p in verdict.problems]})
        return verdict

    def suggest_path(self, content: str, *, session: str = "", tool: str = "") -> PathSuggestion:
        if not content:
            raise InvalidInput("content is required", field="content")
        pages = 0
        if session:
            live = self.sessions.live(session)
            with live.lock:
                pages = len(live.engine.log.html_writes)
        suggestion = rescue_path(content, html_pages_seen=pages)
        if session:
            self._record(session, {"kind": "path_rescued", "tool": tool, "path": suggestion.path,
                                   "reason": suggestion.reason, "chars": len(content)})
        return suggestion

    def plan_edits(self, edits: Sequence[Edit], *, snapshot: str = "", snapshot_handle: str = "",
                   session: str = "", path: str = "") -> EditPlan:
        if snapshot_handle:
            if not session:
                raise InvalidInput("snapshot_handle needs a session", field="session")
            snapshot = self.sessions.payload(session, snapshot_handle)
        if not edits:
            raise InvalidInput("edits must not be empty", field="edits")
        if path:
            root = self.sessions.live(session).engine.policy.path_root if session else ""
            why = path_problem(path, root=root)
            if why:
                raise InvalidInput(f"path {why}; it must stay inside {root or 'the workspace'}",
                                   field="path")
        plan = plan_edits(strip_line_numbers(snapshot), edits)
        if session and path:
            live = self.sessions.live(session)
            with live.lock:
                at = live.version
                live.engine.supersede(path, at=at)
            self._record(session, {"kind": "snapshot_superseded", "path": path, "at": at,
                                   "applied": sum(r.status == "APPLIED" for r in plan.results)})
        return plan

    def events(self, session: str) -> list[dict[str, Any]]:
        return [json.loads(e) for e in self.sessions.store.events(session_id_of(session))]
