"""Exact token counting of a chat-templated prompt without re-tokenizing history.

A Hugging Face / tiktoken tokenizer matches added and special tokens before it pre-tokenizes the
text between them, so the count of a rendered prompt is the sum, over the pieces between special
tokens, of each piece's count, plus one per special token. ``PieceCounter`` caches piece counts
keyed by piece text: a render of the whole prompt costs a Jinja render, a regex split and dict
look-ups, and only pieces never seen before are tokenized. A lone surrogate (from a ``"\\ud800"``
escape in JSON) cannot reach a tokenizer as UTF-8; it is counted as U+FFFD. ``TemplateCounter`` is the
``PromptCounter`` for any ``ChatFormat`` + ``Tokenizer``: its ``count_prompt`` is exact by
construction (it counts the full render), and ``message_cost`` caches each message rendered alone.
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from budgeter.core import incremental
from budgeter.core.jsonargs import _SURROGATE, dumps, has_surrogate
from budgeter.core.memo import CharMemo, IdentityMemo, remapped, same_objects
from budgeter.core.messages import Message, Repair, repaired_note, to_template
from budgeter.core.typing import ChatFormat, JSONDict, Tokenizer

LOOKAHEAD = 256
"""How far past a position ``PieceCounter.piece_start`` lets a special token match: longer than
any special token, with room for the whitespace a stripping token takes beside it."""
Adapter = Callable[[list[dict[str, Any]], Sequence[Mapping[str, Any]]],
                   tuple[list[dict[str, Any]], Sequence[Mapping[str, Any]]]]


@dataclass(frozen=True, slots=True)
class Adaptation:
    """A rewrite of the request a profile makes for its template (and sends, so the server renders
    what was counted): ``kind`` names it for metrics, ``note`` says it for people."""

    kind: str
    note: str


def adaptations(counter: Any) -> tuple[Adaptation, ...]:
    """The rewrites ``counter``'s profile makes (found once, when it loaded); () for none."""
    return tuple(getattr(counter, "adaptations", ()))


def repaired(repairs: Sequence[Repair]) -> tuple[Adaptation, ...]:
    """The request's lone surrogates made U+FFFD on the way in (``messages.Repair``), as the
    rewrite that says so; () for none. Unlike a profile's, it is found per request."""
    return (Adaptation("lone_surrogates", repaired_note(repairs)),) if repairs else ()


def _last_end(special: re.Pattern[str], text: str, lo: int, chars: int) -> int:
    """The end of the last special token found from ``lo`` that ends at or before ``chars``
    (-1: none)."""
    end = -1
    for match in special.finditer(text, lo, min(len(text), chars + LOOKAHEAD)):
        if match.end() > chars:
            break
        end = match.end()
    return end


