"""Reading a chat-completions body so that a turn costs what its new messages cost.

A client sends the whole history on every turn. Most turns, the body begins with the previous
request of the same conversation byte for byte, up to the end of its last message: that is
checked with one comparison of bytes, and only the rest (the new messages and the fields after
them) is read (``Recent.read``). Otherwise the body is split (msgspec, in C) into its top-level
fields and each message's raw JSON, without making Python objects of the messages; a message
whose raw bytes equal those at the same place in the previous request is taken as it was parsed
then, and only the rest is parsed. Reading the whole body, even in C, grew with the history: at
1M-2M chars it was a third of the proxy's time in a turn (``bench_proxy --growth``).
Parsing a message is a function of its bytes and its place, so the messages and repairs are
those that parsing the whole body again would give: this cache changes what a turn costs, never
what it does (which line it extends, what it appends: the store decides those, as before).
"""

from __future__ import annotations

import hashlib
import operator
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from budgeter.core import jsonargs
from budgeter.core.messages import Message, Repair, from_openai
from budgeter.errors import InvalidInput
from budgeter.proxy.memo import Bounded
from budgeter.proxy.turns import Request

_FIELDS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ELEMENTS = msgspec.json.Decoder(list[msgspec.Raw])
_VALUE = msgspec.json.Decoder()


def loads(data: bytes | str | msgspec.Raw) -> Any:
    """``jsonargs.loads(data)``, read by msgspec: it reads an integer past 64 bits exactly, where
    orjson makes it a float that ``jsonargs.loads`` then walks the whole value to catch; the walk
    is two thirds of reading a request's tools, a new message or a streamed chunk (``bench_proxy``).
    What msgspec refuses (NaN, 1e400, a lone surrogate escape, a nesting it will not follow) is
    read, or refused, by ``jsonargs.loads`` as before."""
    try:
        return _VALUE.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return jsonargs.loads(bytes(data) if isinstance(data, msgspec.Raw) else data)


_HEAD = b'{"messages":['
_SPACE = b" \t\r\n"
PROBE = 64
"""Bytes looked at where the body and its second message begin, to find the conversation it may
continue when the client names none (``X-Budgeter-Session``): its first two messages name it."""
CANDIDATES = 16
"""Conversations that begin with the same bytes there tried, most recent first: more of them at
once read whole, as before."""
STARTS = 8
"""Places where the second message begins tried for the same first bytes (one per system
prompt and fields before the messages)."""
Probe = tuple[bytes, int, bytes]
"""(the body's first ``PROBE`` bytes, where its second message begins, that message's first bytes)."""
Field = tuple[str, msgspec.Raw, Any]
"""A field other than ``messages``: its name, raw JSON and value."""


@dataclass(frozen=True, slots=True)
class Body:
    """A request body: its fields parsed, but ``messages`` as each element's raw JSON (``raws``)
    where it was split; else (``raws`` None) the whole body parsed as it always was."""

    fields: dict[str, Any]
    raws: list[msgspec.Raw] | None
    size: int
    data: bytes = b""
    array: msgspec.Raw | None = None
    """The messages array's raw JSON, where split."""
    values: tuple[Field, ...] = ()
    """The other fields, where split."""


def not_json(exc: Exception) -> InvalidInput:
    return InvalidInput(f"the request body is not JSON: {exc}", reason="INVALID_JSON")


def parse(data: bytes) -> dict[str, Any]:
    """The whole body as a dict (``jsonargs.loads``)."""
    try:
        body = jsonargs.loads(data)
    except (ValueError, RecursionError) as exc:
        raise not_json(exc) from exc
    if not isinstance(body, dict):
        raise InvalidInput("the request body must be a JSON object", reason="INVALID_JSON")
    return body


def split(data: bytes) -> Body:
    """``data`` split at its messages. What msgspec does not read (a lone surrogate escape, NaN,
    a body that is not an object with an array of messages) is read whole by ``parse``, which
    says what is wrong with it, if anything."""
    try:
        top = _FIELDS.decode(data)
        raws = _ELEMENTS.decode(top["messages"]) if "messages" in top else None
        if raws is not None:
            values = tuple((k, v, loads(v)) for k, v in top.items() if k != "messages")
            fields: dict[str, Any] = {k: value for k, _, value in values}
            fields["messages"] = raws
            return Body(fields, raws, len(data), data, top["messages"], values)
    except (ValueError, RecursionError):
        pass
    return Body(parse(data), None, len(data))


