"""ValidateToolCall and SuggestPath in the core."""

from __future__ import annotations

import json

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


# -- the quick "valid" of jsonschema-rs agrees with jsonschema ------------------------------------

AGREED = [
    TOOLS[0]["function"]["parameters"],
    {"type": "object", "additionalProperties": False, "required": ["edits"],
     "properties": {"edits": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/edit"}},
                    "dry": {"type": "boolean", "default": False}},
     "$defs": {"edit": {"type": "object", "required": ["line"],
                        "properties": {"line": {"type": "integer", "minimum": 1},
                                       "text": {"type": ["string", "null"], "maxLength": 8}}}}},
    {"anyOf": [{"type": "number", "exclusiveMaximum": 10}, {"const": "ten"}],
     "not": {"enum": [1, 2.5, True, None]}},
    {"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
     "propertyNames": {"minLength": 1, "maxLength": 3}, "maxProperties": 3,
     "if": {"required": ["a"]}, "then": {"properties": {"a": {"type": "string", "format": "email"}}},
     "else": {"properties": {"b": {"prefixItems": [{"type": "integer"}], "items": False}}}},
]


def test_agreed_keywords_only():
    from budgeter.core.guards import _agreed

    assert all(_agreed(s) for s in AGREED)
    for other in ({"type": "string", "pattern": "^a"}, {"patternProperties": {"^x": {}}},
                  {"multipleOf": 0.1}, {"uniqueItems": True}, {"unevaluatedProperties": False},
                  {"$ref": "https://example.com/s.json"}, {"$id": "https://example.com/"},
                  {"properties": {"a": {"$dynamicRef": "#x"}}}, {"items": {"nullable": True}},
                  {"allOf": {"type": "string"}}):
        assert not _agreed(other), other


def _problems_by_jsonschema_alone(value, schema):
    from budgeter.core import guards

    checker = guards._validator(json.dumps(schema, sort_keys=True))
    alone = guards._Checker(checker.errors)  # no quick validator: every value goes to jsonschema
    real, guards._SCHEMAS = guards._SCHEMAS, guards.IdentityMemo(limit=4)
    try:
        guards._SCHEMAS.get((schema,), lambda: alone)
        return guards.schema_problems(value, schema)
    finally:
        guards._SCHEMAS = real


def test_quick_path_is_taken_and_changes_no_problem():
    """On values near each schema's edges (1.0 and true as integers, 64-bit overflow, NaN, lone
    surrogates, lengths in code points), the problems are those jsonschema alone finds, and the
    quick path does answer a good share of them."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from budgeter.core import guards

    assert all(guards._validator(json.dumps(s, sort_keys=True)).quick is not None for s in AGREED)
    edge = st.sampled_from([0, 1, 1.0, True, False, -1, 2.5, 10, 9.999, 2**63, 2**70, float("nan"),
                            float("inf"), None, "ten", "", "a", "ab\U0001f600", "abcdefghi",
                            "x@y.z", "\ud800", [], {}])
    text = st.sampled_from(["a.py", "", "é" * 8, "\ud800", "x" * 9]) | st.text(max_size=9)
    near = [
        st.fixed_dictionaries({"path": text, "content": text},
                              optional={"mode": st.sampled_from(["w", "a", "x", 1]), "retries": edge}),
        st.fixed_dictionaries({"edits": st.lists(st.fixed_dictionaries(
            {"line": st.integers(0, 3) | edge}, optional={"text": st.sampled_from(["ok", None]) | text | edge}),
            max_size=3)}, optional={"dry": st.booleans() | edge}),
        edge | st.integers(-3, 12) | st.floats(max_value=12),
        st.fixed_dictionaries({"a": text | edge}) | st.fixed_dictionaries({"b": st.lists(
            st.integers(0, 2) | edge, max_size=2) | edge}) | st.fixed_dictionaries({}, optional={
                k: text | edge for k in ("a", "b", "long", "")}),
    ]
    quick = [0] * len(AGREED)

    @settings(max_examples=600, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def agree(data):
        which = data.draw(st.sampled_from(range(len(AGREED))))
        schema, value = AGREED[which], data.draw(near[which])
        checker = guards._validator(json.dumps(schema, sort_keys=True))
        quick[which] += guards._quick_valid(checker.quick, value)
        assert guards.schema_problems(value, schema) == _problems_by_jsonschema_alone(value, schema)

    agree()
    assert all(n >= 20 for n in quick), quick  # each schema's quick path was exercised
