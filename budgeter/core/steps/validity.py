"""Steps that run on every build, so that every prompt is valid for a strict provider.

- ``normalize_pairing``: every tool result directly follows the assistant message holding its
  call, and every call has a result. A result with no open call (orphan, duplicate id, or
  separated from its call) becomes a user message that says so; a call with no result gets a
  stand-in result that says none was recorded. Well-formed input passes unchanged.
- ``stand_in_json``: REPAIRED arguments are replaced by their canonical JSON; TRUNCATED and
  INVALID ones by a valid stand-in object that keeps the complete fields and marks itself. The
  original text stays retrievable by handle.
"""

from __future__ import annotations

from dataclasses import replace

from budgeter.core.jsonargs import ArgStatus, dumps, stand_in
from budgeter.core.markers import handle_for, marker
from budgeter.core.messages import Message, ToolCall
from budgeter.core.pipeline import Action, Context, Item, Kind, StepReport, View, with_message


def normalize_pairing(view: View, ctx: Context) -> tuple[View, StepReport]:
    """Every build runs it: a well-formed view (most builds) comes back as the same tuple, and a
    message that opens no call costs one test. The items the previous build's prompt ends with
    every call answered (``ctx.paired``) are not walked again: a walk of every item grew with a long
    session's prompt (``bench_instructions``)."""
    start = ctx.paired
    out: list[Item] = []
    add = out.append
    actions: list[Action] = []
    open_ids: list[str] = []
    opener: Item | None = None
    for item in view[start:] if start else view:
        m = item.message
        if m.role == "tool":
            if m.tool_call_id in open_ids:
                open_ids.remove(m.tool_call_id)
                add(item)
                continue
            if open_ids:  # the orphan becomes a user message: the calls still open are answered first,
                _close(out, actions, opener, open_ids)  # so that nothing comes between a call and its result
            add(_orphan(item))
            actions.append(Action(item.index, "orphan_result_as_user", f"tool_call_id={m.tool_call_id}"))
            continue
        if open_ids:
            _close(out, actions, opener, open_ids)
        opener, open_ids = item, [c.id for c in m.tool_calls] if m.tool_calls else []
        add(item)
    _close(out, actions, opener, open_ids)
    paired = view if not actions else view[:start] + tuple(out)
    ctx.paired_view = paired
    n = len(paired)
    return paired, StepReport("normalize_pairing", n, n, tuple(actions))


def _close(out: list[Item], actions: list[Action], opener: Item | None, open_ids: list[str]) -> None:
    for cid in open_ids:
        note = marker("no_result", "no result was recorded for this call")
        out.append(Item(opener.index if opener else -1,
                        Message(role="tool", content=note, tool_call_id=cid), kind=Kind.SYNTHETIC))
        actions.append(Action(opener.index if opener else -1, "missing_result_stood_in", f"tool_call_id={cid}"))
    open_ids.clear()


def _orphan(item: Item) -> Item:
    m = item.message
    note = marker("orphan_result", f"tool_call_id={m.tool_call_id}", "no matching call")
    return with_message(item, Message(role="user", content=f"{note}\n{m.content}"), Kind.ORPHAN)


def stand_in_json(view: View, ctx: Context) -> tuple[View, StepReport]:
    """Only the build's new items are looked at: an earlier build's items went through this step
    then, and no later step makes an item raw again with calls to fix. A view with nothing to fix
    (most builds) comes back as the same tuple, not a copy, so that the engine finds the prompt
    ``normalize_pairing`` left by identity (``Engine._well_paired``)."""
    start = len(view)
    while start > 0 and (view[start - 1].index >= ctx.fresh or view[start - 1].kind is Kind.SYNTHETIC):
        start -= 1
    out: list[Item] = []
    actions: list[Action] = []
    for item in view[start:]:
        if item.kind is not Kind.RAW or not item.message.tool_calls:
            out.append(item)
            continue
        calls, kind = _fixed_calls(item, ctx, actions)
        out.append(item if kind is Kind.RAW else with_message(item, replace(item.message, tool_calls=calls), kind))
    if not actions:  # (an item is replaced only where one of its calls was fixed, with an action)
        return view, StepReport("stand_in_json", 0, 0)
    return view[:start] + tuple(out), StepReport("stand_in_json", 0, 0, tuple(actions))


def _fixed_calls(item: Item, ctx: Context, actions: list[Action]) -> tuple[tuple[ToolCall, ...], Kind]:
    calls: list[ToolCall] = []
    kind = Kind.RAW
    for call, facts in zip(item.message.tool_calls, ctx.facts[item.index].calls, strict=True):
        v = facts.verdict
        if v.status is ArgStatus.VALID:
            calls.append(call)
            continue
        if v.status is ArgStatus.REPAIRED:
            text, handle = dumps(v.value), handle_for(call.arguments)
            kind = Kind.REPAIRED if kind is Kind.RAW else kind
            actions.append(Action(item.index, "arguments_repaired", f"{call.name}: {v.repair}", handle))
        else:
            text, handle = stand_in(call.arguments, v)
            kind = Kind.STAND_IN
            actions.append(Action(item.index, f"arguments_{v.status.value.lower()}",
                                  f"{call.name}: {v.detail}", handle))
        ctx.payloads[handle] = call.arguments
        calls.append(replace(call, arguments=text))
    return tuple(calls), kind
