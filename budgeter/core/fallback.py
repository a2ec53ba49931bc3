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
- a system message only at the start (Qwen3.5/3.6 raise "System message must be at the
  beginning"; Gemma 3 breaks its alternation): a later system message becomes a user message with
  the same content, as LiteLLM sends system text to models without a system role. History is
  append-only, so refusing it at render time would leave a session that can never be built.
- strict alternation: consecutive messages of one role are merged with a blank line (tool results
  only where two in a row do not render).

The rewritten conversation is what budgeter counts and what the report names, so a template that
would drop tool traffic never leads to a silent under-count.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from budgeter.core.counting import Adaptation, Adapter
from budgeter.core.memo import IdentityMemo, Walks, same_objects
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
    system_anywhere: bool = True
    tool_runs: bool = False
    """Results of two calls render one after the other (not merged where roles must alternate)."""

    def adaptations(self) -> list[Adaptation]:
        """Each rewrite of the request this template needs (all are sent as counted)."""
        out = []
        if not self.tools:
            out.append(Adaptation("tools_as_text", "template does not render tool schemas: counted (and sent) as "
                                  "a system message"))
        if not self.tool_calls:
            out.append(Adaptation("tool_calls_as_text", "template does not render tool calls: counted (and sent) "
                                  "as <tool_call> text"))
        if not self.tool_role:
            out.append(Adaptation("tool_results_as_user", "template cannot render tool results: counted (and "
                                  "sent) as user messages"))
        if not self.system_anywhere:
            out.append(Adaptation("system_as_user", "template takes a system message only at the start: a later "
                                  "one is counted (and sent) as a user message"))
        if not self.alternation_free:
            out.append(Adaptation("roles_merged", "template requires alternating roles: consecutive messages "
                                  "merged (and sent merged)"))
        return out

    def notes(self) -> list[str]:
        return [a.note for a in self.adaptations()]

    @property
    def system_only(self) -> bool:
        """The one rewrite needed is a later system message's, so a conversation with none is
        sent as it is (``core.counting.later_system``)."""
        return self.tools and self.tool_calls and self.tool_role and self.alternation_free and not self.system_anywhere

    @property
    def complete(self) -> bool:
        return self.tools and self.tool_calls and self.tool_role and self.alternation_free and self.system_anywhere


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
        system_anywhere=_renders(fmt, [{"role": "system", "content": "s"}, user, {"role": "assistant", "content": "a"},
                                       {"role": "system", "content": "zqlater"}, {"role": "user", "content": "b"}],
                                 None, "zqlater"),
        tool_runs=_renders(fmt, [user, {**call, "tool_calls": [_CALL, {**_CALL, "id": "zqid2"}]}, result,
                                 {**result, "tool_call_id": "zqid2", "content": "zqsecond"}], None, "zqsecond"),
    )


@dataclass(slots=True)
class _Adapted:
    """One conversation's last rewrite: each message's own rewrite (``ones``), the list after the
    tools are placed (``placed``), the output, and where in ``placed`` each output message's run
    starts."""

    ones: list[dict[str, Any]]
    placed: list[dict[str, Any]]
    out: list[dict[str, Any]]
    starts: list[int]


