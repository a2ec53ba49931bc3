import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from budgeter.core.jsonargs import (
    ARGUMENT_DEPTH,
    ArgStatus,
    Elider,
    classify_arguments,
    complete_members,
    nesting,
    shrink_leaves,
    stand_in,
)
from budgeter.core.markers import contains_marker, find_markers


@pytest.mark.parametrize("text, status", [
    ('{"path": "a.py"}', ArgStatus.VALID),
    ('```json\n{"path": "a.py"}\n```', ArgStatus.REPAIRED),
    ('Sure! {"path": "a.py"} hope this helps', ArgStatus.REPAIRED),
    ('"{\\"path\\": \\"a.py\\"}"', ArgStatus.REPAIRED),
    ("", ArgStatus.REPAIRED),
    ('{"path": "a.html", "content": "<html>cut he', ArgStatus.TRUNCATED),
    ('{"path": "a", "n": 12', ArgStatus.TRUNCATED),
    ('{"path": "a", "ok": tr', ArgStatus.TRUNCATED),
    ('{"a": "\\u00', ArgStatus.TRUNCATED),
    ('{"a": [1, 2', ArgStatus.TRUNCATED),
    ('{"offset": -', ArgStatus.TRUNCATED),  # a number cut before its digits, point or exponent
    ('{"ratio": 0.', ArgStatus.TRUNCATED),
    ('{"big": 1e+', ArgStatus.TRUNCATED),
    ('{"ratio": 0., "b": 1}', ArgStatus.INVALID),
    ('{"ratio": 1.5.', ArgStatus.INVALID),  # no number goes on so
    ('{"big": 1e5e', ArgStatus.INVALID),
    ('```json\n{"path": "a.py", "content": "def f():\\n    ret', ArgStatus.TRUNCATED),  # in a fence
    ('Sure! Here it is: {"path": "a.py", "n": [1, 2', ArgStatus.TRUNCATED),  # after prose
    ('Use {x}: {"path": "a.py", "n": [1, 2', ArgStatus.INVALID),  # not one object: no pick
    ('{"a" 1}', ArgStatus.INVALID),
    ("[1, 2]", ArgStatus.INVALID),
    ('{"a": 1} {"b": 2}', ArgStatus.INVALID),
    ("path=a.py", ArgStatus.INVALID),
])
def test_classify(text, status):
    assert classify_arguments(text).status is status


def test_finish_reason_length_marks_broken_arguments_truncated():
    assert classify_arguments('{"a": 1,, ', finish_reason="length").status is ArgStatus.TRUNCATED
    assert classify_arguments('{"a": 1}', finish_reason="length").status is ArgStatus.VALID


def test_truncated_is_never_completed():
    text = '{"path": "site/a.html", "content": "<html><body>half'
    out, handle = stand_in(text, classify_arguments(text))
    value = json.loads(out)
    assert value["path"] == "site/a.html"
    assert "content" not in value  # the cut field is not "recovered"
    assert "truncated" in value["_budgeter"] and handle in value["_budgeter"]


def test_complete_members_keeps_only_finished_fields():
    assert complete_members('{"a": {"b": 1}, "c": [1, "x"], "d": "cu') == ({"a": {"b": 1}, "c": [1, "x"]}, "d")


def test_repair_returns_the_object():
    v = classify_arguments('```\n{"k": "é"}\n```')
    assert v.value == {"k": "é"} and v.repair == "removed code fence"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3000),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=8), json_values, max_size=5))
def test_shrink_leaves_valid_never_longer_and_utf8(value):
    sink: dict[str, str] = {}
    out = shrink_leaves(value, limit=200, keep=90, elide=Elider(sink))
    text = json.dumps(out, ensure_ascii=False)
    assert json.loads(text) == out
    assert len(text) <= len(json.dumps(value, ensure_ascii=False))
    assert set(out) == set(value)  # keys untouched
    for handle, payload in sink.items():
        assert handle in text or not contains_marker(text) or payload


