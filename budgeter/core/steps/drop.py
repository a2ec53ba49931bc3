"""Drop the oldest turns until the prompt fits, leaving one deterministic digest.

A turn (an assistant message with all its tool results, or a single message) goes as one unit.
System messages, the first user message, digests and the protected tail are always kept. Tool
turns go first, then turns holding the newest snapshot of a file, then user messages (small, and
they carry intent). The digest is a user
message at the place of the first dropped turn: counts, tools with outcomes, and the handle of
the dropped messages (a JSON list, byte for byte). A later round merges into the same digest;
its payload is kept as a link to the digest before it (``budgeter.core.chains``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from budgeter.core.chains import MARK_EVERY, Digested, Link, ListHash
from budgeter.core.incremental import common_length
from budgeter.core.jsonargs import Elider, dumps, loads_object, shrink_leaves
from budgeter.core.markers import handles_in, marker
from budgeter.core.memo import CharMemo
from budgeter.core.messages import INSTRUCTIONS, Message, stored_json
from budgeter.core.pipeline import (
    Action,
    Context,
    Item,
    Kind,
    StepReport,
    View,
)
from budgeter.core.steps.snapshots import newest_snapshots
from budgeter.errors import PinnedOverBudget


def droppable_units(view: View, ctx: Context) -> list[list[int]]:
    keep = ctx.protected(view)
    newest = newest_snapshots(view, ctx)
    free = [u for u in ctx.turns(view) if not keep.intersection(u)]

    def rank(unit: list[int]) -> int:
        return 2 if view[unit[0]].message.role == "user" else 1 if newest.intersection(unit) else 0

    return sorted(free, key=rank)  # stable: oldest first within a rank


def drop_oldest(view: View, ctx: Context) -> tuple[View, StepReport]:
    return drop_until(view, ctx, ctx.target)


def drop_until(view: View, ctx: Context, target: int) -> tuple[View, StepReport]:
    before = est = ctx.estimate(view)
    gone: set[int] = set()
    for unit in droppable_units(view, ctx) if est > target else ():
        if est <= target:
            break
        gone.update(unit)
        est -= sum(ctx.cost(view[p].message) for p in unit)
    if not gone:
        return view, StepReport("drop_oldest", before, before)
    out = _with_digest(view, gone, ctx)
    digest = next(i for i in out if i.kind is Kind.DIGEST)
    handle = _own_handle(digest)  # (made once: the payload grows with history)
    action = Action(min(view[p].index for p in gone), "turns_dropped", f"{len(gone)} messages", handle)
    return out, StepReport("drop_oldest", before, ctx.estimate(out), (action,))


def _with_digest(view: View, gone: set[int], ctx: Context) -> View:
    old = [p for p, i in enumerate(view) if i.kind is Kind.DIGEST]
    dropped = sorted({c for p in gone for c in (view[p].covers or (view[p].index,))
                      if view[p].kind is not Kind.SYNTHETIC})
    held = view[old[0]].covers if len(old) == 1 else ()
    if len(old) <= 1 and (not held or not dropped or dropped[0] > held[-1]):
        covers = [*held, *dropped]  # (the usual drop: turns newer than all the digest holds)
    else:
        covers = sorted({i for p in old for i in view[p].covers} | set(dropped))
    at = min([*gone, *old])
    base = max(old, key=lambda p: len(view[p].covers), default=None)  # the digest this one extends
    digest = Item(covers[0] if covers else view[at].index,
                  _digest_message(covers, ctx, base=view[base] if base is not None else None),
                  kind=Kind.DIGEST, covers=tuple(covers))
    out = [i for p, i in enumerate(view) if p not in gone and p not in old]
    kept_before = sum(1 for p in range(at) if p not in gone and p not in old)
    out.insert(kept_before, digest)
    return tuple(out)


def _own_handle(digest: Item) -> str:
    """A digest's handle: the last in its marker."""
    return handles_in(digest.message.content)[-1]


_json: CharMemo[Message, str] = CharMemo()


def _as_json(m: Message) -> str:
    """A history message as a digest's payload holds it. Memoized: each compaction's digest covers
    every message dropped so far, most of them the previous digest's (``bench_instructions``, 1M)."""
    text = _json.get(m)
    return text if text is not None else _json.put(m, stored_json(m), m.size)


