"""Shrink old bulky tool results and argument string leaves, oldest first, outside the
protected tail, until the planning estimate reaches the target.

Results keep a head and a tail around a marker. Argument leaves are shrunk inside the parsed JSON
(``jsonargs.shrink_leaves``), so the arguments stay valid JSON. Nothing grows.
"""

from __future__ import annotations

from dataclasses import replace

from budgeter.core.jsonargs import Elider, dumps, shrink_leaves
from budgeter.core.markers import contains_marker
from budgeter.core.pipeline import (
    Action,
    Context,
    Item,
    StepReport,
    View,
    protected_positions,
    with_message,
)
from budgeter.core.sniff import sniff


def shrink_bulky(view: View, ctx: Context) -> tuple[View, StepReport]:
    before = est = ctx.estimate(view)
    if est <= ctx.target:
        return view, StepReport("shrink_bulky", before, before)
    keep = protected_positions(view, ctx.policy)
    items = list(view)
    actions = []
    for pos, item in enumerate(view):
        if est <= ctx.target:
            break
        if pos in keep or item.kind not in ("raw", "repaired"):
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
        return with_message(item, replace(m, content=content), "shrunk")
    if not m.tool_calls:
        return item
    calls = []
    for call, facts in zip(m.tool_calls, ctx.facts[item.index].calls, strict=False):
        value = facts.verdict.value
        if value is None or len(call.arguments) <= p.shrink_min_chars:
            calls.append(call)
            continue
        elide = Elider(ctx.payloads)
        text = dumps(shrink_leaves(value, limit=p.shrink_min_chars, keep=p.shrink_keep_chars, elide=elide))
        calls.append(replace(call, arguments=text) if len(text) < len(call.arguments) else call)
    if calls == list(m.tool_calls):
        return item
    return with_message(item, replace(m, tool_calls=tuple(calls)), "shrunk")
