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


def test_a_tool_schema_whose_ref_does_not_resolve_is_a_verdict_not_an_internal_error(client):
    """A $ref to nowhere, or to a document budgeter never fetches: every call of that tool got
    INTERNAL (hardening issue, item 3); now the verdict names the schema's problem."""
    for ref in ("#/definitions/missing", "https://example.com/schema.json"):
        tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
            "type": "object", "properties": {"q": {"$ref": ref}}}}}]
        session = client.create_session(tools=tools)
        c = {"id": "a", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
        check = session.validate_tool_call(c)
        assert not check["runnable"] and check["problems"][0]["code"] == "SCHEMA"
        assert "does not resolve" in check["problems"][0]["message"]
        session.append([{"role": "user", "content": "go"}, call("a", "lookup", {"q": "x"}), result("a", "42"),
                        {"role": "assistant", "content": "It is 42."}])
        p = session.prompt()  # the session still builds, and the answer is not shown as failed
        assert [m["content"] for m in p.messages if m["role"] == "tool"] == ["42"]