def _digest_message(covers: list[int], ctx: Context, *, base: Item | None = None) -> Message:
    """``base``: the digest this one extends; the new payload is a link to its payload, holding
    only the messages it lacks."""
    held = base.covers if base is not None else ()
    prior = ctx.digest
    if base is None or prior is None or prior.handle != _own_handle(base) or prior.covers != held:
        prior = None
    before = set(held)
    new = [i for i in covers if i not in before]
    items = [_as_json(ctx.history[i]) for i in new]
    covered = tuple(covers)
    same = common_length(held, covered) if prior is not None else 0  # (tuples: compared in C)
    marks = list(prior.marks[:same // MARK_EVERY + 1]) if prior is not None else [ListHash()]
    hashed = marks[-1]
    for start in range((len(marks) - 1) * MARK_EVERY, len(covers), MARK_EVERY):
        hashed = hashed.extended(_as_json(ctx.history[i]) for i in covers[start:start + MARK_EVERY])
        if hashed.count % MARK_EVERY == 0:
            marks.append(hashed)
    handle = hashed.handle()
    ctx.links[handle] = Link(_own_handle(base) if base is not None else "", tuple(zip(new, items, strict=True)))
    changed = ctx.log.changed_failures
    if prior is not None and not any(ref[0] in before for ref in changed[prior.failures_seen:]):
        outcomes, users, tally = prior.outcomes.copy(), prior.users, new
    else:
        outcomes, users, tally = Counter(), 0, covers
    for i in tally:
        for no, call in enumerate(ctx.facts[i].calls):
            outcomes[f"{call.name} {'failed' if ctx.log.failed((i, no)) else 'ok'}"] += 1
        users += ctx.history[i].role == "user"
    ctx.digest = Digested(handle, covered, tuple(marks), outcomes, users, len(changed))
    tools = ", ".join(f"{k} x{n}" for k, n in sorted(outcomes.items())[:8])
    text = marker("digest", f"{len(covers)} earlier messages dropped",
                  f"({users} from the user)" if users else "",
                  f"calls: {tools}" if tools else "", f"h={handle}")
    return Message(role="user", content=text)


def _shrinkable(m: Message) -> bool:
    return len(m.content) > 200 or any(len(c.arguments) > 200 for c in m.tool_calls)


def cut_oversize(view: View, ctx: Context, overshoot: int) -> tuple[View, StepReport]:
    """Last resort: keep the head and tail of the largest message that can still shrink (never a
    system message). Returns the view unchanged when nothing can shrink."""
    candidates = [(ctx.cost(i.message), p) for p, i in enumerate(view)
                  if i.message.role not in INSTRUCTIONS and i.kind is not Kind.DIGEST and _shrinkable(i.message)]
    if not candidates:
        return view, StepReport("cut_oversize", 0, 0)
    cost, pos = max(candidates)
    item = view[pos]
    m = item.message
    elide = Elider(ctx.payloads, "oversize")
    share = max(0.0, (cost - overshoot - 16) / max(cost, 1))
    if len(m.content) > 200:
        keep = min(int(len(m.content) * share), len(m.content) - 300)  # marker costs ~70 chars
        new = replace(m, content=elide(m.content, max(0, keep)))
    else:
        calls = []
        for c in m.tool_calls:
            value = loads_object(c.arguments)
            keep = max(60, min(int(len(c.arguments) * share), len(c.arguments) - 300))
            if value is None or len(c.arguments) <= 200:
                calls.append(c)
                continue
            shrunk = dumps(shrink_leaves(value, limit=keep, keep=keep, elide=elide))
            calls.append(replace(c, arguments=shrunk) if len(shrunk) < len(c.arguments) else c)
        new = replace(m, tool_calls=tuple(calls))
    if new == m:
        return view, StepReport("cut_oversize", 0, 0)
    out = (*view[:pos], replace(item, message=new, kind=Kind.SHRUNK), *view[pos + 1:])
    action = Action(item.index, "oversize_cut", f"{m.role} kept head and tail",
                    tokens_saved=cost - ctx.cost(new))
    return out, StepReport("cut_oversize", 0, 0, (action,))



def fit_exact(view: View, ctx: Context) -> tuple[View, StepReport]:
    """The last step: drop turns, then cut the largest message, until the exact count of the
    whole render fits the budget. Raises ``PinnedOverBudget`` naming what is too big when what
    must be kept does not fit."""
    before = total = ctx.exact(view)
    actions: list[Action] = []
    for _ in range(64):
        if total <= ctx.budget:
            break
        smaller, report = drop_until(view, ctx, ctx.estimate(view) - (total - ctx.budget) - 1)
        if smaller == view:
            _check_pinned(view, ctx, total)
            smaller, report = cut_oversize(view, ctx, total - ctx.budget)
            if smaller == view:
                break  # nothing left that can shrink
        view = smaller
        actions += report.actions
        total = ctx.exact(view)
    if total > ctx.budget:
        _check_pinned(view, ctx, total, force=True)
    return view, StepReport("fit_exact", before, total, tuple(actions))


def _check_pinned(view: View, ctx: Context, total: int, *, force: bool = False) -> None:
    system = [i for i in view if i.message.role in INSTRUCTIONS]
    pinned = ctx.counter.count_prompt([i.message for i in system], ctx.tools) if system else 0
    if pinned <= ctx.budget and not force:
        return
    names = [f"system message #{i.index} ({ctx.cost(i.message)} tokens)" for i in system]
    if force and pinned <= ctx.budget:
        names += [f"{i.message.role} message #{i.index} ({ctx.cost(i.message)} tokens)"
                  for i in view if i.message.role not in INSTRUCTIONS][:6]
    what = f"what must be kept needs {total}" if force else f"pinned content alone needs {pinned}"
    if ctx.tools:
        names.append(f"{len(ctx.tools)} tool schemas")
    raise PinnedOverBudget(
        f"{what} tokens; budget is {ctx.budget}: " + (", ".join(names) or "nothing pinned"),
        metadata={"pinned_tokens": pinned, "budget": ctx.budget, "prompt_tokens": total},
    )
