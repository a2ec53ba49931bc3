"""Template capability probing and the generic rendering used where a template falls short.

At profile load, ``probe`` renders small conversations with sentinel strings and records whether
the template renders tool schemas, tool calls and tool results, and whether it accepts two
consecutive messages of one role. ``adapter`` returns the rewrite applied before rendering:

- tools not rendered: a system message (merged into the first one) holding ``# Tools`` and one
  JSON schema per line;
- tool calls not rendered: each call appended to the assistant content as
  ``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``;
- tool role rejected or dropped: tool results become user messages
  ``<tool_response>\\n...\\n</tool_response>``;
- strict alternation: consecutive messages of one role are merged with a blank line.

The rewritten conversation is what budgeter counts and what the report names, so a template that
would drop tool traffic never leads to a silent under-count.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from budgeter.core.counting import Adapter
from budgeter.core.memo import IdentityMemo
from budgeter.core.typing import ChatFormat

_TOOL = {"type": "function", "function": {"name": "zqprobetool", "description": "d",
         "parameters": {"type": "object", "properties": {}}}}
_CALL = {"id": "zqid", "type": "function", "function": {"name": "zqprobecall",
         "arguments": {"zqarg": 1}}}


@dataclass(frozen=True, slots=True)
class Capabilities:
    tools: bool
    tool_calls: bool
    tool_role: bool
    alternation_free: bool

    def notes(self) -> list[str]:
        out = []
        if not self.tools:
            out.append("template does not render tool schemas: counted as a system message")
        if not self.tool_calls:
            out.append("template does not render tool calls: counted as <tool_call> text")
        if not self.tool_role:
            out.append("template cannot render tool results: counted as user messages")
        if not self.alternation_free:
            out.append("template requires alternating roles: consecutive messages merged")
        return out


def _renders(fmt: ChatFormat, messages: list[dict[str, Any]], tools: Any, needle: str) -> bool:
    try:
        return needle in fmt.render(messages, tools, add_generation_prompt=True)
    except Exception:
        return False


def probe(fmt: ChatFormat) -> Capabilities:
    user = {"role": "user", "content": "hi"}
    call = {"role": "assistant", "content": "", "tool_calls": [_CALL]}
    result = {"role": "tool", "tool_call_id": "zqid", "content": "zqprobeout"}
    return Capabilities(
        tools=_renders(fmt, [user], [_TOOL], "zqprobetool"),
        tool_calls=_renders(fmt, [user, call, result], None, "zqprobecall")
        or _renders(fmt, [user, call], None, "zqprobecall"),
        tool_role=_renders(fmt, [user, {**call, "tool_calls": [_CALL]}, result], None, "zqprobeout"),
        alternation_free=_renders(fmt, [user, {"role": "user", "content": "zqtwo"}], None, "zqtwo"),
    )


def adapter(caps: Capabilities) -> Adapter | None:
    if caps.tools and caps.tool_calls and caps.tool_role and caps.alternation_free:
        return None
    memo = IdentityMemo(limit=32 << 20, size=_content_chars)  # a rewritten tool result copies its text

    def one(m: dict[str, Any]) -> dict[str, Any]:
        out = dict(m)
        if not caps.tool_calls:
            out = _calls_as_text(out)
        if not caps.tool_role:
            out = _result_as_user(out)
        return out

    def adapt(messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]]):  # type: ignore[no-untyped-def]
        # each rewrite is made once per input (the same dict objects come on every build, never
        # changed), and the same output objects come back, so renders and checks meet known objects
        out = [memo.get((m,), one, m) for m in messages]
        if tools and not caps.tools:
            if out and out[0].get("role") == "system":
                out[0] = memo.get((out[0], tools), _tools_into, out[0], tools)
            else:
                out.insert(0, memo.get((tools,), _tools_into, None, tools))
            tools = ()
        if not caps.alternation_free:
            out = _merge_runs(out, memo)
        return out, tools

    return adapt


def _tools_into(system: dict[str, Any] | None, tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The system message with the tools appended (a new one when there was none)."""
    return _tools_as_system([system] if system is not None else [], tools)[0]


def _tools_as_system(messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]]):  # type: ignore[no-untyped-def]
    text = "# Tools\n" + "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    if messages and messages[0].get("role") == "system":
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{text}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def _calls_as_text(m: dict[str, Any]) -> dict[str, Any]:
    calls = m.pop("tool_calls", None)
    if not calls:
        return m
    rendered = [
        "<tool_call>\n" + json.dumps({"name": c["function"]["name"],
                                      "arguments": c["function"]["arguments"]},
                                     ensure_ascii=False) + "\n</tool_call>"
        for c in calls
    ]
    m["content"] = "\n".join(([m["content"]] if m.get("content") else []) + rendered)
    return m


def _result_as_user(m: dict[str, Any]) -> dict[str, Any]:
    if m.get("role") != "tool":
        return m
    return {"role": "user", "content": f"<tool_response>\n{m.get('content', '')}\n</tool_response>"}


def _content_chars(m: dict[str, Any]) -> int:
    return len(m.get("content") or "")


def _merge_runs(messages: list[dict[str, Any]], memo: IdentityMemo) -> list[dict[str, Any]]:
    runs: list[list[dict[str, Any]]] = []
    for m in messages:
        if runs and runs[-1][-1]["role"] == m["role"] and m["role"] != "system":
            runs[-1].append(m)
        else:
            runs.append([m])
    return [run[0] if len(run) == 1 else memo.get(tuple(run), _merged, run) for run in runs]


def _merged(run: list[dict[str, Any]]) -> dict[str, Any]:
    out = run[0]
    for m in run[1:]:
        out = {**out, "content": f"{out.get('content', '')}\n\n{m.get('content', '')}"}
    return out