class PieceCounter:
    def __init__(self, tokenizer: Tokenizer, *, max_pieces: int = 400_000) -> None:
        self.tokenizer = tokenizer
        pattern = tokenizer.special_pattern()
        # one compiled pattern for both (its group changes no match's span), the one the backend
        # compiled too (re's cache): a GGUF vocabulary's thousands of special tokens took a tenth
        # of a one-shot command's start to compile again (bench_flat, ready)
        special = re.compile(f"({pattern})") if pattern else None
        self._split = special.split if special is not None else None
        self._special = special
        self._cache: CharMemo[str, int] = CharMemo(max_pieces)
        """Piece -> count; bounded by ``max_pieces`` and by the budget (``core/memo.py``)."""
        self.chars_tokenized = 0
        self.delimiter = ""
        """A special token that no other one overlaps (``delimit``): texts are cut at it first, and
        the counts of the segments between are cached (``count``). Empty: none chosen."""
        self._segments: CharMemo[str, int] = CharMemo()
        """Segment -> count, bounded by the budget."""

    def delimit(self, sample: str) -> str:
        """Choose the delimiter: of the special tokens in ``sample`` (a template's render of a short
        conversation), the most frequent one that is safe to cut at (``_isolated``): a turn's start
        token, such as ``<start_of_turn>``, ``<|im_start|>`` or ``<|start_header_id|>``. Returns it
        ('' when none is safe: texts are then split whole, as before)."""
        specials = getattr(self.tokenizer, "specials", None)
        if self._split is None or not specials:
            return ""
        found = self._split(sample)[1::2]
        for token in sorted(set(found), key=lambda t: (-found.count(t), found.index(t))):
            if _isolated(token, specials) and self._alone(token):
                self.delimiter = token
                break
        return self.delimiter

    def _alone(self, token: str) -> bool:
        """Whether the pattern matches ``token`` between spaces as itself alone: not a token
        that takes the whitespace beside it (lstrip/rstrip), which would take a neighbouring
        segment's."""
        assert self._special is not None
        text = f" {token} "
        spans = [m.span() for m in self._special.finditer(text) if m.start() <= len(token) and m.end() > 1]
        return spans == [(1, 1 + len(token))]

    def count(self, text: str) -> int:
        """Tokens of ``text``. With a delimiter, the text is cut at it (a C-level search for one
        literal) and each segment's count is looked up, so that text counted before (a window's
        messages, already counted alone; a whole render's history) is hashed, not split again by
        the special-token pattern (slow where a vocabulary adds thousands of tokens, as Gemma 3's;
        ``bench_service --profiles gemma3``). Exact: the delimiter is a
        special token that no other one overlaps, so the split of the whole text matches it at
        each of its occurrences and no match crosses one; the count of the text is then the
        segments' counts plus one per delimiter."""
        if self.delimiter:
            segments = text.split(self.delimiter)
            try:
                return len(segments) - 1 + sum(map(self._segments.__getitem__, segments))
            except KeyError:
                return len(segments) - 1 + sum(map(self._segment, segments))
        return self.counted(text)[0]

    def _segment(self, segment: str) -> int:
        """The count of ``segment``, kept unless it is longer than a quarter of the room (a single
        large text, such as a ``CountTokens`` of a file, would push out every window's segments)."""
        segments = self._segments
        n = segments.get(segment)
        if n is None:
            n = self.counted(segment)[0]
            if len(segment) <= segments.limit_chars // 4:
                segments.put(segment, n, len(segment))
        return n

    def tokens_after(self, text: str, chars: int, *, total: int | None = None) -> int:
        """Tokens of ``text`` from the start of the piece that holds position ``chars`` on (what
        a server must read again when the text changes there). ``total``: the tokens of the whole
        ``text``; the prefix before the piece is split instead of the suffix where it is the
        shorter (a prompt compacted near its start, timed by bench_service's Gemma 3 turns)."""
        if chars >= len(text):
            return 0
        if self._special is None:
            return self.count(text)
        start = self.piece_start(text, chars)
        if total is not None and start < len(text) - start:
            return total - self.count(text[:start])
        return self.count(text[start:])

    def piece_start(self, text: str, chars: int) -> int:
        """Where the piece that holds position ``chars`` starts: the end of the last special token
        that ends at or before it (0 when none does), found scanning windows of 8K characters
        before ``chars``. Tokens are matched in the text as it goes on after ``chars`` (up to
        ``LOOKAHEAD`` characters), not in the text cut there, where a shorter token (one newline
        of two) could seem to end at ``chars``."""
        special = self._special
        if special is None:
            return 0
        lo = chars
        while lo > 0:
            lo = max(0, lo - 8192)
            end = _last_end(special, text, self._aligned(text, lo, chars), chars)
            if end >= 0:
                return end
        return 0

    def _aligned(self, text: str, lo: int, chars: int) -> int:
        """Where to start scanning for the last special token that ends at or before ``chars``:
        the last delimiter that does, from ``lo`` on (the split of the whole text matches every
        delimiter, so the scan finds the same tokens from there), else ``lo``."""
        delimiter = self.delimiter
        if not delimiter or chars - lo < 256:
            return lo
        at = text.rfind(delimiter, lo, chars)
        return at if at >= 0 else lo

    def ordinary(self, text: str) -> list[str]:
        """The non-empty pieces between special tokens, in order."""
        if self._split is None:
            return [text] if text else []
        return [p for p in self._split(text)[0::2] if p]

    def counted(self, text: str) -> tuple[int, list[int]]:
        """``count(text)`` and the counts of its non-empty pieces."""
        parts = self._split(text) if self._split is not None else [text]
        pieces = [p for p in parts[0::2] if p]
        try:
            counts = list(map(self._cache.__getitem__, pieces))
        except KeyError:
            counts = self._learnt(pieces)
        return len(parts) // 2 + sum(counts), counts

    def seed(self, text: str, counts: Sequence[int]) -> bool:
        """Learn piece counts computed elsewhere (another replica) for ``text``; False when they
        do not line up with its pieces (then nothing is learnt)."""
        pieces = self.ordinary(text)
        if len(pieces) != len(counts):
            return False
        for piece, n in zip(pieces, counts, strict=True):
            if piece not in self._cache:
                self._cache.put(piece, int(n), len(piece))
        return True

    def _learnt(self, pieces: Sequence[str]) -> list[int]:
        """The counts of ``pieces``, those not cached tokenized now (and kept)."""
        cache = self._cache
        known = [cache.get(p) for p in pieces]  # (read first: keeping the new may clear the cache)
        learnt = self._learn(list({p for p in pieces if p not in cache}))
        return [n if n is not None else learnt[p] for p, n in zip(pieces, known, strict=True)]

    def _learn(self, texts: list[str]) -> dict[str, int]:
        encodable = [_SURROGATE.sub("\ufffd", t) if has_surrogate(t) else t for t in texts]
        counts = dict(zip(texts, self.tokenizer.count_batch(encodable), strict=True))
        for text, n in counts.items():
            self._cache.put(text, n, len(text))
        self.chars_tokenized += sum(map(len, texts))
        return counts