def test_shrink_inner_json_document_stays_json():
    inner = json.dumps({"rows": ["x" * 5000, 1, True]})
    out = shrink_leaves({"body": inner, "n": 3}, limit=500, keep=100, elide=Elider({}))
    assert out["n"] == 3
    assert json.loads(out["body"])["rows"][1:] == [1, True]
    assert len(out["body"]) < len(inner)


def test_shrunk_cjk_is_not_escaped():
    out = shrink_leaves({"t": "上下文" * 2000}, limit=100, keep=90, elide=Elider({}))
    assert "上下文" in json.dumps(out, ensure_ascii=False)


def test_markers_are_detected():
    text = 'ok ⟦budgeter:elided 7,146 chars html h=0123456789abcdef⟧ end'
    assert contains_marker(text) and find_markers(text)
    assert not contains_marker("[elided] plain text")


@pytest.mark.parametrize("text", [
    '{"seed": 18446744073709551616}', '{"a": [1, {"b": -9223372036854775809}]}',
    '{"n": 123456789012345678901234567890}', '{"x": 18446744073709551615, "y": -9223372036854775808}',
    '{"x": 1e19, "y": 1e400, "z": 0.5}', '{"s": "\\ud800"}', '[1, "2", null]'])
def test_loads_reads_what_the_standard_library_reads(text):
    """orjson reads an integer past 64 bits as the nearest float without a word; ``loads`` must
    not: a proxied body or a tool's schema would lose digits."""
    from budgeter.core.jsonargs import loads, loads_object

    assert repr(loads(text)) == repr(json.loads(text))
    if text.startswith("{"):
        assert repr(loads_object(text)) == repr(json.loads(text))


_ANY_CHAR = st.characters(codec=None, categories=None)  # surrogates, controls, U+2028, astral: all
_PLAIN_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(_ANY_CHAR),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(_ANY_CHAR), inner, max_size=4),
    max_leaves=12)


@given(st.dictionaries(st.text(_ANY_CHAR, max_size=6), _PLAIN_JSON, min_size=1, max_size=4),
       st.booleans(), st.data())
def test_every_cut_of_an_object_is_seen_as_cut_and_the_whole_as_complete(value, ascii_only, data):
    """``viable_prefix`` on JSON text cut anywhere (inside strings, escapes, numbers, literals)
    says it is cut; the whole text, that it is complete."""
    from budgeter.core.jsonargs import viable_prefix

    text = json.dumps(value, ensure_ascii=ascii_only, indent=data.draw(st.sampled_from([None, 1])))
    assert viable_prefix(text) == (False, "complete")
    at = data.draw(st.integers(1, len(text) - 1))
    cut, why = viable_prefix(text[:at])
    assert cut, (text[:at], why)


def test_arguments_nested_past_the_limit_are_invalid_and_say_so():
    """Whether arguments nested ~1,000 levels parsed depended on the stack below the parser, and
    the encoder then overflowed (an internal error through gRPC); a fixed limit decides."""
    def nested(levels):
        return '{"a": ' * (levels - 1) + '{"b": 1' + "}" * levels

    assert classify_arguments(nested(ARGUMENT_DEPTH)).status is ArgStatus.VALID
    for levels in (ARGUMENT_DEPTH + 1, 990, 5000):
        verdict = classify_arguments(nested(levels))
        assert verdict.status is ArgStatus.INVALID and "nested" in verdict.detail, (levels, verdict)
    assert nesting({"a": [1, {"b": []}], "c": "x"}, 10) == 4
    assert nesting("x", 10) == 0 and nesting([[[[]]]], 2) == 3  # counted no further than the limit + 1


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=30)


@given(_JSON, st.integers(0, 6))
def test_nesting_counts_levels_as_a_recursive_walk_does_up_to_the_limit(value, limit):
    def levels(v):
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        return 0 if children is None else 1 + max(map(levels, children), default=0)

    assert nesting(value, limit) == min(levels(value), limit + 1)
