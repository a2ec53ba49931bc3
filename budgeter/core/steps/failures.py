"""Collapse failed calls and their retries.

A call failed when its result is ERROR or its arguments are TRUNCATED/INVALID. Identical retries
(same tool, same original argument text) fold into the last occurrence, which says how many
times. A failed call's long argument leaves become markers, and its result a short stub with the
tool, the failure, the size elided, the content kind, a suggested path where the path was
missing, and the handle. The latest failure of the view keeps its error text verbatim (policy
``keep_latest_failure``). Calls still waiting for a result are never touched.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from budgeter.core.classify import FileOp, ResultStatus
from budgeter.core.facts import CallFacts
from budgeter.core.jsonargs import ArgStatus, dumps
from budgeter.core.markers import contains_marker, fmt_chars, handle_for, marker
from budgeter.core.pipeline import Action, Context, Item, StepReport, View, units, with_message
from budgeter.core.sniff import sniff, suggest_path

STUB_LEAF_CHARS = 120


@dataclass(frozen=True, slots=True)
class Failure:
    call_pos: int
    call_no: int
    result_pos: int
    facts: CallFacts
    key: tuple[str, str]


def find_failures(view: View, ctx: Context) -> list[Failure]:
    out = []
    for unit in units(view):
        head = view[unit[0]]
        if not head.message.tool_calls or head.kind in ("digest", "orphan"):
            continue
        results = {view[p].message.tool_call_id: p for p in unit[1:]}
        original = ctx.history[head.index].tool_calls
        for no, call in enumerate(head.message.tool_calls):
            pos = results.get(call.id)
            if pos is None or view[pos].kind in ("synthetic", "stub"):
                continue
            facts = ctx.facts[head.index].calls[no]
            bad_args = facts.verdict.status in (ArgStatus.TRUNCATED, ArgStatus.INVALID)
            if bad_args or ctx.facts[view[pos].index].result is ResultStatus.ERROR:
                out.append(Failure(unit[0], no, pos, facts, (call.name, original[no].arguments)))
    return out


def collapse_failures(view: View, ctx: Context) -> tuple[View, StepReport]:
    failures = find_failures(view, ctx)
    if not failures:
        return view, StepReport("collapse_failures", 0, 0)
    before = ctx.estimate(view)
    groups: dict[tuple[str, str], list[Failure]] = {}
    for f in failures:
        groups.setdefault(f.key, []).append(f)
    latest = failures[-1].result_pos if ctx.policy.keep_latest_failure else -1
    items = list(view)
    drop: set[int] = set()
    removed_calls: dict[int, set[int]] = {}
    actions: list[Action] = []
    for group in groups.values():
        keep = group[-1]
        folded = tuple(i for f in group for i in (view[f.result_pos].covers or (view[f.result_pos].index,)))
        for f in group[:-1]:
            drop.add(f.result_pos)
            removed_calls.setdefault(f.call_pos, set()).add(f.call_no)
        items[keep.call_pos] = _stub_call(items[keep.call_pos], keep, ctx)
        verbatim = keep.result_pos == latest
        items[keep.result_pos] = _stub_result(items[keep.result_pos], keep, folded, ctx,
                                              verbatim=verbatim, call_index=view[keep.call_pos].index)
        actions.append(Action(view[keep.call_pos].index, "failed_call_collapsed",
                              f"{keep.facts.name} x{len(folded)}" + (" (error kept)" if verbatim else ""),
                              handle_for(ctx.history[view[keep.call_pos].index].tool_calls[keep.call_no].arguments)))
    for pos, nos in removed_calls.items():
        m = items[pos].message
        calls = tuple(c for i, c in enumerate(m.tool_calls) if i not in nos)
        if not calls and not m.content.strip():
            drop.add(pos)
        else:
            items[pos] = replace(items[pos], message=replace(m, tool_calls=calls))
    out = tuple(it for p, it in enumerate(items) if p not in drop)
    return out, StepReport("collapse_failures", before, ctx.estimate(out), tuple(actions))


def _stub_call(item: Item, f: Failure, ctx: Context) -> Item:
    m = item.message
    call = m.tool_calls[f.call_no]
    if contains_marker(call.arguments) and f.facts.verdict.status is ArgStatus.VALID:
        return item  # already collapsed in an earlier round
    original = ctx.history[item.index].tool_calls[f.call_no].arguments
    ctx.payloads[handle_for(original)] = original
    value: Any = f.facts.verdict.value
    if value is None:
        return item  # stand-in already holds only the complete fields and a marker
    stubbed = _stub_leaves(value, ctx)
    calls = list(m.tool_calls)
    calls[f.call_no] = replace(call, arguments=dumps(stubbed))
    return with_message(item, replace(m, tool_calls=tuple(calls)), "stub")


def _stub_leaves(value: Any, ctx: Context) -> Any:
    if isinstance(value, dict):
        return {k: _stub_leaves(v, ctx) for k, v in value.items()}
    if isinstance(value, list):
        return [_stub_leaves(v, ctx) for v in value]
    if isinstance(value, str) and len(value) > STUB_LEAF_CHARS:
        handle = handle_for(value)
        ctx.payloads[handle] = value
        return marker("elided", fmt_chars(len(value)), sniff(value), f"h={handle}")
    return value


def _largest_leaf(value: Any) -> str:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return max((_largest_leaf(v) for v in value), key=len, default="")
    return value if isinstance(value, str) else ""


def _stub_result(item: Item, f: Failure, folded: tuple[int, ...], ctx: Context, *, verbatim: bool,
                 call_index: int) -> Item:
    m = item.message
    text = ctx.history[item.index].content if item.kind in ("raw", "shrunk") else m.content
    handle = handle_for(text)
    ctx.payloads[handle] = text
    original_args = ctx.history[call_index].tool_calls[f.call_no].arguments
    payload = _largest_leaf(f.facts.verdict.value) if f.facts.verdict.value else _cut_leaf(original_args)
    times = f"x{len(folded)}" if len(folded) > 1 else ""
    parts = [f.facts.name, times, "failed:" if verbatim else _first_line(text, ctx),
             f"{fmt_chars(len(payload))} {sniff(payload)} elided" if len(payload) > STUB_LEAF_CHARS else ""]
    if f.facts.op is FileOp.WRITE and not f.facts.path and payload:
        parts.append("suggested_path=" + suggest_path(payload, html_pages_seen=_html_seen(ctx, item.index)).path)
    note = marker("failed", *parts, f"h={handle}")
    content = f"{note}\n{text}" if verbatim else note
    return replace(with_message(item, replace(m, content=content), "stub"), covers=folded)


def _cut_leaf(text: str) -> str:
    """The string a cut argument text was in the middle of (escapes left as they are)."""
    at = max(text.rfind('":"'), text.rfind('": "'))
    return text[text.index('"', at + 2) + 1:] if at >= 0 else text


def _first_line(text: str, ctx: Context) -> str:
    line = " ".join(text.split())[: ctx.policy.stub_keep_error_chars // 2]
    return f'"{line}"' if line else ""


def _html_seen(ctx: Context, before: int) -> int:
    seen = 0
    for idx in range(min(before, len(ctx.history))):
        for c in ctx.facts[idx].calls:
            if c.op is FileOp.WRITE and c.path.endswith((".html", ".htm")):
                seen += 1
    return seen