def _isolated(token: str, specials: Sequence[str]) -> bool:
    """Whether texts can be cut at ``token`` and each part split alone, as the split of the whole
    text would: it starts and ends with a character no whitespace-absorbing token takes, and no
    special token (``token`` itself included) overlaps it: none holds it or is held in it, and
    none ends with what it starts with, or starts with what it ends with."""
    if not token or token[0].isspace() or token[-1].isspace():
        return False
    for other in specials:
        if other != token and (token in other or other in token):
            return False
        for k in range(1, min(len(token), len(other))):
            if other.endswith(token[:k]) or token.endswith(other[:k]):
                return False
    return True


class TemplateCounter:
    """PromptCounter over a chat format and a tokenizer, with an optional fallback adapter that
    rewrites messages for templates that cannot render tools, tool calls or tool roles."""

    def __init__(
        self,
        fmt: ChatFormat,
        tokenizer: Tokenizer,
        *,
        name: str,
        adapter: Adapter | None = None,
        notes: Sequence[str] = (),
        drops_reasoning: bool = False,
        prefill: bool = False,
        adaptations: Sequence[Adaptation] = (),
    ) -> None:
        self.name = name
        self.prefill = prefill
        """A conversation that ends with an assistant message is a prefill (``prefilled``): the
        server continues that message and opens no new turn (llama.cpp's server)."""
        self._marks: tuple[str, str] | None | bool = False
        self.adaptations = tuple(adaptations)
        """The rewrites of the request this profile makes for its template (``Adaptation``)."""
        self.format = fmt
        base: Any = fmt
        while getattr(base, "inner", None) is not None:
            base = base.inner
        self._base_format = base
        """The format the wrappers (template rules, server conventions) hand on to: the one that
        says whether its Python renderer was turned off (``notes``), looked up without going
        through each wrapper's ``__getattr__`` on every build."""
        self.pieces = PieceCounter(tokenizer)
        self.adapter = adapter
        self._notes = tuple(notes)
        self._server_rules = bool(getattr(getattr(fmt, "rules", None), "sent_rewrites", False))
        """The template's rules rewrite what the server is sent too (``RuledFormat.for_server``)."""
        self.windowed = incremental.Windowed(drops_reasoning=drops_reasoning)
        """Renders only the tail of a prompt that extends the session's previous one (checked each time)."""
        source = getattr(fmt, "source", "") or ""
        if "strftime_now" in source:
            self.windowed.off = "the template reads the clock (strftime_now): every build renders whole"
        self._dated = list((getattr(fmt, "dynamic_read", None) or {}).values())
        self._dicts: CharMemo[Message, dict[str, Any]] = CharMemo()
        self._developer = "developer" if "<|channel|>" in source else "system"
        """The role a developer message renders as: llama.cpp's server maps it to system for every
        template but gpt-oss's (``<|channel|>`` in its source: it has a developer role)."""
        self._costs: CharMemo[Message, int] = CharMemo()
        self.pieces.delimit(self._probe())

    def _probe(self) -> str:
        """The template's render of a short conversation ('' if it refuses one): where its turn
        tokens show, for ``PieceCounter.delimit``."""
        probe = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                 {"role": "user", "content": "Bye"}]
        try:
            dicts, _ = self.adapter(probe, ()) if self.adapter is not None else (probe, ())
            return self.format.render(dicts, None, add_generation_prompt=True)
        except Exception:  # any template error: no delimiter, texts split whole
            return ""

    @property
    def notes(self) -> tuple[str, ...]:
        """What the report says about this profile, and why windows or the template's Python
        renderer (``formats/native.py``) are off if they are."""
        off, native_off = self.windowed.off, getattr(self._base_format, "native_off", "")
        if not (off or native_off):
            return self._notes  # (every build asks)
        notes = self._notes + (f"renders: every build whole ({off})",) if off else self._notes
        return notes + (f"renders: the template itself ({native_off})",) if native_off else notes

    def _template_dict(self, m: Message) -> dict[str, Any]:
        d = self._dicts.get(m)
        if d is None:
            d = self._dicts.put(m, to_template(m, developer=self._developer), m.size)
        return d

    def _given(self, messages: Sequence[Message], memo: incremental.RenderMemo | SentMemo | None
               ) -> list[dict[str, Any]]:
        """Each message's template dict. With a session's ``memo``, the messages its previous call
        shared (by identity) keep their dicts without a lookup each, so that a build's walk in
        Python covers only the new messages (``bench_flat``'s growth with history)."""
        if memo is None:
            return [self._template_dict(m) for m in messages]
        memo.given, dicts = remapped(memo.given, messages, self._template_dict)
        return dicts

    def _adapted(self, messages: Sequence[Message], tools: Sequence[JSONDict],
                 memo: incremental.RenderMemo | None = None,
                 ) -> tuple[list[dict[str, Any]], Sequence[Mapping[str, Any]]]:
        """The messages as the template takes them (``memo``: the session's previous render)."""
        if memo is not None and memo.appends:
            grown = self._grown(messages, tools, memo)
            if grown is not None:
                return grown, tools
        dicts = self._given(messages, memo)
        if self.adapter is not None:
            return self.adapter(dicts, tools)
        return dicts, tools

    def _grown(self, messages: Sequence[Message], tools: Sequence[JSONDict], memo: incremental.RenderMemo
               ) -> list[dict[str, Any]] | None:
        """``_adapted``'s messages for a memo whose messages only grow (``RenderMemo.appends``),
        where the adapter rewrites each message alone (or there is none): one list kept by the
        memo, extended in place by the new messages' dicts, so that a build converts and copies
        only those. None where the adapter's output is not per message (the general way then)."""
        each = None
        if self.adapter is not None:
            each = getattr(self.adapter, "each", lambda tools: None)(tools)
            if each is None:
                return None
        given, held = memo.grown
        if given is not messages:  # (the first call: the list is built here once)
            held = []
        n = len(held)
        if n > len(messages):
            return None
        new = [self._template_dict(m) for m in messages[n:]]  # (a slice: islice would step over the first n)
        held.extend(new if each is None else (each(d, i == 0) for i, d in enumerate(new, n)))
        memo.grown = (messages, held)
        return held

    def sent(self, messages: Sequence[Message], tools: Sequence[JSONDict], memo: SentMemo | None = None,
             ) -> tuple[list[Mapping[str, Any]], Sequence[Mapping[str, Any]]] | None:
        """The conversation as counted, where that is not the messages as given: the adapter's
        rewrite and the template rules' rewrites the server needs too; None otherwise. ``memo``:
        the session's previous call (``SentMemo``)."""
        for_server = getattr(self.format, "for_server", None) if self._server_rules else None
        if self.adapter is None and for_server is None:
            return None
        caps = getattr(self.adapter, "caps", None)
        if for_server is None and caps is not None and caps.system_only and not later_system(messages):
            return None  # (the default profile's case: no walk over the messages in Python)
        given = self._given(messages, memo)
        dicts, schemas = self.adapter(given, tools) if self.adapter is not None else (given, tools)
        ruled = for_server(dicts) if for_server is not None else None
        if ruled is None and schemas is tools and len(dicts) == len(given) and same_objects(dicts, given) == len(given):
            return None  # the adapter left every message as it was (a rewrite that applies to none of them)
        return (list(ruled) if ruled is not None else list(dicts)), schemas

    def render(self, messages: Sequence[Message], tools: Sequence[JSONDict]) -> str:
        dicts, schemas = self._adapted(messages, tools)
        if self.prefill and prefilled(dicts):
            return self._prefilled(dicts, list(schemas) or None)
        return self.format.render(dicts, list(schemas) or None, add_generation_prompt=True)

    def _prefilled(self, dicts: list[dict[str, Any]], tools: Any) -> str:
        """The prompt llama.cpp's server (b11434) makes of a conversation whose last message is the
        assistant's (``continue_final_message`` "auto", ``common_chat_templates_apply``): the render
        of the messages before it without a generation prompt; then, unless the message is empty,
        the generation prompt, cut where the template's reasoning block opens, that block's opening
        and the message's reasoning, and (unless it holds reasoning only) the block's close and the
        content, as given. Without reasoning markers: the generation prompt and the content."""
        last, before = dicts[-1], dicts[:-1]
        content, reasoning = last.get("content") or "", last.get("reasoning_content") or ""
        try:
            bare = self.format.render(before, tools, add_generation_prompt=False)
            gen = self.format.render(before, tools, add_generation_prompt=True)
        except Exception:  # a template that refuses the messages before it: a turn is opened
            return self.format.render(dicts, tools, add_generation_prompt=True)
        if not content and not reasoning:
            return bare
        gen = gen[len(bare):] if gen.startswith(bare) else gen
        marks = self._reasoning_marks()
        if marks is None:
            return bare + gen + content
        start, end = marks
        cut = gen.find(start)
        tail = (gen if cut < 0 else gen[:cut]) + start + reasoning
        return bare + tail + (end + content if content or not reasoning else "")

    def _reasoning_marks(self) -> tuple[str, str] | None:
        """The template's reasoning block opening and close around a final assistant message's
        reasoning (``<think>\n`` and ``\n</think>\n\n`` for Qwen3), read off its render of one;
        None where it renders no reasoning there."""
        if self._marks is False:
            probe = [{"role": "user", "content": "zq1"},
                     {"role": "assistant", "content": "zq3", "reasoning_content": "zq2"}]
            self._marks = None
            try:
                text = self.format.render(probe, None, add_generation_prompt=False)
            except Exception:  # a template that refuses the probe: no markers
                return None
            r, c = text.find("zq2"), text.find("zq3")
            opening = text.rfind("<", 0, r)
            if 0 <= opening < r < c:
                self._marks = (text[opening:r], text[r + 3:c])
        return self._marks  # type: ignore[return-value]

    def count_prompt(self, messages: Sequence[Message], tools: Sequence[JSONDict]) -> int:
        return self.pieces.count(self.render(messages, tools))

    def count_rendered(self, messages: Sequence[Message], tools: Sequence[JSONDict], *,
                       memo: incremental.RenderMemo | None = None) -> tuple[int, str]:
        """The exact count and the text counted. With a session's ``memo``, a prompt that extends
        the previous one renders only its tail (``core/incremental.py``). A prefill of the last
        message renders whole."""
        if memo is None:
            text = self.render(messages, tools)
            return self.pieces.count(text), text
        dicts, schemas = self._adapted(messages, tools, memo)
        listed = list(schemas) or None
        if self.prefill and prefilled(dicts):
            text = self._prefilled(dicts, listed)
            return incremental.whole(self.windowed, memo, dicts, schemas, text, self.pieces.count(text),
                                     stamp=tuple(f() for f in self._dated))

        def render(part: list[dict[str, Any]], gen: bool) -> str:
            return self.format.render(part, listed, add_generation_prompt=gen)

        return incremental.render(self.windowed, memo, dicts, schemas, render, self.pieces.count,
                                  self.pieces.piece_start, stamp=tuple(f() for f in self._dated))

    def tokens_after(self, text: str, chars: int, *, total: int | None = None) -> int:
        return self.pieces.tokens_after(text, chars, total=total)

    def count_text(self, text: str) -> int:
        return self.pieces.count(text)

    def message_cost(self, message: Message) -> int:
        cost = self._costs.get(message)
        if cost is None:
            cost = self._remember(message, self._isolated_text(message))
        return cost

    def export_cost(self, message: Message) -> tuple[int, list[int]]:
        """The message's cost and the counts of its pieces, to store beside it so that another
        replica can ``import_cost`` them instead of tokenizing the message again."""
        text = self._isolated_text(message)  # rendered once, for the cost and the piece counts
        total, counts = self.pieces.counted(text) if text is not None else (None, [])
        cost = self._costs.get(message)
        if cost is None:
            cost = self._remember(message, text, total)
        return cost, counts

    def import_cost(self, message: Message, cost: int, counts: Sequence[int]) -> None:
        if message in self._costs:  # counted here already (this replica appended it): nothing to learn
            return
        self._costs.put(message, int(cost), message.size)
        text = self._isolated_text(message) if counts else None
        if text is not None:
            self.pieces.seed(text, counts)

    def _isolated_text(self, m: Message) -> str | None:
        dicts = [self._template_dict(m)]
        if self.adapter is not None:
            dicts, _ = self.adapter(dicts, ())
        try:
            return self.format.render(dicts, None, add_generation_prompt=False)
        except Exception:  # templates that reject a lone message (alternation rules)
            return None

    def _remember(self, m: Message, text: str | None, counted: int | None = None) -> int:
        """Cache the cost of ``m`` from its lone render ``text`` (None: the template refuses a lone
        message, so its content and calls plus a turn's framing are counted); ``counted``: the
        count of ``text`` when the caller has it."""
        if text is None:
            raw = m.content + (m.reasoning or "") + "".join(c.name + c.arguments for c in m.tool_calls)
            cost = self.pieces.count(raw) + 8
        else:
            cost = self.pieces.count(text) if counted is None else counted
        return self._costs.put(m, cost, m.size)


