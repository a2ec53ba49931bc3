"""Supersede stale file snapshots.

A READ result for a path is stale once a later call reads that path again (successfully), or
writes or edits it, or once the caller declared it stale (edits planned against it: the session's
``superseded`` paths, with the history length at the time). The stale result becomes a stub that
names the path, its size, the history index of the newer call, and the handle of the elided text.
"""

from __future__ import annotations

from dataclasses import replace

from budgeter.core.classify import FileOp, ResultStatus
from budgeter.core.markers import fmt_chars, handle_for, marker
from budgeter.core.pipeline import Action, Context, StepReport, View, units, with_message


def _file_events(view: View, ctx: Context) -> list[tuple[int, FileOp, str, str, int]]:
    """(result position, op, path, tool name, history index of the call), in view order."""
    events = []
    for unit in units(view):
        head = view[unit[0]]
        if not head.message.tool_calls or head.kind in ("digest", "orphan"):
            continue
        results = {view[p].message.tool_call_id: p for p in unit[1:]}
        for call, facts in zip(head.message.tool_calls, ctx.facts[head.index].calls, strict=False):
            pos = results.get(call.id)
            if facts.op is FileOp.NONE or not facts.path or pos is None:
                continue
            if view[pos].kind == "synthetic":
                continue
            ok = ctx.facts[view[pos].index].result is ResultStatus.OK
            if ok or facts.op is not FileOp.READ:
                events.append((pos, FileOp(facts.op), facts.path, facts.name, head.index))
    return events


def supersede_snapshots(view: View, ctx: Context) -> tuple[View, StepReport]:
    events = _file_events(view, ctx)
    newer: dict[str, int] = {}
    stale: dict[int, tuple[str, str, int]] = {}
    for pos, op, path, name, index in reversed(events):
        declared = ctx.superseded.get(path, -1)
        if op is FileOp.READ and view[pos].kind == "raw":
            if path in newer:
                stale[pos] = (path, name, newer[path])
            elif index < declared:
                stale[pos] = (path, name, declared)
        newer[path] = index
    if not stale:
        return view, StepReport("supersede_snapshots", 0, 0)
    before = ctx.estimate(view)
    items = list(view)
    actions = []
    for pos, (path, name, by) in stale.items():
        text = items[pos].message.content
        handle = handle_for(text)
        ctx.payloads[handle] = text
        note = marker("stale", name, path, fmt_chars(len(text)), f"superseded by #{by}", f"h={handle}")
        items[pos] = with_message(items[pos], replace(items[pos].message, content=note), "stale")
        actions.append(Action(items[pos].index, "snapshot_superseded", f"{path} by #{by}", handle))
    out = tuple(items)
    return out, StepReport("supersede_snapshots", before, ctx.estimate(out), tuple(actions))