@dataclass(frozen=True, slots=True)
class _Seen:
    """A conversation's latest request: its body, and what its messages parsed to."""

    data: bytes
    end: int
    """``data[:end]`` is the body up to the end of its last message, every field before the
    messages in it (0: not known; a next request is split whole)."""
    before: tuple[tuple[str, msgspec.Raw], ...]
    """The fields before the messages, as raw JSON."""
    messages: tuple[Message, ...]
    repairs: tuple[Repair, ...]
    elements: list[msgspec.Raw] | None = None
    """Each message's raw JSON, where the body was ``split`` whole (views of ``data``)."""
    second: int = 0
    """Where the second message begins in ``data`` (0: not known)."""
    values: tuple[Field, ...] = ()
    """The fields other than ``messages``, each read once: a next request whose field has the same
    raw JSON takes its value as it is (the tools, re-read every turn, were most of what reading a
    continued body cost; ``bench_proxy --growth``)."""

    def probe(self) -> Probe | None:
        """Where a next body of this conversation is looked for when no session header names it;
        None for a request of fewer than two messages, or where its second one begins is not known."""
        if len(self.messages) < 2 or not self.second or self.end < PROBE:
            return None
        return self.data[:PROBE], self.second, self.data[self.second:min(self.second + PROBE, self.end)]

    def raws(self) -> list[msgspec.Raw]:
        """Each message's raw JSON; read again from the body where it was not split whole, for a
        request that does not continue this one (an edit, a regenerate of an earlier turn)."""
        if self.elements is not None:
            return self.elements
        try:  # (it was read, in two parts: it reads whole)
            return _ELEMENTS.decode(_FIELDS.decode(self.data)["messages"])
        except (ValueError, RecursionError):  # then nothing is taken from it
            return []

    def rest(self, data: bytes) -> bytes | None:
        """When ``data`` continues this request (the same bytes up to the end of its last
        message, then a comma or the array's end): the rest of ``data`` as a JSON object whose
        ``messages`` are the new ones, followed by the fields after them. Else None."""
        end = self.end
        if not end or not data.startswith(memoryview(self.data)[:end]):
            return None
        while end < len(data) and data[end] in _SPACE:
            end += 1
        if data[end:end + 1] == b",":
            return _HEAD + data[end + 1:]
        return _HEAD + data[end:] if data[end:end + 1] == b"]" else None


def _layout(data: bytes, array: msgspec.Raw, raws: Sequence[msgspec.Raw]
            ) -> tuple[int, tuple[tuple[str, msgspec.Raw], ...], int]:
    """(``_Seen.end``, ``_Seen.before``, ``_Seen.second``) of a body split whole: found where its
    messages array stands once only in it (0 otherwise, or when it holds no message)."""
    start = data.find(array)
    if not raws or start < 0 or data.find(array, start + 1) >= 0:
        return 0, (), 0
    try:  # the fields before the array, duplicates as reading the whole body takes them
        head = _FIELDS.decode(data[:start] + b"null}")
    except (ValueError, RecursionError):
        return 0, (), 0
    second = data.find(raws[1], start + len(raws[0])) if len(raws) > 1 else 0
    return _last_end(data, start + len(array) - 1), tuple(
        (k, v.copy()) for k, v in head.items() if k != "messages"), max(second, 0)


def _last_end(data: bytes, close: int) -> int:
    """Where the last element ends before the array's closing bracket at ``close``."""
    while data[close - 1] in _SPACE:
        close -= 1
    return close


