"""Reading a chat-completions body so that a turn costs what its new messages cost.

A client sends the whole history on every turn. The body is split (msgspec, in C) into its
top-level fields and each message's raw JSON, without making Python objects of the messages; a
message whose raw bytes equal those at the same place in the previous request of the same
conversation is taken as it was parsed then, and only the rest is parsed (``bench_proxy``).
Parsing a message is a function of its bytes and its place, so the messages and repairs are
those that parsing the whole body again would give: this cache changes what a turn costs, never
what it does (which line it extends, what it appends: the store decides those, as before).
"""

from __future__ import annotations

import hashlib
import operator
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


@dataclass(frozen=True, slots=True)
class Body:
    """A request body: its fields parsed, but ``messages`` as each element's raw JSON (``raws``)
    where it was split; else (``raws`` None) the whole body parsed as it always was."""

    fields: dict[str, Any]
    raws: list[msgspec.Raw] | None
    size: int


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
            fields: dict[str, Any] = {k: loads(v) for k, v in top.items() if k != "messages"}
            fields["messages"] = raws
            return Body(fields, raws, len(data))
    except (ValueError, RecursionError):
        pass
    return Body(parse(data), None, len(data))


@dataclass(frozen=True, slots=True)
class _Seen:
    raws: list[msgspec.Raw]
    messages: tuple[Message, ...]
    repairs: tuple[Repair, ...]

    def common(self, raws: Sequence[msgspec.Raw]) -> int:
        """How many leading messages ``raws`` shares with this request, byte for byte."""
        equal = list(map(operator.eq, raws, self.raws))  # in C, each a memcmp
        return equal.index(False) if False in equal else len(equal)


class Recent:
    """The latest request of each recent conversation: its raw messages and what they parsed to.
    At most ``lines`` conversations and ``max_bytes`` are kept (twice each body: its bytes and
    the messages parsed from them), the least recently used dropped first."""

    def __init__(self, *, lines: int, max_bytes: int) -> None:
        self._seen: Bounded[str, _Seen] = Bounded(entries=lines, max_bytes=max_bytes)

    def __len__(self) -> int:
        return len(self._seen)

    @property
    def size(self) -> int:
        """Bytes held, as counted against ``max_bytes``."""
        return self._seen.size

    @property
    def max_bytes(self) -> int:
        return self._seen.max_bytes

    def request(self, body: Body, *, session: str = "", extra_tools: Sequence[Any] = ()) -> Request:
        """The request of ``body``; its messages read again only past what this conversation's
        previous request held byte for byte. ``session``: the client's session header."""
        if body.raws is None:
            return Request.of(body.fields, extra_tools=extra_tools, size=body.size)
        Request.check(body.fields)
        key = _key(session, body.raws)
        seen = self._seen.get(key)
        shared = seen.common(body.raws) if seen is not None else 0
        messages = list(seen.messages[:shared]) if seen is not None else []
        repairs = [r for r in seen.repairs if r.index < shared] if seen is not None else []
        for i in range(shared, len(body.raws)):
            try:
                value = loads(body.raws[i])
            except (ValueError, RecursionError) as exc:
                raise not_json(exc) from exc
            messages.append(from_openai(value, index=i, repairs=repairs))
        request = Request.made(body.fields, messages, repairs, extra_tools=extra_tools, size=body.size)
        self._seen.put(key, _Seen(body.raws, tuple(messages), tuple(repairs)), 2 * body.size)
        return request


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
