"""File snapshots: supersede stale ones; know the newest one of each file.

A READ result for a path is stale once a later call reads that path again (successfully), or
writes or edits it, or once the caller declared it stale (edits planned against it: the session's
``superseded`` paths, with the history length at the time). The stale result becomes a stub that
names the path, its size, the history index of the newer call, and the handle of the elided text,
unless the stub would not be shorter than the result.
"""

from __future__ import annotations

from dataclasses import replace

from budgeter.core.classify import FileOp, ResultStatus
from budgeter.core.markers import fmt_chars, handle_for, marker
from budgeter.core.pipeline import Action, Context, Kind, StepReport, View, with_message


def file_events(view: View, ctx: Context) -> list[tuple[int, FileOp, str, str, int]]:
    """(result position, op, path, tool name, history index of the call), in view order, for
    file calls whose result is in the view (failed reads left out). Shared (``Context.derived``)."""
    return ctx.derived("file_events", view, lambda v: _file_events(v, ctx))


def _file_events(view: View, ctx: Context) -> list[tuple[int, FileOp, str, str, int]]:
    log = ctx.log
    pos_of = {item.index: p for p, item in enumerate(view)
              if item.message.role == "tool" and item.kind not in (Kind.SYNTHETIC, Kind.DIGEST, Kind.ORPHAN)}
    events = []
    for item in view:
        if not item.message.tool_calls or item.kind in (Kind.DIGEST, Kind.ORPHAN):
            continue
        for call in item.message.tool_calls:
            ref = log.call_at.get(call.id)
            at = log.result_of(call.id)
            if ref is None or ref[0] != item.index or at is None or at not in pos_of:
                continue
            cf = log.call(ref)
            if cf.op is FileOp.NONE or not cf.path:
                continue
            if log.facts[at].result is ResultStatus.OK or cf.op is not FileOp.READ:
                events.append((pos_of[at], FileOp(cf.op), cf.path, cf.name, item.index))
    return events


def newest_snapshots(view: View, ctx: Context) -> set[int]:
    """Positions of the newest READ result of each file (the copy being worked on). Shared."""
    return ctx.derived("newest", view, lambda v: _newest(v, ctx))


def _newest(view: View, ctx: Context) -> set[int]:
    newest: dict[str, int] = {}
    for pos, op, path, _, _ in file_events(view, ctx):
        if op is FileOp.READ:
            newest[path] = pos
        else:
            newest.pop(path, None)
    return set(newest.values())


def supersede_snapshots(view: View, ctx: Context) -> tuple[View, StepReport]:
    newer: dict[str, int] = {}
    stale: dict[int, tuple[str, str, int]] = {}
    for pos, op, path, name, index in reversed(file_events(view, ctx)):
        declared = ctx.superseded.get(path, -1)
        if op is FileOp.READ and view[pos].kind is Kind.RAW:
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
    for pos, (path, name, by) in sorted(stale.items()):
        text = items[pos].message.content
        handle = handle_for(text)
        note = marker("stale", name, path, fmt_chars(len(text)), f"superseded by #{by}", f"h={handle}")
        if len(note) >= len(text):
            continue  # a stub never replaces a text that is not longer than it
        ctx.payloads[handle] = text
        items[pos] = with_message(items[pos], replace(items[pos].message, content=note), Kind.STALE)
        actions.append(Action(items[pos].index, "snapshot_superseded", f"{path} by #{by}", handle))
    out = tuple(items)
    return out, StepReport("supersede_snapshots", before, ctx.estimate(out), tuple(actions))
