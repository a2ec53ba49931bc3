"""Tool-call arguments: classify, repair losslessly, stand in for broken ones, shrink leaves.

Verdicts:
- VALID: the text is one JSON object.
- REPAIRED: a lossless fix gives one JSON object: code fences removed, text around exactly one
  balanced object removed, a double-encoded JSON string decoded, or empty text read as ``{}``.
- TRUNCATED: the text is a viable prefix of a JSON object that ends while a string, number,
  literal, object or array is still open (typical of ``finish_reason=length``). It is never
  completed by inventing closing quotes or braces.
- INVALID: anything else (including valid JSON that is not an object).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from budgeter.core.markers import fmt_chars, handle_for, marker

try:  # a core dependency; the pure core still imports without it
    import orjson
except ImportError:  # pragma: no cover
    orjson = None  # type: ignore[assignment]


class ArgStatus(StrEnum):
    VALID = "VALID"
    REPAIRED = "REPAIRED"
    TRUNCATED = "TRUNCATED"
    INVALID = "INVALID"


@dataclass(frozen=True, slots=True)
class ArgVerdict:
    status: ArgStatus
    value: dict[str, Any] | None = None  # the object, for VALID and REPAIRED
    repair: str = ""  # what a REPAIRED fix did
    detail: str = ""  # why TRUNCATED/INVALID


_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (which UTF-8 cannot encode), checked by encoding in
    C; ASCII text is answered at once."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def escape_surrogates(text: str) -> str:
    """Lone surrogates (from a ``"\\ud800"`` escape) cannot be encoded as UTF-8; inside JSON text
    they only occur in strings, where the ``\\uXXXX`` escape means the same value."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if has_surrogate(text) else text


def loads(text: str | bytes) -> Any:
    """``json.loads``, through orjson where it can (prompt bodies: ``bench_proxy``).
    What orjson refuses and the standard library reads (a lone surrogate escape, NaN, 1e400) is
    read by the standard library, and so is a value where orjson may have read an integer past
    64 bits as the nearest float (it does so without a word): the result is the same either way."""
    if orjson is not None:
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
        else:
            if not _wide_float(value):
                return value
    return json.loads(text)


def _wide_float(value: Any) -> bool:
    """Whether ``value`` holds a whole float outside the 64-bit integers (what orjson makes of
    such an integer; a float written so in the text is read again alike)."""
    return _any_leaf(value, _is_wide_float)


def _is_wide_float(x: Any) -> bool:
    return type(x) is float and not -9223372036854775808.0 < x < 18446744073709551616.0 and x.is_integer()


def _any_leaf(value: Any, test: Callable[[Any], bool]) -> bool:
    """Whether ``test`` holds for a value inside ``value`` that is not a dict, list or tuple."""
    stack = [value]
    while stack:
        x = stack.pop()
        kind = type(x)
        if kind is dict:
            stack.extend(x.values())
        elif kind is list or kind is tuple:
            stack.extend(x)
        elif test(x):
            return True
    return False


ARGUMENT_DEPTH = 128
"""How deep a call's arguments may nest (the object itself is the first level) and be taken as an
object. Deeper ones overflow the JSON Schema check (about 120 levels) and, past about a thousand
less the stack below them, the JSON parser, encoder and templates: whether such arguments parsed
depended on the front door they came through, and the encoder's overflow was an internal error."""


def loads_object(text: str) -> dict[str, Any] | None:
    """The JSON object in ``text``, or None when it is not one (or nests past ``ARGUMENT_DEPTH``)."""
    try:
        value = loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) and nesting(value, ARGUMENT_DEPTH) <= ARGUMENT_DEPTH else None


def nesting(value: Any, limit: int) -> int:
    """How many levels of objects and arrays ``value`` nests (a scalar: 0), counted no further than
    ``limit + 1``: a level at a time, without recursion, and the JSON types told apart by a set
    lookup (a walk with ``isinstance`` per value took five times as long: 49 tools, 265 us)."""
    depth, level = 0, [value]
    while depth <= limit:
        level = [v for v in level if type(v) in _CONTAINERS
                 or type(v) not in _SCALARS and isinstance(v, dict | list | tuple)]
        if not level:
            break
        depth += 1
        level = [c for v in level for c in (v.values() if isinstance(v, dict) else v)]
    return depth