_ROLE = operator.attrgetter("role")


def later_system(messages: Sequence[Message]) -> bool:
    """Whether a message after the first is a system message, or a developer message (which
    renders as one), in passes in C over the roles."""
    roles = list(map(_ROLE, itertools.islice(messages, 1, None)))
    return "system" in roles or "developer" in roles


def prefilled(dicts: Sequence[Mapping[str, Any]]) -> bool:
    """Whether llama.cpp's server takes the conversation as a prefill of its last message: that
    message is the assistant's and calls no tool (one that calls a tool is refused, HTTP 400
    "Cannot continue an assistant message that contains tool calls"; it is counted with a new
    turn opened, as before)."""
    return bool(dicts) and dicts[-1].get("role") == "assistant" and not dicts[-1].get("tool_calls")




def _dict_chars(d: Mapping[str, Any]) -> int:
    """Characters of a rewritten message's content (what it holds beyond the message it came from)."""
    content = d.get("content")
    return len(content) if isinstance(content, str) else 1


_wired = IdentityMemo(size=_dict_chars)


class SentMemo:
    """A session's previous ``sent``: its messages with their template dicts, and its rewritten
    dicts with their wire form. A build's prompt is mostly the previous one's messages, and their
    rewrite mostly the same objects (``core/fallback.py``): those the two share from the start,
    by identity, are taken from the previous call instead of looked up one by one, so that a
    build converts only the rest (``bench_service --profiles gemma3``)."""

    __slots__ = ("given", "wired")

    def __init__(self) -> None:
        self.given: tuple[list[Message], list[dict[str, Any]]] = ([], [])
        self.wired: tuple[list[Mapping[str, Any]], list[JSONDict]] = ([], [])


