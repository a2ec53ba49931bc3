"""Render only the tail of a prompt that extends the previous one, checked each time.

A chat template renders the whole conversation on every call; on a 32K-token prompt that is most
of a build's time, although most turns only append. ``render`` keeps, per session, the previous
render's text and *anchors* (message index -> the position in the text where that message's
output starts) and renders only a **window**: the head (the system message and the closest user
message before the window, so that rules such as "reasoning after the last user query" see what
they would see) followed by the messages from an anchor on. The window's text after the head
replaces the previous text from that anchor on.

It is taken only when it is checked on the spot:
- the **overlap** (messages of the previous prompt from the anchor to the end of what is
  unchanged, at least one) renders in the window, followed by the new messages, byte for byte as
  it did in the previous text: the window reproduces the context those messages see, and the new
  messages do not change the text before them;
- the head's render is a prefix of the window's render, and the window ends with the template's
  generation prompt;
- nothing before the anchor can change its text: no message before it changed, and where the
  template drops earlier reasoning once a user speaks, no message before it carries reasoning.

Otherwise the whole conversation is rendered, and anchors for the next turn are found (and
checked) the same way, by the next build before it looks for a window. Every ``audit_every``-th
build (for the history as received, more apart the longer it is: ``AUDIT_CHARS``) also renders in
full and compares; a difference turns the window off for the profile for good (``Windowed.off``).
A template that reads the date renders whole when the date changes (it sits
before any window); one that reads the clock (``strftime_now``) always renders whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from budgeter.core.memo import heads_equal, leading_same

log = logging.getLogger("budgeter.counting")

MIN_MESSAGES = 8
"""Shorter conversations render whole: a window and its checks would cost about as much
(``bench_load``'s turns per profile chose 8)."""
ANCHORS_AFTER_FULL = 2
"""Anchors found and checked after a full render: with one, a next build that changes the last
turn (a failure there answered and collapsed) has no start before it and renders whole again
(``bench_engine`` counts the whole renders)."""
KEEP = 64
"""Anchors kept at or before a window's start (a change some turns back still finds one), so that
the list stays short in a long session that never compacts."""
TAIL_KEEP = 4
"""Anchors a ``tail`` memo keeps: the history as received only grows at its end, so windows start
near it, and the text before the oldest anchor kept is let go."""
AUDIT_CHARS = 1 << 17
"""About a 32K-token prompt's text. The history as received is audited as often per character as
a prompt: a full render of a 1M-char history every ``audit_every`` builds was a tenth of a
turn's mean cost there, and the build that made it one of the slowest (``bench_instructions``).
The prompt's audits, of the same template and windows, go on at every size, and a difference
found by either turns windows off for the profile."""
Dicts = list[dict[str, Any]]
Render = Callable[[Dicts, bool], str]
"""(template-ready messages, add_generation_prompt) -> text."""
PieceStart = Callable[[str, int], int]
"""(text, position) -> where the piece holding the position starts (``PieceCounter.piece_start``)."""


@dataclass
class RenderMemo:
    """One session's previous render: what was rendered, its text, exact count and anchors."""

    dicts: Dicts = field(default_factory=list)
    tools: Sequence[Mapping[str, Any]] = ()
    text: str = ""
    """The render's text from ``base`` on (anchors are positions in the whole text)."""
    total: int = 0
    anchors: dict[int, int] = field(default_factory=dict)
    builds: int = 0
    stamp: tuple[Any, ...] = ()
    """The values of the template's date variables when ``text`` was rendered."""
    head: Dicts = field(default_factory=list)
    head_text: str | None = None
    """The last head and its render: heads rarely change between turns."""
    tail: bool = False
    """Keep only the text from the oldest anchor kept on (``base``): for a render whose count alone
    is wanted (a session's history as received), so that a build neither copies nor holds text
    that no window can reach (``bench_flat``'s growth with history)."""
    base: int = 0
    reasoned: tuple[int, int] = (0, -1)
    """How many of ``dicts`` were looked at for reasoning, and the first that holds some (-1: none)."""
    given: tuple[list[Any], Dicts] = ([], [])
    """The messages of the previous render and their template dicts, before any rewrite
    (``TemplateCounter._adapted``)."""
    pending: bool = False
    """A full render's anchors are still to be found: by the next build that looks for them, not
    by the build that rendered in full (the slowest builds: those that compacted the prompt)."""
    window: tuple[Dicts, Dicts, Sequence[Mapping[str, Any]], tuple[Any, ...], str] | None = None
    """The last window rendered here: its head, messages, tools, date variables (``stamp``) and its
    text after the head."""
    appends: bool = False
    """Each call's messages are the previous call's list, grown at its end only (a session's
    history as received, which nothing but ``History.append`` changes): the counter extends one
    list of template dicts in place (``grown``), and a render given the list it rendered before
    takes its first ``n`` items as shared without comparing them (the passes in C over the whole
    history that checked and copied it, on every build: ``bench_instructions`` at 2M characters)."""
    grown: tuple[Any, Dicts] = field(default_factory=lambda: (None, []))
    """(the messages list last given, its template dicts so far): ``appends`` only."""
    n: int = 0
    """How many of ``dicts`` were rendered (``dicts`` may have grown since: ``appends``)."""
    kept: tuple[int, int] = (0, 0)
    """The ``id`` of the text this memo held before its last render, and how many first characters
    of ``text`` are that text's by construction (a windowed render copies the previous text up to
    an anchor): where the two differ is looked for from there on (``Engine``, ``shared_prefix``).
    An id, not the text, so that the memo keeps no text alive; a caller that held that text since
    (the engine's last prompt) knows it by its id."""
    peer: RenderMemo | None = field(default=None, repr=False, compare=False)
    """The memo rendered just before this one in a build, whose window this one takes when its own
    is the same: the history as received mostly ends with the prompt's last turns, so about half of
    the builds render one window instead of two (``bench_instructions``)."""

    def bare(self, render: Render, head: Dicts) -> str:
        if self.head_text is None or head != self.head:
            self.head, self.head_text = head, render(head, False)
        return self.head_text


@dataclass
class Windowed:
    """A profile's switch and statistics for windowed rendering."""

    drops_reasoning: bool = False
    audit_every: int = 64
    off: str = ""
    """Why this profile renders every build whole ('' while windows are on)."""
    windowed: int = 0
    full: int = 0
    _gen: str | None = None

    def gen_suffix(self, render: Render, head: Dicts) -> str | None:
        """The generation prompt the template appends (the same for every conversation here)."""
        if self._gen is None:
            try:
                bare, gen = render(head, False), render(head, True)
            except Exception:  # a head this template refuses alone: try with the next one
                return None
            if not gen.startswith(bare):
                return None
            self._gen = gen[len(bare):]
        return self._gen


def _reasoning(d: Mapping[str, Any]) -> bool:
    content = d.get("content")
    return bool(d.get("reasoning_content") or d.get("thinking")) or (
        isinstance(content, str) and "</think>" in content)


def common_length(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items two sequences share (equal, or the same object)."""
    n = min(len(a), len(b))
    if heads_equal(a, b, n):  # most builds
        return n
    # a build whose prompt replaced the last items of the previous one (a failed call collapsed once
    # answered): the leading same objects are skipped in C, not walked in Python (``bench_instructions``)
    for i in range(leading_same(a, b), n):
        if a[i] is not b[i] and a[i] != b[i]:
            return i
    return n


def _head(dicts: Dicts, at: int) -> Dicts:
    """The system message (if first) and the closest user message before ``at``."""
    head = [dicts[0]] if dicts and dicts[0].get("role") == "system" and at > 0 else []
    user = next((i for i in range(at - 1, len(head) - 1, -1) if dicts[i].get("role") == "user"), None)
    return head + [dicts[user]] if user is not None else head


def _tail_text(render: Render, memo: RenderMemo, head: Dicts, part: Dicts, gen: bool) -> str | None:
    """``part`` rendered after ``head``, without the head's own text; None where the template is
    not additive there (or refuses the shortened conversation)."""
    try:
        bare = memo.bare(render, head)
        text = render(head + part, gen)
    except Exception:
        return None
    return text[len(bare):] if text.startswith(bare) else None


def _starts(dicts: Dicts, below: int) -> list[int]:
    """Candidate anchors below ``below``, newest first: messages that open a turn (not a tool
    result, which some templates group with the one before)."""
    return [i for i in range(below - 1, 0, -1) if dicts[i].get("role") not in ("tool", "system")][:3]


def _anchor_for(state: Windowed, memo: RenderMemo, dicts: Dicts, end: int, render: Render) -> None:
    """After a full render, find and check anchors a few messages back for the next turn."""
    if end < 2:
        return
    gen = state.gen_suffix(render, _head(dicts, end))
    if gen is None or not memo.text.endswith(gen):
        return
    stop = len(memo.text) - len(gen)
    memo.anchors[end] = memo.base + stop
    found = 0
    for at in _starts(dicts, end):
        tail = _tail_text(render, memo, _head(dicts, at), dicts[at:end], False)
        if tail is not None and len(tail) <= stop and memo.text.endswith(tail, 0, stop):  # no copy of the prompt
            memo.anchors[at] = memo.base + stop - len(tail)
            found += 1
            if found == ANCHORS_AFTER_FULL:
                return


def render(state: Windowed, memo: RenderMemo, dicts: Dicts, tools: Sequence[Mapping[str, Any]],
           render_fn: Render, count: Callable[[str], int], start: PieceStart, *,
           stamp: tuple[Any, ...] = ()) -> tuple[int, str]:
    """The exact count and text of ``dicts`` rendered with the generation prompt. ``stamp``: the
    values of the template's date variables now (a new day renders whole: the date sits in the
    text before any window)."""
    worth = len(dicts) >= MIN_MESSAGES and not state.off
    if memo.stamp != stamp:  # a new day: the head's text changed too
        memo.head_text = None
    got = _windowed(state, memo, dicts, tools, render_fn, count, start) if worth and memo.stamp == stamp else None
    memo.builds += 1
    base = 0
    if got is not None:
        state.windowed += 1
        total, text, anchors, base, same = got
        kept = same - base if base == memo.base else 0  # (memo.base is still the previous text's)
        if memo.builds % _audit_every(state, memo) == 0:
            full = render_fn(dicts, True)
            if full[base:] != text or count(full) != total:
                state.off = "a windowed render differed from the full render: full renders from now on"
                log.warning("budgeter: %s", state.off)
                got = None
    if got is None:
        state.full += 1
        text = render_fn(dicts, True)
        total, anchors, base, kept = count(text), {}, 0, 0
        memo.reasoned = (0, -1)
    memo.kept = (id(memo.text), kept)  # (the text this render replaces)
    memo.dicts, memo.tools, memo.text, memo.total, memo.anchors = dicts, tools, text, total, anchors
    memo.n = len(dicts)
    memo.base = base
    memo.stamp = stamp
    memo.pending = got is None and worth
    return total, text


def _audit_every(state: Windowed, memo: RenderMemo) -> int:
    """Builds between two audits of ``memo``: ``audit_every``, and for a ``tail`` memo (the history
    as received) that many times each ``AUDIT_CHARS`` of its text, so that it costs about what a
    prompt's audit costs per build, whatever the history's length."""
    if not memo.tail:
        return state.audit_every
    return state.audit_every * max(1, (memo.base + len(memo.text)) // AUDIT_CHARS)


def whole(state: Windowed, memo: RenderMemo, dicts: Dicts, tools: Sequence[Mapping[str, Any]], text: str,
          total: int, *, stamp: tuple[Any, ...] = ()) -> tuple[int, str]:
    """Keep a render made whole without a generation prompt (a prefill of the last message) as the
    session's previous render: no anchor is taken from it (none ends where a generation prompt
    would start), so the next build renders whole too and finds anchors again."""
    if memo.stamp != stamp:
        memo.head_text = None
    memo.builds += 1
    state.full += 1
    memo.pending = False
    memo.kept = (0, 0)  # (nothing of the new text is known to be the previous one's)
    memo.dicts, memo.tools, memo.text, memo.total, memo.anchors = dicts, tools, text, total, {}
    memo.n = len(dicts)
    memo.base, memo.reasoned = 0, (0, -1)
    memo.stamp = stamp
    return total, text


def _windowed(state: Windowed, memo: RenderMemo, dicts: Dicts, tools: Sequence[Mapping[str, Any]],
              render_fn: Render, count: Callable[[str], int], start: PieceStart
              ) -> tuple[int, str, dict[int, int], int, int] | None:
    """(count, text from the returned base on, anchors, base, where the text stops being the
    previous one's: a position in the whole text), or None where no window is checked."""
    if memo.tools is not tools and memo.tools != tools:
        return None
    if memo.pending:  # the previous build rendered in full: its anchors, with its tools (the same)
        memo.pending = False
        _anchor_for(state, memo, memo.dicts, memo.n, render_fn)
    if not memo.anchors:
        return None
    # the list rendered before, given again, has only grown at its end (``RenderMemo.appends``)
    same = memo.n if memo.dicts is dicts else common_length(memo.dicts, dicts)
    ends = [i for i in memo.anchors if i <= same]
    if not ends:
        return None
    end = max(ends)
    starts = [i for i in memo.anchors if i < end]
    if not starts:
        return None
    at = max(starts)
    if state.drops_reasoning and _reasoning_before(memo, dicts, at, same):
        return None
    head = _head(dicts, at)
    b = memo.base
    over = memo.text[memo.anchors[at] - b:memo.anchors[end] - b]
    whole = _window(render_fn, memo, head, dicts[at:], tools)
    gen = state.gen_suffix(render_fn, head)
    if whole is None or gen is None or not whole.startswith(over) or not whole.endswith(gen):
        return None
    same = memo.anchors[end]  # both texts agree up to here: count again only from its piece on
    begin = b + start(memo.text, same - b)  # the same piece start in both texts (base is one too)
    kept = sorted(i for i in memo.anchors if i <= at)[-(TAIL_KEEP if memo.tail else KEEP):]
    cut = b
    if memo.tail:  # from the piece holding the oldest anchor kept on: no window reaches before it
        cut = min(b + start(memo.text, memo.anchors[kept[0]] - b), begin)
    text = memo.text[cut - b:memo.anchors[at] - b] + whole
    total = memo.total - count(memo.text[begin - b:]) + count(text[begin - cut:])
    anchors = {i: memo.anchors[i] for i in kept}
    anchors[end] = same
    anchors[len(dicts)] = cut + len(text) - len(gen)
    return total, text, anchors, cut, same


def _window(render_fn: Render, memo: RenderMemo, head: Dicts, part: Dicts,
            tools: Sequence[Mapping[str, Any]]) -> str | None:
    """``_tail_text`` of ``part`` with the generation prompt, or the peer's text of its last window
    when that was the same one (head, messages, tools and date variables: a window's text depends
    on nothing else, so it serves whichever build rendered it)."""
    seen = memo.peer.window if memo.peer is not None else None
    if (seen is not None and seen[3] == memo.stamp and (seen[2] is tools or seen[2] == tools)
            and seen[0] == head and seen[1] == part):
        memo.window = seen
        return seen[4]
    whole = _tail_text(render_fn, memo, head, part, True)
    memo.window = (head, part, tools, memo.stamp, whole) if whole is not None else None
    return whole


def _reasoning_before(memo: RenderMemo, dicts: Dicts, at: int, same: int) -> bool:
    """Whether a message before ``at`` carries reasoning; the messages ``memo.dicts`` shares with
    ``dicts`` are not looked at again (a walk over the history grew with it: ``bench_flat``)."""
    looked, first = memo.reasoned
    looked = min(looked, same)
    if 0 <= first < looked:
        return first < at
    if at <= looked:
        memo.reasoned = (looked, -1)
        return False
    found = next((i for i in range(looked, at) if _reasoning(dicts[i])), -1)
    memo.reasoned = (at if found < 0 else found + 1, found)
    return found >= 0
