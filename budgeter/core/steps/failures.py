"""Window hygiene for failed calls, on every build (not only over budget).

A call failed on the evidence ``History.failed_by`` records for it (declared, verdict, retried,
same error, text; see ``facts``), and every stub names that evidence (``why=``). Each failed call's
form in the prompt is a pure function of the history, so a collapsed message renders the same on
every later turn and a session built turn by turn folds exactly as one built at once:

- identical retries (same tool and canonical arguments, no successful call between them) fold into
  the newest one present as soon as the second exists; its stub says ``xN`` over the whole run;
- the newest failure stays verbatim until the model has answered it (an assistant message follows
  its result), so the model can correct itself (policy ``keep_latest_failure``);
- an answered failure's long argument leaves become markers (each with its own handle) and its
  result a one-line stub: tool, count, first line of the error, what was elided, a suggested path
  where the path was missing, the handle of the original arguments and, when the error text was
  cut, the handle of that text;
- once a later call succeeded with the same payload, the stub is one line pointing at it.

A call run again at once with the same arguments and answered with the same output, not taken as
failed, is superseded: its output becomes a one-line ``repeated`` note with its handle.

A call that only its result's text shows failed (evidence ``text``) is not stubbed as failed: its
long argument leaves become markers once the model has answered it, and its output stays.

A stub never replaces a text that is not longer than it. Calls still waiting for a result are
never touched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Set
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from budgeter.core.classify import Evidence, FileOp
from budgeter.core.facts import CallFacts, CallRef, History
from budgeter.core.jsonargs import Elider, dumps
from budgeter.core.markers import contains_marker, fmt_chars, handle_for, marker
from budgeter.core.pipeline import Action, Context, Item, Kind, StepReport, View
from budgeter.core.sniff import sniff, suggest_path

STUB_LEAF_CHARS = 120
FAILED_STUB = marker("failed")[:-1]
REPEATED_STUB = marker("repeated")[:-1]


@dataclass(frozen=True, slots=True)
class Failure:
    ref: CallRef
    call_pos: int
    result_pos: int
    facts: CallFacts


def failures_in(view: View, log: History, only: Set[CallRef] | None = None) -> list[Failure]:
    """Failed calls of the view that have their real result in the call's turn, in view order;
    ``only``: of these calls alone.

    Found from the history's failed calls (``log.owned_failures``, ``log.repeated``), not by walking the view's
    turns: a long session's view holds hundreds of messages and a few failures, and this runs on
    every build."""
    if only is None:
        refs: Iterable[CallRef] = [*log.owned_failures, *log.repeated]  # a call is in one of the two
    else:  # the few asked for, not every failure of the history (``bench_flat``'s growth)
        refs = [ref for ref in only if ref in log.owned_failures or ref in log.repeated]
    failed = [(ref, log.call(ref)) for ref in refs]
    if not failed:
        return []
    position: Callable[[int], int | None] = partial(_position, view)  # a few calls: binary search
    if only is None:
        position = {item.index: p for p, item in enumerate(view) if item.kind is not Kind.SYNTHETIC}.get
    found: list[tuple[int, int, Failure]] = []
    for ref, cf in failed:
        call_pos = position(ref[0])
        if call_pos is None:
            continue
        head = view[call_pos]
        if head.kind is Kind.DIGEST or head.kind is Kind.ORPHAN:
            continue
        calls = head.message.tool_calls
        order = next((k for k, c in enumerate(calls) if c.id == cf.id), None)
        if order is None:  # folded into a later retry: its call left the message
            continue
        result_pos = _result_in_turn(view, call_pos, cf.id, {c.id for c in calls})
        if result_pos is not None:
            found.append((call_pos, order, Failure(ref, call_pos, result_pos, cf)))
    found.sort(key=lambda x: (x[0], x[1]))
    return [f for _, _, f in found]


def _position(view: View, index: int) -> int | None:
    """The position of the item that stands for history message ``index`` (not a stand-in result),
    by binary search: items keep history order, except the stand-in results that follow a turn
    (they carry their call's index), which are searched as the item before them."""
    lo, hi = 0, len(view)
    while lo < hi:
        mid = (lo + hi) // 2
        k = mid
        while k > 0 and view[k].kind is Kind.SYNTHETIC:
            k -= 1
        if view[k].index < index:
            lo = mid + 1
        else:
            hi = mid
    if lo < len(view) and view[lo].index == index and view[lo].kind is not Kind.SYNTHETIC:
        return lo
    return None


def _result_in_turn(view: View, call_pos: int, call_id: str, open_ids: set[str]) -> int | None:
    """The position of ``call_id``'s result among the tool results that follow its call (the
    call's turn, as ``units`` groups it); None when it is not there (or only stood in for)."""
    pos = None
    for p in range(call_pos + 1, len(view)):
        m = view[p].message
        if m.role != "tool" or m.tool_call_id not in open_ids:
            break
        if m.tool_call_id == call_id and view[p].kind is not Kind.SYNTHETIC:
            pos = p
    return pos


def tidy_failures(view: View, ctx: Context) -> tuple[View, StepReport]:
    return _tidy(view, ctx, pressed=False)


def collapse_pending_failures(view: View, ctx: Context) -> tuple[View, StepReport]:
    """Over budget, the cheapest loss: a failure not answered yet keeps its error text verbatim
    but its long arguments become markers too. Pressure changes only those failures (an answered
    one has the form ``tidy_failures`` gave it in this build), so only they are looked at."""
    pending = ctx.log.unanswered if ctx.policy.keep_latest_failure else frozenset()
    return _tidy(view, ctx, pressed=True, only=pending)


def _tidy(view: View, ctx: Context, *, pressed: bool, only: Set[CallRef] | None = None) -> tuple[View, StepReport]:
    """``ctx.dirty`` (not under pressure): only those failed calls can need another form; the
    others stand in the view as the previous build's tidy left them. ``only`` (under pressure):
    the failed calls pressure can change."""
    log = ctx.log
    name = "collapse_pending_failures" if pressed else "tidy_failures"
    found = failures_in(view, log, only if pressed else ctx.dirty)
    if not found:
        return view, StepReport(name, 0, 0)
    newest: dict[CallRef, Failure] = {}
    for f in found:
        newest[_run(f, log)[0]] = f
    items = list(view)
    drop: set[int] = set()
    removed: dict[int, set[str]] = {}
    actions: list[Action] = []
    touched = False
    for f in found:
        if newest[_run(f, log)[0]] is not f:  # folded into a later identical retry
            drop.add(f.result_pos)
            removed.setdefault(f.call_pos, set()).add(f.facts.id)
            continue
        call_item, result_item = items[f.call_pos], items[f.result_pos]
        items[f.call_pos], items[f.result_pos], action = _collapse_memo(call_item, result_item, f, ctx, pressed=pressed)
        if action is not None:
            actions.append(action)
        touched = touched or items[f.call_pos] is not call_item or items[f.result_pos] is not result_item
    for pos, ids in removed.items():
        m = items[pos].message
        calls = tuple(c for c in m.tool_calls if c.id not in ids)
        if not calls and not m.content.strip():
            drop.add(pos)
        else:
            items[pos] = replace(items[pos], message=replace(m, tool_calls=calls), kind=Kind.STUB)
    if not (touched or drop):  # every item as it was: the view itself, which the engine then finds
        return view, StepReport(name, 0, 0)  # by identity (``Engine._well_paired``)
    out = tuple(it for p, it in enumerate(items) if p not in drop) if drop else tuple(items)
    if drop:
        actions.append(Action(view[min(drop)].index, "failed_retries_folded", f"{len(drop)} messages"))
    if not actions:
        return out, StepReport(name, 0, 0)
    return out, StepReport(name, ctx.estimate(view), ctx.estimate(out), tuple(actions))


def _collapse_memo(call_item: Item, result_item: Item, f: Failure, ctx: Context, *,
                   pressed: bool) -> tuple[Item, Item, Action | None]:
    """``_collapse``, memoized: its output is a function of the history's state for this call (its
    run, whether it was answered or resolved) and of the two items, so most builds only look up
    the failures they collapsed before."""
    log = ctx.log
    answered = log.answered(f.ref)
    # pressure changes only a failure kept verbatim (not answered yet): for the others a compacting
    # build finds the collapse the build before it made, instead of making it again
    pressed = pressed and ctx.policy.keep_latest_failure and not answered
    state = (f.ref, len(_run(f, log)), answered, log.resolved_by.get(f.ref), pressed, log.failed_by.get(f.ref),
             log.repeated.get(f.ref),
             ctx.policy.keep_latest_failure, ctx.policy.stub_keep_error_chars)
    key = (state, call_item, result_item)
    hit = log.collapsed.get(key)
    if hit is None:
        hit = log.collapsed.put(key, _collapse(call_item, result_item, f, ctx, pressed=pressed))
    ctx.payloads.update(hit[3])
    changed = (hit[0] is not call_item and hit[0] != call_item) or (hit[1] is not result_item and hit[1] != result_item)
    return hit[0], hit[1], hit[2] if changed else None


def _collapse(call_item: Item, result_item: Item, f: Failure, ctx: Context, *,
              pressed: bool) -> tuple[Item, Item, Action | None, dict[str, str]]:
    """The failed call's two items in the prompt, and the payloads their markers name."""
    log = ctx.log
    ref = f.ref
    times = _run(f, log).index(ref) + 1
    original_args = log.messages[ref[0]].tool_calls[ref[1]].arguments
    args_handle = handle_for(original_args)
    shown = {args_handle: original_args}
    error = log.messages[result_item.index].content
    if error.startswith((FAILED_STUB, REPEATED_STUB)):  # collapsed by an earlier trim of this prompt: stays
        return call_item, result_item, None, {}
    if ref not in log.failed_by:
        return _superseded(call_item, result_item, f, log.repeated[ref], error)
    verbatim = ctx.policy.keep_latest_failure and not log.answered(ref)
    count = f"x{times}" if times > 1 else ""
    why = why_word(log, ref)
    if log.failed_by.get(ref) is Evidence.TEXT:
        return _soft(call_item, result_item, f, ctx, verbatim=verbatim and not pressed)
    if verbatim and result_item.kind is Kind.STUB and result_item.message.content.endswith(f"\n{error}") \
            and "args h=" in result_item.message.content:
        return call_item, result_item, None, shown  # collapsed under pressure in an earlier round: stays
    if verbatim and not pressed:
        if times == 1:
            return call_item, result_item, None, {}
        note = marker("failed", f.facts.name, count, why, "earlier identical attempts folded", f"h={args_handle}")
        return call_item, _with_content(result_item, f"{note}\n{error}"), None, shown
    new_call = _stub_call(call_item, f, shown)
    done_by = log.resolved_by.get(ref)

    def stub_note(count: str, aids: bool) -> str:
        if verbatim:
            note = _failure_note(f, "", count, why, args_handle, result_item.index, ctx, shown, aids=aids)
            return note + "\n" + error
        if done_by is not None:
            return marker("failed", f.facts.name, count, why, f"then done by #{done_by}", f"args h={args_handle}")
        return _failure_note(f, error, count, why, args_handle, result_item.index, ctx, shown, aids=aids)

    # The stub stands for the whole failed call (arguments and error): it must be shorter than both.
    # Where the run's count and the suggested path make it too long, it goes without them: trimming
    # the prompt again would not find them (the folded attempts are gone, and so may be the pages
    # written before), and must decide alike.
    before = len(error) + len(original_args if f.facts.value is not None else _arguments(call_item, f))
    stub_args = len(_arguments(new_call, f))
    note = stub_note(count, True)
    if len(note) + stub_args >= before:
        note = stub_note("", False)
        if len(note) + stub_args >= before:  # no shorter note: the error as it was, the long leaves elided
            raw = replace(result_item, message=log.messages[result_item.index], kind=Kind.RAW)
            if new_call is call_item:
                return call_item, raw, None, {}
            shown.pop(args_handle)  # (as the form of a call known by its text alone: trimming again keeps it)
            return new_call, raw, Action(ref[0], "failed_call_collapsed", f"{f.facts.name} {why}", ""), shown
    new_result = _with_content(result_item, note)
    action = None
    if new_call.message != call_item.message or new_result.message != result_item.message:
        action = Action(ref[0], "failed_call_collapsed", " ".join(p for p in (f.facts.name, count, why) if p),
                        args_handle)
    return new_call, new_result, action, shown


def _superseded(call_item: Item, result_item: Item, f: Failure, later: int,
                output: str) -> tuple[Item, Item, Action | None, dict[str, str]]:
    """A call run again at once, with the same arguments and the same output: it says so in one
    line, with the handle of its output, and is never called failed."""
    handle = handle_for(output)
    shown = {handle: output}
    note = marker("repeated", f.facts.name, f"same call and output as #{later}", f"output h={handle}")
    new_call = _stub_call(call_item, f, shown)
    if len(note) >= len(output) and new_call is call_item:
        return call_item, result_item, None, {}
    new_result = _with_content(result_item, note) if len(note) < len(output) else result_item
    if new_result is result_item:
        shown.pop(handle)
    action = Action(f.ref[0], "repeated_call_folded", f.facts.name, handle)
    return new_call, new_result, action, shown


def _soft(call_item: Item, result_item: Item, f: Failure, ctx: Context, *,
          verbatim: bool) -> tuple[Item, Item, Action | None, dict[str, str]]:
    """A call that only its result's text shows failed: its long arguments leave (each with its
    handle), a long output keeps a head and a tail as any old bulky output does, and nothing in
    the prompt calls it failed: a success read as a failure must not hide what worked
    (``bench_classify`` finds such misreadings on families it was not tuned on). Shrunk at the
    tail, once answered, it re-reads little and leaves room (``bench_hygiene``'s re-read column)."""
    if verbatim:
        return call_item, result_item, None, {}
    shown: dict[str, str] = {}
    new_call = _stub_call(call_item, f, shown)
    new_result = result_item
    m, p = result_item.message, ctx.policy
    if len(m.content) > p.shrink_min_chars and not contains_marker(m.content):
        content = Elider(shown, sniff(m.content))(m.content, p.shrink_keep_chars)
        new_result = replace(result_item, message=replace(m, content=content), kind=Kind.SHRUNK)
    if new_call is call_item and new_result is result_item:
        return call_item, result_item, None, {}
    action = Action(f.ref[0], "failed_call_collapsed", f"{f.facts.name} why=text", "")
    return new_call, new_result, action, shown


def _run(f: Failure, log: History) -> list[CallRef]:
    """The failed call's run of identical retries, of those not known by their text alone."""
    if log.failed_by.get(f.ref) is Evidence.TEXT:
        return [f.ref]
    run = log.retries.get(f.ref) or [f.ref]
    return [r for r in run if log.failed_by.get(r) is not Evidence.TEXT]


def _arguments(item: Item, f: Failure) -> str:
    return next((c.arguments for c in item.message.tool_calls if c.id == f.facts.id), "")


def why_word(log: History, ref: CallRef) -> str:
    """``why=`` and the evidence the call was taken as failed on, in one word."""
    evidence = log.failed_by.get(ref)
    return f"why={evidence.value.replace(' ', '-')}" if evidence is not None else ""


def _failure_note(f: Failure, error: str, count: str, why: str, args_handle: str, before: int, ctx: Context,
                  shown: dict[str, str], *, aids: bool = True) -> str:
    """The failed call's note. ``aids``: with a path suggested for a write that lost its path."""
    first = " ".join(error.split())[: ctx.policy.stub_keep_error_chars // 2]
    error_handle = ""
    if first != " ".join(error.split()):
        error_handle = handle_for(error)
        shown[error_handle] = error
    payload = _largest_leaf(f.facts.value) if f.facts.value is not None else ""
    parts = [f.facts.name, count, why, f'"{first}"' if first else "",
             f"{fmt_chars(len(payload))} {sniff(payload)} elided" if len(payload) > STUB_LEAF_CHARS else ""]
    if aids and f.facts.op is FileOp.WRITE and not f.facts.path and len(payload) > STUB_LEAF_CHARS:
        pages = ctx.log.html_pages_before(before)
        parts.append("suggested_path=" + suggest_path(payload, html_pages_seen=pages).path)
    parts.append(f"args h={args_handle}")
    if error_handle:
        parts.append(f"error h={error_handle}")
    return marker("failed", *parts)


def _with_content(item: Item, content: str) -> Item:
    return replace(item, message=replace(item.message, content=content), kind=Kind.STUB)


def _stub_call(item: Item, f: Failure, shown: dict[str, str]) -> Item:
    """Long string leaves of a failed call's parsed arguments become markers; arguments that did
    not parse already carry a small stand-in."""
    if f.facts.value is None:
        return item
    m = item.message
    text = dumps(_stub_leaves(f.facts.value, shown))
    if len(text) >= len(_arguments(item, f)):
        return item  # nothing long enough to elide (or elided already)
    calls = tuple(replace(c, arguments=text) if c.id == f.facts.id else c for c in m.tool_calls)
    if calls == m.tool_calls:
        return item
    return replace(item, message=replace(m, tool_calls=calls), kind=Kind.STUB)


def _stub_leaves(value: Any, shown: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _stub_leaves(v, shown) for k, v in value.items()}
    if isinstance(value, list):
        return [_stub_leaves(v, shown) for v in value]
    if isinstance(value, str) and len(value) > STUB_LEAF_CHARS:
        handle = handle_for(value)
        shown[handle] = value
        return marker("elided", fmt_chars(len(value)), sniff(value), f"h={handle}")
    return value


def _largest_leaf(value: Any) -> str:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return max((_largest_leaf(v) for v in value), key=len, default="")
    return value if isinstance(value, str) else ""