def sent(counter: Any, messages: Sequence[Message], tools: Sequence[JSONDict], *, memo: SentMemo | None = None
         ) -> tuple[list[JSONDict], list[JSONDict]] | None:
    """The request as the counter counted it, in OpenAI wire form (arguments as JSON text), where
    the counter rewrites the conversation for its template (``core/fallback.py``, the template
    rules, mistral-common's placement of system messages); None where it counts the messages as
    given. Every front door returns or forwards this form, so the server renders exactly what was
    counted. The same rewritten message comes back as the same object on later builds. ``memo``:
    the session's previous call; its lists are not to be changed."""
    fn = getattr(counter, "sent", None)
    got = fn(messages, tools, memo) if fn is not None else None
    if got is None:
        return None
    dicts, schemas = got
    if memo is None:
        return [_wired.get((d,), _wire, d) for d in dicts], list(schemas)
    memo.wired, wired = remapped(memo.wired, dicts, lambda d: _wired.get((d,), _wire, d))
    return wired, list(schemas)


def _wire(d: Mapping[str, Any]) -> JSONDict:
    calls = d.get("tool_calls")
    if not calls or all(isinstance(c["function"]["arguments"], str) for c in calls):
        return dict(d)
    return {**d, "tool_calls": [
        {**c, "function": {**c["function"], "arguments": c["function"]["arguments"]
                           if isinstance(c["function"]["arguments"], str)
                           else dumps(c["function"]["arguments"])}} for c in calls]}