_CONTAINERS = frozenset({dict, list, tuple})
_SCALARS = frozenset({str, int, float, bool, type(None)})


def dumps_bytes(value: Any) -> bytes:
    """Compact UTF-8 JSON, through orjson where it can (prompt bodies: ``bench_proxy``); what
    orjson refuses (a lone surrogate, an integer past 64 bits) goes through ``dumps``."""
    if orjson is not None:
        try:
            return orjson.dumps(value)
        except TypeError:
            pass
    return dumps(value).encode()


def dumps_compact(value: Any) -> str:
    """``dumps_bytes`` as text: the same text as ``dumps`` for values without floats (orjson
    writes some floats in another form of the same number), for the messages a store keeps."""
    return dumps_bytes(value).decode()


def dumps_text(value: Any, **kw: Any) -> str:
    """``json.dumps`` with ``ensure_ascii=False`` whose result is always encodable as UTF-8."""
    return escape_surrogates(json.dumps(value, ensure_ascii=False, **kw))


def dumps(value: Any) -> str:
    """Canonical serialization: compact, UTF-8 (no \\u escapes but for lone surrogates)."""
    return escape_surrogates(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


_FENCE = re.compile(r"^\s*```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.S)


def _repairs(text: str) -> list[tuple[str, str]]:
    """Candidate lossless fixes, in order: (description, new text)."""
    out: list[tuple[str, str]] = []
    if not text.strip():
        out.append(("empty arguments read as {}", "{}"))
    fence = _FENCE.match(text)
    if fence:
        out.append(("removed code fence", fence.group(1)))
    try:
        inner = json.loads(text)
        if isinstance(inner, str):
            out.append(("decoded double-encoded JSON string", inner))
    except (ValueError, RecursionError):
        pass
    span = _single_object_span(text)
    if span is not None:
        out.append(("removed text around the object", text[span[0] : span[1]]))
    return out


def _single_object_span(text: str) -> tuple[int, int] | None:
    start = text.find("{")
    if start < 0:
        return None
    try:
        _, end = json.JSONDecoder().raw_decode(text, start)
    except (ValueError, RecursionError):
        return None
    if "{" in text[end:] or "{" in text[:start]:
        return None  # more than one object: not a lossless pick
    return start, end


_TOKEN = re.compile(
    r'\s*(?:(")|([{}\[\],:])|(-?(?:0|[1-9][0-9]*)(?:\.(?:[0-9]+(?:[eE][+-]?[0-9]*)?)?|[eE][+-]?[0-9]*)?|-)'
    r'|([a-z]+)|(\S))'
)
"""One token of JSON text. A number may also be one cut where no number ends (``-``, ``1.``,
``1e``, ``1.5e+``): valid only at the very end of the text."""
_STRING_BODY = re.compile(r'[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*')
"""A JSON string's body up to its closing quote, or to where it stops being one (the cut). Runs of
plain characters first, then each escape with the run after it: the same language as
``(?:plain|escape)*``, which ``re`` walked one character per repetition."""


def viable_prefix(text: str) -> tuple[bool, str]:
    """Is ``text`` a proper prefix of some JSON object? (True, why) when it is cut off."""
    stack: list[str] = []
    expect = "value"  # value | key | key_or_end | colon | comma_or_end | value_or_end | done
    i, n = 0, len(text)
    while True:
        m = _TOKEN.match(text, i)
        if m is None:  # only whitespace left
            if expect == "done":
                return False, "complete"
            return True, f"ends with {len(stack)} open container(s)"
        i = m.end()
        quote, punct, number, word, other = m.groups()
        if expect == "done" or other is not None:
            return False, f"unexpected character at {m.start(m.lastindex or 0)}"
        if quote:
            j = _STRING_BODY.match(text, i).end()  # type: ignore[union-attr]
            if j >= n or _escape_prefix(text[j:]):
                return True, "cut inside a string"
            if text[j] != '"':
                return False, f"bad string at {i - 1}"
            i = j + 1
            if expect in ("key", "key_or_end"):
                expect = "colon"
                continue
            if expect not in ("value", "value_or_end"):
                return False, f"unexpected string at {i}"
            expect = "comma_or_end" if stack else "done"
            continue
        if punct:
            expect, err = _punct(punct, expect, stack)
            if err:
                return False, f"{err} at {m.start(2)}"
            continue
        if stack == [] and expect == "value":
            return False, "not an object"
        token = number or word or ""
        if expect not in ("value", "value_or_end"):
            return False, f"unexpected {token!r} at {m.start()}"
        if word and word not in ("true", "false", "null"):
            if i >= n and any(w.startswith(word) for w in ("true", "false", "null")):
                return True, "cut inside a literal"
            return False, f"bad literal {word!r}"
        if number and i >= n:
            return True, "cut inside a number"
        if number and number[-1] in "-+.eE":
            return False, f"bad number {number!r} at {m.start(3)}"
        expect = "comma_or_end" if stack else "done"


def _escape_prefix(rest: str) -> bool:
    """``rest`` is an escape sequence cut by the end of the text."""
    if rest == "\\":
        return True
    return rest.startswith("\\u") and len(rest) < 6 and all(
        c in "0123456789abcdefABCDEF" for c in rest[2:]
    )


def _punct(p: str, expect: str, stack: list[str]) -> tuple[str, str]:
    if p in "{[":
        if expect not in ("value", "value_or_end"):
            return expect, f"unexpected {p!r}"
        stack.append(p)
        return ("key_or_end" if p == "{" else "value_or_end"), ""
    if p in "}]":
        want = "{" if p == "}" else "["
        ok = expect in ("comma_or_end", "key_or_end" if p == "}" else "value_or_end")
        if not stack or stack[-1] != want or not ok:
            return expect, f"unexpected {p!r}"
        stack.pop()
        return ("comma_or_end" if stack else "done"), ""
    if p == ":":
        return ("value", "") if expect == "colon" else (expect, "unexpected ':'")
    if expect != "comma_or_end":
        return expect, "unexpected ','"
    return ("key" if stack[-1] == "{" else "value"), ""


def classify_arguments(text: str, *, finish_reason: str | None = None) -> ArgVerdict:
    value = loads_object(text)
    if value is not None:
        return ArgVerdict(ArgStatus.VALID, value=value)
    start = text.find("{")  # the object may follow a code fence or prose ("Sure! {...")
    if start >= 0:
        cut, why = viable_prefix(text[start:])
        if cut or (finish_reason == "length" and not text[:start].strip()):
            return ArgVerdict(ArgStatus.TRUNCATED, detail=why if cut else "finish_reason=length")
    for description, candidate in _repairs(text):
        fixed = loads_object(candidate)
        if fixed is not None:
            return ArgVerdict(ArgStatus.REPAIRED, value=fixed, repair=description)
    if finish_reason == "length":
        return ArgVerdict(ArgStatus.TRUNCATED, detail="finish_reason=length")
    return ArgVerdict(ArgStatus.INVALID, detail=why_invalid(text))


def why_invalid(text: str) -> str:
    """What is wrong with arguments that are not a JSON object, and what to send instead."""
    try:
        value = json.loads(text)
    except RecursionError:
        return "not valid JSON: nested too deeply"
    except ValueError as exc:
        at = getattr(exc, "pos", 0)
        trailing = text[:at].rstrip().endswith(",") and text[at:].lstrip()[:1] in ("}", "]")
        hint = " (a trailing comma: remove it)" if trailing else ""
        return (f"not valid JSON: {getattr(exc, 'msg', exc)} at character {at}{hint}; "
                "send the arguments as one JSON object")
    if isinstance(value, dict):  # (an object that loads_object refused)
        return f"a JSON object nested more than {ARGUMENT_DEPTH} levels deep; send flatter arguments"
    kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")
    return f"JSON {kind}, not an object; send the arguments as one JSON object"


def complete_members(text: str) -> tuple[dict[str, Any], str]:
    """The top-level members of a cut or broken object whose values closed before the cut, and
    the name of the member the cut (or the break) fell in ('' when none).

    A value counts as closed only when a ``,`` or ``}`` follows it: a number, literal or string
    at the very end of a cut text may have been shortened (``"lines": 12`` of ``120``, ``3.`` of
    ``3.5``), so it is never kept as if complete."""
    decoder = json.JSONDecoder()
    out: dict[str, Any] = {}
    i = text.find("{")
    if i < 0:
        return out, ""
    i += 1
    ws = re.compile(r"[\s,]*")
    space = re.compile(r"\s*")
    while True:
        i = ws.match(text, i).end()  # type: ignore[union-attr]
        if i >= len(text) or text[i] == "}":
            return out, ""
        try:
            key, i = decoder.raw_decode(text, i)
        except (ValueError, RecursionError):
            return out, "a cut key"
        if not isinstance(key, str):
            return out, "a bad key"
        i = space.match(text, i).end()  # type: ignore[union-attr]
        if text[i : i + 1] != ":":
            return out, key
        i = space.match(text, i + 1).end()  # type: ignore[union-attr]
        try:
            value, i = decoder.raw_decode(text, i)
        except (ValueError, RecursionError):
            return out, key
        i = space.match(text, i).end()  # type: ignore[union-attr]
        if text[i : i + 1] not in (",", "}"):
            return out, key  # nothing closed the value: it may be cut short
        out[key] = value


STAND_IN_KEY = "_budgeter"


def stand_in(text: str, verdict: Any) -> tuple[str, str]:
    """Valid JSON for TRUNCATED/INVALID arguments: the complete fields, plus a marker field that
    says it is a stand-in and where the original went. Returns (json_text, handle)."""
    handle = handle_for(text)
    kept, cut = complete_members(text)
    note = marker(
        "stand_in",
        f"{verdict.status.value.lower()} arguments",
        fmt_chars(len(text)),
        "" if not cut else f"{cut} dropped" if cut.startswith("a ") else f"member {cut!r} dropped",
        "not executed",
        f"h={handle}",
    )
    return dumps({**kept, STAND_IN_KEY: note}), handle


def shrink_leaves(
    value: Any, *, limit: int, keep: int, elide: Elider, depth: int = 0
) -> Any:
    """Shrink string leaves longer than ``limit`` chars to head + marker + tail. Keys, numbers,
    booleans and lists of scalars are untouched; a JSON document inside a string is shrunk
    inside and re-serialized, so it stays valid JSON."""
    if depth > 64:
        return value
    if isinstance(value, dict):
        return {k: shrink_leaves(v, limit=limit, keep=keep, elide=elide, depth=depth + 1)
                for k, v in value.items()}
    if isinstance(value, list):
        if all(not isinstance(v, (str, dict, list)) for v in value):
            return value
        return [shrink_leaves(v, limit=limit, keep=keep, elide=elide, depth=depth + 1) for v in value]
    if not isinstance(value, str) or len(value) <= limit:
        return value
    inner = _embedded_json(value)
    if inner is not None:
        shrunk = dumps(shrink_leaves(inner, limit=limit, keep=keep, elide=elide, depth=depth + 1))
        return shrunk if len(shrunk) < len(value) else value
    return elide(value, keep)


def _embedded_json(s: str) -> Any:
    t = s.lstrip()
    if not t or t[0] not in "{[":
        return None
    try:
        return json.loads(s)
    except (ValueError, RecursionError):
        return None


class Elider:
    """Cuts long text to head + marker + tail and records the payload under its handle."""

    def __init__(self, sink: dict[str, str], kind: str = "") -> None:
        self.sink = sink
        self.kind = kind

    def __call__(self, text: str, keep: int) -> str:
        head, tail = keep * 2 // 3, keep // 3
        handle = handle_for(text)
        note = marker("elided", fmt_chars(len(text) - head - tail), self.kind, f"h={handle}")
        out = f"{text[:head]}\n{note}\n{text[len(text) - tail:] if tail else ''}"
        if len(out) >= len(text):
            return text
        self.sink[handle] = text
        return out
