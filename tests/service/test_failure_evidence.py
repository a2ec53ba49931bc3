"""The mission's case and the declared conventions through the gRPC service and its client."""

from __future__ import annotations

import json

from tests.core.test_evidence import PAGE, WRITE_TOOLS, call, mission, result


def test_the_missions_case_leaves_one_short_stub_through_grpc(client):
    session = client.create_session(tokenizer="qwen3.6", tools=WRITE_TOOLS)
    p = client.prompt(session.id, append=mission())
    stubs = [m["content"] for m in p.messages if "budgeter:failed" in (m["content"] or "")]
    assert len(stubs) == 1 and "x3" in stubs[0] and "why=" in stubs[0]
    assert all(json.loads(c["function"]["arguments"]).get("content") != PAGE
               for m in p.messages for c in m.get("tool_calls") or ())
    handle = stubs[0].split("args h=")[1].split()[0].rstrip("⟧")
    assert json.loads(client.payload(session.id, handle))["content"] == PAGE


def test_a_failure_declared_with_is_error_collapses_through_grpc(client):
    session = client.create_session(tokenizer="qwen3.6")
    raw = [{"role": "user", "content": "go"}, call("a", "publish", {"body": PAGE}),
           result("a", "Published.", is_error=True), {"role": "assistant", "content": "It did not publish."}]
    p = client.prompt(session.id, append=raw)
    assert any("why=declared" in (m["content"] or "") for m in p.messages)
    assert all(json.loads(c["function"]["arguments"]).get("content") != PAGE
               for m in p.messages for c in m.get("tool_calls") or ())