class Recent:
    """The latest request of each recent conversation: its body and what its messages parsed to.
    At most ``lines`` conversations and ``max_bytes`` are kept (twice each body: its bytes and
    the messages parsed from them), the least recently used dropped first."""

    def __init__(self, *, lines: int, max_bytes: int) -> None:
        self._seen: Bounded[str, _Seen] = Bounded(entries=lines, max_bytes=max_bytes)
        self._probes: dict[Probe, list[str]] = {}
        """``_Seen.probe`` -> the conversations (keys of ``_seen``, named by their first two
        messages) that began so, most recent first."""
        self._starts: dict[bytes, list[tuple[int, int]]] = {}
        """A body's first ``PROBE`` bytes -> where the second message begins and how many of its
        bytes the probes hold, for the probes held, most recent first."""
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._seen)

    @property
    def size(self) -> int:
        """Bytes held, as counted against ``max_bytes``."""
        return self._seen.size

    @property
    def max_bytes(self) -> int:
        return self._seen.max_bytes

    def read(self, data: bytes, *, session: str = "", extra_tools: Sequence[Any] = ()
             ) -> tuple[dict[str, Any], Request, bool]:
        """The body's fields, its request, and whether it was read from where its conversation's
        previous request ended (else whole). ``messages`` in the fields only keeps its place (raw
        JSON, of the new messages only where the body went on): the request holds the messages.
        ``session``: the client's session header."""
        found = self._continued(data, session)
        if found is not None:
            try:
                return (*self._extend(*found, data, extra_tools), True)
            except Exception:  # read whole below, which refuses the body as before if it is bad
                pass
        body = split(data)
        return body.fields, self.request(body, session=session, extra_tools=extra_tools), False

    def _continued(self, data: bytes, session: str) -> tuple[str, _Seen, bytes] | None:
        """The conversation ``data`` continues, with ``_Seen.rest``: the one its session header
        names, else one of those that began with its first bytes (``PROBE``)."""
        if session:
            keys = ["h" + session]
        else:
            head = data[:PROBE]
            with self._lock:
                keys = [k for second, n in self._starts.get(head, ())
                        for k in self._probes.get((head, second, data[second:second + n]), ())]
        for key in keys:
            seen = self._seen.peek(key)
            rest = seen.rest(data) if seen is not None else None
            if seen is not None and rest is not None:
                return key, seen, rest
        return None

    def _extend(self, key: str, seen: _Seen, rest: bytes, data: bytes,
                extra_tools: Sequence[Any]) -> tuple[dict[str, Any], Request]:
        """The request of a body that continues ``seen``: its new messages are read from
        ``rest``, which also holds the fields after them."""
        top = _FIELDS.decode(rest)
        array = top["messages"]
        if not rest.startswith(array, len(_HEAD) - 1):  # a second "messages" after: read whole
            raise ValueError("messages twice")
        raws = _ELEMENTS.decode(array)
        values = _values(seen.before, top, seen.values)
        fields: dict[str, Any] = {k: value for k, _, value in values}
        fields["messages"] = raws
        Request.check(fields)
        messages, repairs = list(seen.messages), list(seen.repairs)
        for i, raw in enumerate(raws, start=len(messages)):
            messages.append(from_openai(loads(raw), index=i, repairs=repairs))
        request = Request.made(fields, messages, repairs, extra_tools=extra_tools, size=len(data))
        # the array's closing bracket, from its place in ``rest`` (whose "[" is the array's)
        end = _last_end(data, len(data) - len(rest) + len(_HEAD) - 2 + len(array)) if raws else seen.end
        self._keep(key, _Seen(data, end, seen.before, tuple(messages), tuple(repairs), None, seen.second,
                              values), len(data))
        return fields, request

    def request(self, body: Body, *, session: str = "", extra_tools: Sequence[Any] = ()) -> Request:
        """The request of ``body``; its messages read again only past what this conversation's
        previous request held byte for byte. ``session``: the client's session header."""
        if body.raws is None:
            return Request.of(body.fields, extra_tools=extra_tools, size=body.size)
        Request.check(body.fields)
        key = _key(session, body.raws)
        seen = self._seen.get(key)
        shared = _common(body.raws, seen.raws()) if seen is not None else 0
        messages = list(seen.messages[:shared]) if seen is not None else []
        repairs = [r for r in seen.repairs if r.index < shared] if seen is not None else []
        for i in range(shared, len(body.raws)):
            try:
                value = loads(body.raws[i])
            except (ValueError, RecursionError) as exc:
                raise not_json(exc) from exc
            messages.append(from_openai(value, index=i, repairs=repairs))
        request = Request.made(body.fields, messages, repairs, extra_tools=extra_tools, size=body.size)
        assert body.array is not None
        end, before, second = _layout(body.data, body.array, body.raws)
        self._keep(key, _Seen(body.data, end, before, tuple(messages), tuple(repairs), body.raws, second,
                              body.values), body.size)
        return request

    def _keep(self, key: str, seen: _Seen, size: int) -> None:
        self._seen.put(key, seen, 2 * size)
        probe = seen.probe() if key[0] == "d" else None  # (else named by the client)
        if probe is None:
            return
        head, second, first = probe
        with self._lock:
            _first(self._starts.setdefault(head, []), (second, len(first)), STARTS)
            _first(self._probes.setdefault(probe, []), key, CANDIDATES)
            if len(self._probes) > 2 * self._seen.entries:  # drop the conversations let go
                self._probes = {p: live for p, ks in self._probes.items()
                                if (live := [k for k in ks if self._seen.peek(k) is not None])}
                self._starts = {}
                for h, at, text in self._probes:
                    _first(self._starts.setdefault(h, []), (at, len(text)), STARTS)


def _values(before: Sequence[tuple[str, msgspec.Raw]], top: dict[str, msgspec.Raw],
            known: Sequence[Field]) -> tuple[Field, ...]:
    """The fields of a continued body, ``before`` its messages and in ``top`` after them, in that
    order (later duplicates win, as when read whole), each read again only where its raw JSON is
    not one ``known`` from the previous request. The values are shared with that request's: no
    reader changes them (the upstream body is a new dict over them, ``Proxy._upstream_body``)."""
    old = {field[0]: field for field in known}
    out = []
    for k, raw in (*before, *((k, v) for k, v in top.items() if k != "messages")):
        was = old.get(k)
        out.append(was if was is not None and was[1] == raw else (k, raw.copy(), loads(raw)))
    return tuple(out)


def _first(items: list[Any], item: Any, limit: int) -> None:
    """Put ``item`` first in ``items``, keeping at most ``limit``."""
    if items[:1] != [item]:
        items[:] = [item, *(i for i in items if i != item)][:limit]


def _common(raws: Sequence[msgspec.Raw], seen: Sequence[msgspec.Raw]) -> int:
    """How many leading messages two requests share, byte for byte."""
    equal = list(map(operator.eq, raws, seen))  # in C, each a memcmp
    return equal.index(False) if False in equal else len(equal)


def _key(session: str, raws: Sequence[msgspec.Raw]) -> str:
    """The conversation: the session header, else its first two messages as sent (a guess, like
    the derived session id: two conversations that share them only share a cache entry)."""
    if session:
        return "h" + session
    digest = hashlib.blake2b(digest_size=16)
    for raw in raws[:2]:
        digest.update(memoryview(raw))
        digest.update(b"\x00")
    return "d" + digest.hexdigest()
