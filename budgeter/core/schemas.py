"""Which tool schemas are plainly valid JSON Schema (draft 2020-12), without its meta-schema.

``jsonschema``'s ``check_schema`` takes 0.5-0.7 ms a schema, even for ``{"type": "object",
"properties": {...}}``: it walks the meta-schema's dynamic references. A tool's schema is checked
once per process, on its tool's first call, so the first turns of a session (and every
``budgeter trim`` with calls) paid it for each tool they called. ``plainly_valid`` says True only
for schemas built from the keywords below with values of the types the meta-schema asks for; for
any other keyword or value it says False and the caller runs ``check_schema`` as before. So it
never takes an invalid schema for a valid one (``tests/core/test_schemas.py`` holds it to
``check_schema`` on generated schemas), and the schemas agents send, which use these keywords
alone, skip the meta-schema.
"""

from __future__ import annotations

from typing import Any

TYPES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})

_SCHEMA = frozenset({"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else",
                     "unevaluatedItems", "unevaluatedProperties"})
"""Keywords whose value is a schema."""
_SCHEMAS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
"""Keywords whose value is a non-empty array of schemas."""
_NUMBER = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_COUNT = frozenset({"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
                    "minContains", "maxContains"})
"""Keywords whose value is a non-negative integer."""
_TEXT = frozenset({"title", "description", "format", "$comment"})
_FLAG = frozenset({"uniqueItems", "deprecated", "readOnly", "writeOnly"})
_ANY = frozenset({"default", "const"})
DRAFTS = frozenset({"https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2019-09/schema",
                    "http://json-schema.org/draft-07/schema#", "http://json-schema.org/draft-07/schema",
                    "http://json-schema.org/draft-06/schema#", "http://json-schema.org/draft-04/schema#"})
"""``$schema`` values taken as they are (URIs whatever checks the meta-schema's ``uri`` format)."""

DEFINED = frozenset({
    "$anchor", "$comment", "$defs", "$dynamicAnchor", "$dynamicRef", "$id", "$recursiveAnchor", "$recursiveRef",
    "$ref", "$schema", "$vocabulary", "additionalProperties", "allOf", "anyOf", "const", "contains",
    "contentEncoding", "contentMediaType", "contentSchema", "default", "definitions", "dependencies",
    "dependentRequired", "dependentSchemas", "deprecated", "description", "else", "enum", "examples",
    "exclusiveMaximum", "exclusiveMinimum", "format", "if", "items", "maxContains", "maxItems", "maxLength",
    "maxProperties", "maximum", "minContains", "minItems", "minLength", "minProperties", "minimum", "multipleOf",
    "not", "oneOf", "pattern", "patternProperties", "prefixItems", "properties", "propertyNames", "readOnly",
    "required", "then", "title", "type", "unevaluatedItems", "unevaluatedProperties", "uniqueItems", "writeOnly"})
"""Every keyword the 2020-12 meta-schema says anything of (the test derives the same set from it);
it says nothing of any other (``nullable``, ``x-order``), whatever its value."""


def plainly_valid(schema: Any) -> bool:
    """Whether ``schema`` is valid by the keywords above alone, and keywords the meta-schema does
    not define (False: not known, check it)."""
    stack = [schema]
    while stack:
        s = stack.pop()
        if type(s) is bool:
            continue
        if type(s) is not dict:
            return False
        for key, value in s.items():
            if key in _SCHEMA:
                stack.append(value)
            elif key == "properties":
                if type(value) is not dict:
                    return False
                stack.extend(value.values())
            elif key in _SCHEMAS:
                if type(value) is not list or not value:
                    return False
                stack.extend(value)
            elif key == "type":
                if not (type(value) is str and value in TYPES or type(value) is list and value
                        and all(type(t) is str and t in TYPES for t in value) and len(set(value)) == len(value)):
                    return False
            elif key == "required":
                if type(value) is not list or not all(type(k) is str for k in value) or len(set(value)) != len(value):
                    return False
            elif key in _TEXT:
                if type(value) is not str:
                    return False
            elif key in _NUMBER:
                if type(value) not in (int, float):
                    return False
            elif key in _COUNT:
                if type(value) is not int or value < 0:
                    return False
            elif key in _FLAG:
                if type(value) is not bool:
                    return False
            elif key in ("enum", "examples"):
                if type(value) is not list:
                    return False
            elif key == "$schema":
                if type(value) is not str or value not in DRAFTS:
                    return False
            elif key in DEFINED and key not in _ANY:
                return False
    return True