def count_rendered(counter: Any, messages: Sequence[Message], tools: Sequence[JSONDict], *,
                   memo: incremental.RenderMemo | None = None) -> tuple[int, str]:
    """``count_prompt`` plus the text it counted; '' for counters whose encoding has no text form
    (mistral-common encodes the request itself). ``memo``: the session's previous render."""
    fn = getattr(counter, "count_rendered", None)
    if fn is not None:
        return fn(messages, tools, memo=memo)  # type: ignore[no-any-return]
    return counter.count_prompt(messages, tools), ""


def shared_prefix(a: str, b: str, known: int = 0) -> int:
    """Length of the longest common prefix of two strings (binary search over C-level compares).
    ``startswith`` compares in place, where a slice would copy (a prompt's text, hundreds of
    kilobytes where it holds a character past Latin-1): a prompt that extends the previous one
    costs one compare and no copy, and a search one slice per step (``bench_instructions``).
    ``known``: how many first characters the caller knows the two share; the search starts there,
    so its slices hold only what follows (a windowed render's text is the previous text up to an
    anchor, then the window: the search's first slices were half the prompt)."""
    n = min(len(a), len(b))
    if a.startswith(b) if len(a) >= len(b) else b.startswith(a):
        return n
    lo, hi = min(known, n), n
    while lo < hi:  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
        mid = (lo + hi + 1) // 2
        if a.startswith(b[lo:mid], lo):
            lo = mid
        else:
            hi = mid - 1
    return lo