def adapter(caps: Capabilities) -> Adapter | None:
    if caps.complete:
        return None
    memo = IdentityMemo(size=_content_chars)  # a rewritten tool result copies its text
    walks: Walks[_Adapted] = Walks(size=_content_chars)
    """Each conversation's last rewrite, which its next build extends: only the new messages are
    rewritten and only the runs from the last one they may extend are merged again (a walk over
    every message grew with history: ``bench_service --profiles gemma3``)."""

    def one(m: dict[str, Any], first: bool) -> dict[str, Any]:
        role = m.get("role")
        system = not caps.system_anywhere and not first and role == "system"
        if not (system or (not caps.tool_calls and m.get("tool_calls")) or (not caps.tool_role and role == "tool")):
            return m  # (the same object: a conversation no rule touches comes back as it was given)
        out = dict(m)
        if system:
            out["role"] = "user"
        if not caps.tool_calls:
            out = _calls_as_text(out)
        if not caps.tool_role:
            out = _result_as_user(out)
        return out

    def adapt(messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]]):  # type: ignore[no-untyped-def]
        # each rewrite is made once per input (the same dict objects come on every build, never
        # changed), and the same output objects come back, so renders and checks meet known objects
        held, shared = walks.find(messages) if messages else (None, 0)
        ones = held.ones[:shared] if held is not None else []
        ones += [memo.get((m,), one, m, i == 0, key=(i == 0,)) for i, m in enumerate(messages[shared:], shared)]
        placed = ones
        if tools and not caps.tools:
            if ones and ones[0].get("role") == "system":
                placed = [memo.get((ones[0], tools), _tools_into, ones[0], tools), *ones[1:]]
            else:
                placed = [memo.get((tools,), _tools_into, None, tools), *ones]
            tools = ()
        out: list[dict[str, Any]] = placed
        starts: list[int] = []
        if not caps.alternation_free:
            out, starts = _merge_runs(placed, memo, held, tool_runs=caps.tool_runs)
        if len(messages) > 1:  # (not a message priced alone: its walk would hide the conversation's)
            walks.keep(messages, _Adapted(ones, placed, out, starts))
        return out, tools

    def each(tools: Sequence[Mapping[str, Any]]) -> Callable[[dict[str, Any], bool], dict[str, Any]] | None:
        """Where ``adapt`` gives each message's own rewrite in order (no runs merged, no tools
        placed), the rewrite of one message (``first``: it opens the conversation), the same
        object ``adapt`` gives for it; else None."""
        if not caps.alternation_free or (tools and not caps.tools):
            return None
        return lambda m, first: memo.get((m,), one, m, first, key=(first,))

    adapt.caps = caps  # type: ignore[attr-defined]  # (what ``core.counting.sent`` asks first)
    adapt.each = each  # type: ignore[attr-defined]  # (``TemplateCounter._grown``)
    return adapt


def _tools_into(system: dict[str, Any] | None, tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The system message with the tools appended (a new one when there was none)."""
    text = "# Tools\n" + "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    if system is None:
        return {"role": "system", "content": text}
    return {**system, "content": f"{system['content']}\n\n{text}"}


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


def _content_chars(m: Mapping[str, Any]) -> int:
    content = m.get("content")
    return len(content) if isinstance(content, str) else 0


def _merge_runs(messages: list[dict[str, Any]], memo: IdentityMemo, held: _Adapted | None = None, *,
                tool_runs: bool = False) -> tuple[list[dict[str, Any]], list[int]]:
    """Consecutive messages of one role (but system, and tool results where ``tool_runs``: each
    answers its own call, and Mistral's templates skip them when they check that roles alternate)
    merged, and where each run starts. ``held``:
    the same conversation's previous merge; its runs that end before the first message the two
    lists do not share (the next run starts inside what they share) are kept as they were."""
    out: list[dict[str, Any]] = []
    starts: list[int] = []
    i = 0  # where merging starts again
    if held is not None and held.starts:
        same = same_objects(held.placed, messages)
        keep = bisect.bisect_left(held.starts, same) - 1  # runs whose successor starts before `same`
        if keep > 0:
            out, starts, i = held.out[:keep], held.starts[:keep], held.starts[keep]
    n = len(messages)
    while i < n:
        role, j = messages[i]["role"], i + 1
        if role != "system" and not (tool_runs and role == "tool"):
            while j < n and messages[j]["role"] == role:
                j += 1
        run = messages[i:j]
        out.append(run[0] if len(run) == 1 else memo.get(tuple(run), _merged, run))
        starts.append(i)
        i = j
    return out, starts


def _merged(run: list[dict[str, Any]]) -> dict[str, Any]:
    out = run[0]
    for m in run[1:]:
        out = {**out, "content": f"{out.get('content', '')}\n\n{m.get('content', '')}"}
    return out
