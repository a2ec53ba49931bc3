"""``plainly_valid`` never takes a schema the meta-schema refuses for a valid one, and takes the
schemas agents send without the meta-schema's walk."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema_specifications import REGISTRY

from budgeter.core.schemas import DEFINED, DRAFTS, plainly_valid
from tests.bench.peers import session


def checked(schema) -> bool:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError:
        return False
    return True


def test_the_defined_keywords_are_those_of_the_2020_12_meta_schema():
    base = "https://json-schema.org/draft/2020-12/"
    found = set(REGISTRY.contents(base + "schema")["properties"])
    for part in ("core", "applicator", "unevaluated", "validation", "meta-data", "format-annotation", "content"):
        found |= set(REGISTRY.contents(f"{base}meta/{part}")["properties"])
    assert found == DEFINED


_ANYTHING = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 3), st.floats(allow_nan=False), st.text(max_size=2),
    st.lists(st.sampled_from(["a", 1, None]), max_size=2), st.just({}))
_TYPES = st.sampled_from(["string", "object", "integer", "null", "number", "array", "boolean", "nonsense"])


def _value(key: str, inner: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly what the meta-schema takes for ``key``, sometimes what it refuses or what is near it."""
    from budgeter.core import schemas as s

    if key in s._SCHEMA:
        return inner | _ANYTHING
    if key in s._SCHEMAS:
        return st.lists(inner, max_size=2) | _ANYTHING
    if key in ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas"):
        return st.dictionaries(st.sampled_from(["a", "b", "["]), inner, max_size=2) | _ANYTHING
    by_key = {
        "type": _TYPES | st.lists(_TYPES, max_size=3),
        "required": st.lists(st.sampled_from(["a", "b", 1]), max_size=3),
        "pattern": st.sampled_from(["a+", "[", "(?P<x>a)", 5]),
        "$schema": st.sampled_from([*sorted(DRAFTS), "not a uri", "urn:x", 1]),
        "$ref": st.sampled_from(["#", "#/$defs/a", "#/nowhere", "http://example.com/s.json"]),
        "multipleOf": st.sampled_from([2, 0, -1, 0.5, True]),
    }
    if key in by_key:
        return by_key[key]
    if key in s._NUMBER | s._COUNT:
        return st.integers(-1, 3) | st.floats(allow_nan=False) | st.booleans() | st.just("1")
    if key in s._TEXT:
        return st.text(max_size=3) | st.integers(0, 1)
    if key in s._FLAG:
        return st.booleans() | st.integers(0, 1)
    return _ANYTHING  # enum, examples, const, default, the other defined keywords and unknown ones


_KEYS = sorted(DEFINED | {"nullable", "x-order"})


def _schemas() -> st.SearchStrategy:
    def objects(inner: st.SearchStrategy) -> st.SearchStrategy:
        keys = st.lists(st.sampled_from(_KEYS), max_size=4, unique=True)
        return keys.flatmap(lambda ks: st.fixed_dictionaries({k: _value(k, inner) for k in ks}))

    return st.recursive(st.booleans() | st.just({}), objects, max_leaves=10)


@settings(max_examples=1500)
@given(_schemas())
def test_a_schema_taken_as_plainly_valid_is_one_the_meta_schema_takes(schema):
    if plainly_valid(schema):
        assert checked(schema), schema


REAL = [
    # as zod-to-json-schema writes a tool's input (MCP servers written in TypeScript)
    {"type": "object", "properties": {"path": {"type": "string"}, "head": {"type": "number",
     "description": "If provided, returns only the first N lines of the file"}},
     "required": ["path"], "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"},
    {"type": "object", "properties": {"path": {"type": "string"}, "edits": {"type": "array", "items": {
        "type": "object", "properties": {"oldText": {"type": "string"}, "newText": {"type": "string"}},
        "required": ["oldText", "newText"], "additionalProperties": False}},
        "dryRun": {"type": "boolean", "default": False}}, "required": ["path", "edits"],
     "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"},
    # as pydantic writes a model's schema without references (Python agent frameworks)
    {"properties": {"command": {"title": "Command", "type": "string"}, "timeout": {
        "anyOf": [{"type": "integer"}, {"type": "null"}], "default": None, "title": "Timeout"}},
     "required": ["command"], "title": "RunArgs", "type": "object"},
    # OpenAI's strict function calling, and Gemini's OpenAPI subset
    {"type": "object", "properties": {"unit": {"type": ["string", "null"], "enum": ["c", "f", None]}},
     "required": ["unit"], "additionalProperties": False},
    {"type": "object", "properties": {"q": {"type": "string", "nullable": True, "format": "date-time"},
                                      "n": {"type": "integer", "minimum": 1, "maximum": 50}}},
]


@pytest.mark.parametrize("schema", REAL)
def test_the_schemas_agents_send_are_taken_without_the_meta_schema(schema):
    assert plainly_valid(schema) and checked(schema)


def test_every_schema_of_the_held_out_sessions_is_taken_without_the_meta_schema():
    schemas = {json.dumps(t["function"]["parameters"], sort_keys=True)
               for seed in range(200, 210) for t in session(seed, 30_000)["tools"] if "parameters" in t["function"]}
    assert schemas and all(plainly_valid(json.loads(s)) for s in schemas)


@pytest.mark.parametrize("schema", [
    {"type": "strin"}, {"type": []}, {"type": ["string", "string"]}, {"required": "path"},
    {"required": ["a", "a"]}, {"minLength": -1}, {"minLength": True}, {"minLength": 1.0}, {"anyOf": []},
    {"properties": []}, {"description": 5}, {"enum": "a"}, {"$schema": ["x"]}, {"$schema": "not a uri"},
    {"pattern": "["}, {"$ref": "#/$defs/a"}, {"multipleOf": 2}, [], "string", 5, None,
])
def test_what_it_does_not_know_is_left_to_the_meta_schema(schema):
    assert not plainly_valid(schema)
