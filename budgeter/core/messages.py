"""Chat messages as frozen domain values, and conversion from/to OpenAI chat-completions dicts.

Input is the OpenAI format: roles system/developer/user/assistant/tool, assistant ``tool_calls`` whose
``function.arguments`` is a JSON string, tool results with ``tool_call_id``. Text content parts
(``[{"type": "text", "text": ...}]``) are joined; other part types are rejected.
Two optional extension fields are kept: ``finish_reason`` on an assistant message (``length``
marks its calls as cut) and ``status`` (``ok``/``error``) on a tool result (the caller's verdict).
A tool result may declare its outcome the other common ways too, taken as ``status``: a boolean
``is_error`` (Anthropic's convention) or ``isError`` (MCP's), and a content that is an MCP
``CallToolResult`` object (``{"content": [text parts], "isError": true}``), whose text parts
become the content.
A lone surrogate (an escape such as ``"\\ud800"`` that JSON accepts and UTF-8 cannot hold) never
reaches a server: in content and reasoning it becomes U+FFFD; in tool-call arguments it becomes
U+FFFD inside the parsed JSON, which is serialized again (llama-server answers 400 to the first and
500 to the second). Each such repair is a ``Repair`` the caller may gather (``repairs=``), for the
front door to say so.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from budgeter.core.jsonargs import dumps, dumps_compact, loads, nesting
from budgeter.core.memo import IdentityMemo
from budgeter.errors import InvalidInput, InvalidMessage

ROLES = ("system", "developer", "user", "assistant", "tool")
INSTRUCTIONS = ("system", "developer")
"""Roles that instruct (OpenAI's ``developer`` is its newer name for ``system``): pinned alike. A
``developer`` message is kept as one and rendered as ``system`` (``to_template``), as llama.cpp's
server maps it where the template has no such role (all but gpt-oss's)."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: str | None = None
    finish_reason: str | None = None
    status: str | None = None
    _hash: int = field(default=0, init=False, repr=False, compare=False)
    """The hash, computed once: every build looks its messages up in several memos."""

    def __hash__(self) -> int:
        h = self._hash
        if not h:
            h = hash((self.role, self.content, self.tool_calls, self.tool_call_id, self.name, self.reasoning,
                      self.finish_reason, self.status)) or 1
            object.__setattr__(self, "_hash", h)
        return h

    @property
    def size(self) -> int:
        """Characters of payload (content, reasoning and arguments)."""
        n = len(self.content) + len(self.reasoning or "")
        return n + sum(len(c.arguments) + len(c.name) for c in self.tool_calls)


@dataclass(frozen=True, slots=True)
class Repair:
    """Lone surrogates made U+FFFD on the way in: ``replaced`` of them in ``field`` (``content``,
    ``reasoning_content``, ``tool_calls[0].function.arguments``, ...) of message ``index``;
    ``call_id``: the tool call that field belongs to."""

    index: int
    field: str
    replaced: int
    call_id: str = ""

    @property
    def note(self) -> str:
        call = f" of call {self.call_id!r}" if self.call_id else ""
        return f"messages[{self.index}].{self.field}{call} ({self.replaced})"


_SURROGATE = re.compile("[\ud800-\udfff]")


def _subn(text: str) -> tuple[str, int]:
    """``text`` without lone surrogates (an escape such as ``\\ud800`` that JSON accepts and no
    UTF-8 holds), each made U+FFFD, which a server can take and a tokenizer can count; and how many."""
    return (text, 0) if text.isascii() or not _SURROGATE.search(text) else _SURROGATE.subn("\ufffd", text)


class _Intake:
    """One message's fields cleaned as ``from_openai`` reads them, each repair noted (``Repair``)."""

    __slots__ = ("index", "repairs")

    def __init__(self, index: int) -> None:
        self.index = index
        self.repairs: list[Repair] = []

    def clean(self, text: str, field: str, *, call_id: str = "") -> str:
        out, n = _subn(text)
        self.noted(field, n, call_id=call_id)
        return out

    def noted(self, field: str, replaced: int, *, call_id: str = "") -> None:
        if replaced:
            self.repairs.append(Repair(self.index, field, replaced, call_id))


def _text(content: Any, *, where: str, intake: _Intake) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return intake.clean(content, "content")
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") != "text":
                raise InvalidMessage(f"{where}.content[{i}]: only text parts are supported",
                                     field=f"{where}.content")
            parts.append(_str(part.get("text"), field=f"{where}.content[{i}].text"))
        return intake.clean("".join(parts), "content")
    raise InvalidMessage(f"{where}.content must be a string or a list of text parts",
                         field=f"{where}.content")


_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _no_surrogates(value: Any) -> tuple[Any, int]:
    """``value`` (parsed JSON) with every lone surrogate in its strings and keys made U+FFFD, and
    how many there were."""
    if isinstance(value, str):
        return _subn(value)
    if isinstance(value, list):
        pairs = [_no_surrogates(v) for v in value]
        return [v for v, _ in pairs], sum(n for _, n in pairs)
    if isinstance(value, dict):
        out, total = {}, 0
        for k, v in value.items():
            (key, a), (item, b) = _subn(k), _no_surrogates(v)
            out[key] = item
            total += a + b
        return out, total
    return value, 0


def _repaired_arguments(text: str) -> tuple[str, int]:
    """Arguments whose JSON escapes a lone surrogate (``"\\ud800"``, which Python's JSON reads and
    llama-server refuses with HTTP 500, failing every later turn of the session): the parsed value
    with each one made U+FFFD, serialized again, and how many. Text that does not parse is kept as
    given (never cut or patched as text)."""
    if not _ESCAPED_SURROGATE.search(text):
        return text, 0
    try:
        value = loads(text)
    except (ValueError, RecursionError):
        return text, 0
    clean, n = _no_surrogates(value)
    return (dumps(clean), n) if n else (text, 0)


def _str(value: Any, *, field: str, default: str | None = None) -> str:
    if value is None and default is not None:
        return default
    if not isinstance(value, str):
        raise InvalidMessage(f"{field} must be a string", field=field)
    return value


def _arguments(raw: Any, *, field: str) -> tuple[str, int]:
    """The arguments as JSON text, and how many lone surrogates were made U+FFFD in it."""
    if isinstance(raw, str):
        text, raw_n = _subn(raw)
        text, escaped_n = _repaired_arguments(text)
        return text, raw_n + escaped_n
    if isinstance(raw, Mapping):  # some clients send objects; keep them as canonical JSON text
        return _subn(json.dumps(raw, ensure_ascii=False, separators=(",", ":")))
    if raw is None:
        return "", 0
    raise InvalidMessage(f"{field} must be a JSON string", field=field)


def _tool_call(raw: Any, *, where: str, i: int, intake: _Intake) -> ToolCall:
    at = f"tool_calls[{i}]"
    where = f"{where}.{at}"
    if not isinstance(raw, Mapping):
        raise InvalidMessage(f"{where} must be an object", field=where)
    fn = raw.get("function", raw)
    if not isinstance(fn, Mapping):
        raise InvalidMessage(f"{where}.function must be an object", field=f"{where}.function")
    call_id = intake.clean(_str(raw.get("id"), field=f"{where}.id", default=""), f"{at}.id")
    name = intake.clean(_str(fn.get("name"), field=f"{where}.function.name", default=""), f"{at}.function.name")
    arguments, n = _arguments(fn.get("arguments"), field=f"{where}.function.arguments")
    intake.noted(f"{at}.function.arguments", n, call_id=call_id)
    return ToolCall(id=call_id, name=name, arguments=arguments)


def from_openai(raw: Any, *, index: int = 0, repairs: list[Repair] | None = None) -> Message:
    """One OpenAI message dict -> Message. Raises InvalidMessage naming the bad field. ``repairs``
    gets a ``Repair`` for each field whose lone surrogates were made U+FFFD."""
    where = f"messages[{index}]"
    if not isinstance(raw, Mapping):
        raise InvalidMessage(f"{where} must be an object", field=where)
    role = raw.get("role")
    if role not in ROLES:
        raise InvalidMessage(f"{where}.role must be one of {', '.join(ROLES)}; got {role!r}",
                             field=f"{where}.role")
    calls = raw.get("tool_calls") or ()
    if not isinstance(calls, Sequence) or isinstance(calls, str):
        raise InvalidMessage(f"{where}.tool_calls must be a list", field=f"{where}.tool_calls")
    if calls and role != "assistant":
        raise InvalidMessage(f"{where}: only assistant messages carry tool_calls",
                             field=f"{where}.tool_calls")
    tool_call_id = raw.get("tool_call_id")
    if role == "tool" and not isinstance(tool_call_id, str):
        raise InvalidMessage(f"{where}.tool_call_id is required on tool messages",
                             field=f"{where}.tool_call_id")
    status = raw.get("status")
    if status not in (None, "ok", "error"):
        raise InvalidMessage(f"{where}.status must be 'ok' or 'error'", field=f"{where}.status")
    content = raw.get("content")
    if role == "tool":
        status, content = _declared(raw, status, content, where=where)
    reasoning_key = "reasoning_content" if "reasoning_content" in raw else "reasoning"
    intake = _Intake(index)
    message = Message(
        role=role,
        content=_text(content, where=where, intake=intake),
        tool_calls=tuple(_tool_call(c, where=where, i=i, intake=intake) for i, c in enumerate(calls)),
        tool_call_id=_optional(raw, "tool_call_id", intake) if role == "tool" else None,
        name=_optional(raw, "name", intake),
        reasoning=_optional(raw, reasoning_key, intake),
        finish_reason=_optional(raw, "finish_reason", intake),
        status=status,
    )
    if repairs is not None:
        repairs.extend(intake.repairs)
    return message


def _optional(raw: Mapping[str, Any], key: str, intake: _Intake) -> str | None:
    """An optional string field, cleaned like content; anything else is ignored."""
    value = raw.get(key)
    return intake.clean(value, key) if isinstance(value, str) else None


def _declared(raw: Mapping[str, Any], status: str | None, content: Any, *, where: str) -> tuple[str | None, Any]:
    """A tool result's declared outcome by any of the conventions (``status`` wins), and its
    content with an MCP ``CallToolResult`` unwrapped."""
    if isinstance(content, Mapping) and isinstance(content.get("content"), list):
        flag = content.get("isError", False)
        if not isinstance(flag, bool):
            raise InvalidMessage(f"{where}.content.isError must be a boolean", field=f"{where}.content.isError")
        status = status or ("error" if flag else "ok")
        content = content["content"]
    for key in ("is_error", "isError"):
        flag = raw.get(key)
        if flag is None:
            continue
        if not isinstance(flag, bool):
            raise InvalidMessage(f"{where}.{key} must be a boolean", field=f"{where}.{key}")
        status = status or ("error" if flag else "ok")
    return status, content


def from_openai_list(raw: Any, *, repairs: list[Repair] | None = None) -> list[Message]:
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise InvalidMessage("messages must be a list", field="messages")
    return [from_openai(m, index=i, repairs=repairs) for i, m in enumerate(raw)]


def repaired_note(repairs: Sequence[Repair], *, limit: int = 8) -> str:
    """One line for people: where lone surrogates were made U+FFFD ('' for nowhere), the first
    ``limit`` places named (a header or a log line stays short)."""
    if not repairs:
        return ""
    total = sum(r.replaced for r in repairs)
    shown = ", ".join(r.note for r in repairs[:limit])
    more = f", and {len(repairs) - limit} more fields" if len(repairs) > limit else ""
    return f"{total} lone surrogate{'s' if total > 1 else ''} replaced with U+FFFD: {shown}{more}"


def to_openai(m: Message, *, extensions: bool = False) -> dict[str, Any]:
    """Message -> OpenAI dict, postable to a chat-completions endpoint as is. ``extensions`` keeps
    budgeter's ``finish_reason`` and ``status`` too (lossless, for storage)."""
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
    if m.role == "tool":
        out["tool_call_id"] = m.tool_call_id
    if m.name is not None:
        out["name"] = m.name
    if m.reasoning is not None:
        out["reasoning_content"] = m.reasoning
    if extensions:
        out.update({k: v for k in ("finish_reason", "status") if (v := getattr(m, k)) is not None})
    return out


def stored_json(m: Message) -> str:
    """A message as a session stores it and a digest's payload holds it: ``to_openai`` with
    budgeter's extensions, as compact JSON (through orjson: the same text as ``dumps``, a message
    holding no float)."""
    return dumps_compact(to_openai(m, extensions=True))


def to_template(m: Message, *, developer: str = "system") -> dict[str, Any]:
    """Message -> the dict a chat template sees: arguments parsed into objects, as vLLM and
    llama.cpp's server do before applying the template. ``developer``: the role a developer
    message takes there (``system``, but for a template that knows the role)."""
    out = to_openai(m)
    if m.role == "developer":
        out["role"] = developer
    for call in out.get("tool_calls", ()):
        fn = call["function"]
        with contextlib.suppress(ValueError, RecursionError):  # unparseable: rendered as given
            fn["arguments"] = loads(fn["arguments"])
    return out


TOOLS_DEPTH = 64
"""How deep the tools may nest (their array is the first level): far deeper than any tool's schema,
and shallow enough for the JSON Schema check of a call (about 120 levels) and the JSON encoder."""

_tools_depth = IdentityMemo(limit=256)
"""Each tools list's depth: the proxy reads the same list again on every turn of a conversation."""


def check_tools(tools: Any, *, field: str = "tools_json") -> list[dict[str, Any]]:
    """``tools`` as a list, where it is an array of objects nesting at most ``TOOLS_DEPTH`` levels;
    every front door's check (``field``: what the caller sent them as)."""
    if not isinstance(tools, list | tuple) or not all(isinstance(t, dict) for t in tools):
        raise InvalidInput("tools must be a JSON array of objects", field=field)
    depth = _tools_depth.one(tools, nesting, tools, TOOLS_DEPTH)
    if depth > TOOLS_DEPTH:
        raise InvalidInput(f"tools nest more than {TOOLS_DEPTH} levels of objects and arrays deep (the limit: "
                           "no call could be checked against a schema that deep)",
                           field=field, reason="TOOLS_TOO_DEEP", metadata={"limit": TOOLS_DEPTH})
    return list(tools)
