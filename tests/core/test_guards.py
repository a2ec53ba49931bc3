"""ValidateToolCall and SuggestPath in the core."""

from __future__ import annotations

import json

import pytest

from budgeter.core.facts import History
from budgeter.core.guards import rescue_path, validate_tool_call
from budgeter.core.jsonargs import ArgStatus
from budgeter.core.markers import marker
from budgeter.core.messages import ToolCall, from_openai_list
from budgeter.core.policy import Policy

TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "required": ["path", "content"],
    "properties": {"path": {"type": "string"}, "content": {"type": "string"},
                   "mode": {"enum": ["w", "a"]}, "retries": {"type": "integer"}}}}}]


def call(args, name="write_file") -> ToolCall:
    return ToolCall("c1", name, args if isinstance(args, str) else json.dumps(args))


def test_valid_and_repaired():
    ok = validate_tool_call(call({"path": "a.py", "content": "x"}), TOOLS)
    assert ok.status is ArgStatus.VALID and ok.runnable and not ok.problems
    fenced = validate_tool_call(call('```json\n{"path": "a.py", "content": "é"}\n```'), TOOLS)
    assert fenced.status is ArgStatus.REPAIRED and fenced.runnable
    assert fenced.repair == "removed code fence" and fenced.arguments == '{"path":"a.py","content":"é"}'


def test_truncated_is_never_completed():
    cut = validate_tool_call(call('{"path": "a.py", "content": "<html><body>'), TOOLS,
                             finish_reason="length")
    assert cut.status is ArgStatus.TRUNCATED and not cut.runnable
    assert cut.arguments == '{"path": "a.py", "content": "<html><body>'  # as given, not closed


def test_schema_empty_required_and_enum():
    v = validate_tool_call(call({"path": "", "content": "x" * 7146, "mode": "x", "retries": "3"}), TOOLS)
    codes = sorted((p.code, p.field) for p in v.problems)
    assert ("EMPTY_REQUIRED", "path") in codes
    assert ("SCHEMA", "mode") in codes and ("SCHEMA", "retries") in codes
    assert not v.runnable and v.status is ArgStatus.VALID
    missing = validate_tool_call(call({"content": "x"}), TOOLS)
    assert [p.code for p in missing.problems] == ["SCHEMA"] and "path" in missing.problems[0].message
    unknown = validate_tool_call(call({"x": 1}, name="delete_everything"), TOOLS)
    assert [p.code for p in unknown.problems] == ["UNKNOWN_TOOL"]


def test_copied_marker_names_the_field():
    stub = marker("elided", "7,146 chars", "html", "h=0123456789abcdef")
    v = validate_tool_call(call({"path": "a.html", "content": f"<p>{stub}</p>"}), TOOLS)
    assert [(p.code, p.field) for p in v.problems] == [("COPIED_MARKER", "content")]


def test_repeat_of_a_failed_call():
    args = json.dumps({"path": "", "content": "<html>" + "x" * 100})
    history = from_openai_list([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "write_file", "arguments": args}}]},
        {"role": "tool", "tool_call_id": "a", "content": "Error: path must not be empty\nmore"},
    ])
    log = History(Policy())
    log.extend(history)
    failures = log.first_error
    same = ToolCall("b", "write_file", json.dumps(json.loads(args), indent=2))  # same JSON, other spacing
    v = validate_tool_call(same, TOOLS, failures=failures)
    assert v.repeat_of == 1 and v.repeat_error == "Error: path must not be empty"
    assert "REPEATED_FAILURE" in [p.code for p in v.problems] and not v.runnable


def test_rescue_path_is_stable_and_safe():
    html = "<!DOCTYPE html><html><head><title>About Us</title></head></html>"
    assert rescue_path(html).path == "index.html"
    assert rescue_path(html, html_pages_seen=1).path == "about-us.html"
    assert rescue_path("/* theme.css */\n:root { --a: 1 }").path == "theme.css"
    assert rescue_path(":root { --a: 1 }").path == "styles.css"
    assert rescue_path("const x = 1;\nfunction f() {}").path == "script.js"
    odd = rescue_path("just some words")
    assert odd.path.startswith(".rescued/write_") and odd.path == rescue_path("just some words").path
    assert odd.confidence < 0.5


def test_each_schema_object_is_checked_by_its_own_content():
    """Validators are kept per schema object: tools made afresh for each call (one object dropped
    before the next is made, as a ValidateToolCall request's are) are each checked by what they say."""
    args = {"path": "a.py", "content": "x", "retries": 2}
    for kind, ok in [("integer", True), ("string", False), ("integer", True), ("boolean", False)]:
        tools = json.loads(json.dumps(TOOLS))
        tools[0]["function"]["parameters"]["properties"]["retries"]["type"] = kind
        verdict = validate_tool_call(call(args), tools)
        assert (not verdict.problems) is ok, (kind, verdict.problems)
        del tools, verdict


@pytest.mark.parametrize("levels,bottom", [(300, {"type": "string", "pattern": "a+"}), (600, {"type": "string"})])
def test_a_schema_too_deep_to_check_is_named_not_raised_and_is_no_evidence(levels, bottom):
    """Tools reach the core without the sessions' depth limit (``trim``, a library caller): the
    meta-schema's check overflowed the stack at about 99 nested objects, and writing the schema
    out at about 500."""
    schema: dict = bottom
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    tools = [{"type": "function", "function": {"name": "deep", "parameters": schema}}]
    verdict = validate_tool_call(ToolCall("1", "deep", '{"a": {"a": "x"}}'), tools)
    assert [p.message for p in verdict.problems] == ["the tool's own schema is invalid: it nests too deeply to check"]
    log = History(Policy(), tools)
    log.extend(from_openai_list([
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "deep", "arguments": '{"a": {"a": "x"}}'}}]},
        {"role": "tool", "tool_call_id": "1", "content": "done"}]))
    assert log.failed_by == {}
