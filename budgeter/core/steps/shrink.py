"""Repeated outputs, then old bulky output: only as much as the low-water mark needs.

``fold_repeated_outputs``: a tool result whose text a later result repeats byte for byte becomes
a stub pointing at the later one. ``shrink_bulky``: old bulky tool results and argument string
leaves shrink, oldest first, outside the protected tail, until the planning estimate reaches the
target; the newest snapshot of each file shrinks only when nothing else is left.

Results keep a head and a tail around a marker. Argument leaves are shrunk inside the parsed JSON
(``jsonargs.shrink_leaves``), so the arguments stay valid JSON. Nothing grows.
"""

from __future__ import annotations

from dataclasses import replace

from budgeter.core.jsonargs import Elider, dumps, shrink_leaves
from budgeter.core.markers import contains_marker, fmt_chars, handle_for, marker
from budgeter.core.pipeline import (
    Action,
    Context,
    Item,
    Kind,
    StepReport,
    View,
    with_message,
)
from budgeter.core.sniff import sniff
from budgeter.core.steps.snapshots import newest_snapshots

REPEAT_MIN_CHARS = 400


def fold_repeated_outputs(view: View, ctx: Context) -> tuple[View, StepReport]:
    before = est = ctx.estimate(view)
    if est <= ctx.target:
        return view, StepReport("fold_repeated_outputs", before, before)
    keep = ctx.protected(view)
    later: dict[str, int] = {}
    items = list(view)
    actions = []
    for pos in range(len(view) - 1, -1, -1):
        item = view[pos]
        m = item.message
        if m.role != "tool" or item.kind is not Kind.RAW or len(m.content) < REPEAT_MIN_CHARS:
            continue
        if m.content in later and pos not in keep:
            handle = handle_for(m.content)
            ctx.payloads[handle] = m.content
            note = marker("repeated", fmt_chars(len(m.content)), f"same output as #{later[m.content]}",
                          f"h={handle}")
            items[pos] = with_message(item, replace(m, content=note), Kind.REPEATED)
            saved = ctx.cost(m) - ctx.cost(items[pos].message)
            est -= saved
            actions.append(Action(item.index, "repeated_output_folded", f"as #{later[m.content]}", handle, saved))
        later.setdefault(m.content, item.index)
    out = tuple(items)
    return out, StepReport("fold_repeated_outputs", before, ctx.estimate(out), tuple(actions))


def shrink_bulky(view: View, ctx: Context) -> tuple[View, StepReport]:
    before = est = ctx.estimate(view)
    if est <= ctx.target:
        return view, StepReport("shrink_bulky", before, before)
    keep = ctx.protected(view)
    newest = newest_snapshots(view, ctx)
    items = list(view)
    actions = []
    order = [p for p in range(len(view)) if p not in newest] + sorted(newest)
    for pos in order:
        item = view[pos]
        if est <= ctx.target:
            break
        if pos in keep or item.kind not in (Kind.RAW, Kind.REPAIRED):
            continue
        new = _shrunk(item, ctx)
        if new is not item:
            saved = ctx.cost(item.message) - ctx.cost(new.message)
            est -= saved
            items[pos] = new
            actions.append(Action(item.index, "shrunk", item.message.role, tokens_saved=saved))
    out = tuple(items)
    return out, StepReport("shrink_bulky", before, ctx.estimate(out), tuple(actions))


def _shrunk(item: Item, ctx: Context) -> Item:
    m, p = item.message, ctx.policy
    if m.role == "tool" and len(m.content) > p.shrink_min_chars and not contains_marker(m.content):
        content = Elider(ctx.payloads, sniff(m.content))(m.content, p.shrink_keep_chars)
        return with_message(item, replace(m, content=content), Kind.SHRUNK)
    if not m.tool_calls:
        return item
    calls = []
    for call, facts in zip(m.tool_calls, ctx.facts[item.index].calls, strict=False):
        value = facts.value
        if value is None or len(call.arguments) <= p.shrink_min_chars:
            calls.append(call)
            continue
        elide = Elider(ctx.payloads)
        text = dumps(shrink_leaves(value, limit=p.shrink_min_chars, keep=p.shrink_keep_chars, elide=elide))
        calls.append(replace(call, arguments=text) if len(text) < len(call.arguments) else call)
    if calls == list(m.tool_calls):
        return item
    return with_message(item, replace(m, tool_calls=tuple(calls)), Kind.SHRUNK)
