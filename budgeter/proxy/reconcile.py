"""Which stored session a chat-completions request belongs to, and what it adds.

The rule (README, "The proxy in detail"):

- The session is named by the ``X-Budgeter-Session`` header; without one its id is derived from
  the request's tools and its messages up to the first user message (``px-<hash>``), so the same
  conversation maps to the same id on every request and every replica.
- A request *extends* a session when the stored history is a prefix of its messages (compared by
  role, content, tool calls and tool_call_id; arguments as parsed JSON) and its tools are the
  session's. The new suffix is appended once: the append carries a request id derived from the
  session, the position and the suffix, so a retried request appends nothing twice.
- Anything else diverges (an edited, trimmed or regenerated history, other tools). Such a request
  goes to a *fork* whose id is the root id plus a hash of the request's tools and its messages up
  to the first one that differs (``<root>.<hash>``); a fork is created holding the request's
  messages, so the two histories never mix, and the next request of either line finds its own.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from budgeter.core.jsonargs import dumps_text
from budgeter.core.messages import Message, ToolCall
from budgeter.core.typing import JSONDict
from budgeter.proxy.memo import Bounded

MAX_FORKS = 8


@dataclass(frozen=True, slots=True)
class Match:
    """How a request's messages relate to a stored history."""

    extends: bool
    diverges_at: int
    """The first index where they differ (== len(request) when the request is a strict prefix)."""


def _args_key(arguments: str) -> Any:
    try:
        return ("json", json.loads(arguments))
    except (ValueError, RecursionError):
        return ("text", arguments)


def _same_call(a: ToolCall, b: ToolCall) -> bool:
    if a.id != b.id or a.name != b.name:
        return False
    return a.arguments == b.arguments or _args_key(a.arguments) == _args_key(b.arguments)


def same(a: Message, b: Message) -> bool:
    """Equal as far as a client echoing a history back is concerned: reasoning, finish_reason and
    status (which clients drop or never had) do not count; arguments compare as parsed JSON."""
    return (a.role == b.role and a.content == b.content and a.tool_call_id == b.tool_call_id
            and len(a.tool_calls) == len(b.tool_calls)
            and all(_same_call(x, y) for x, y in zip(a.tool_calls, b.tool_calls, strict=True)))


@dataclass(frozen=True, slots=True)
class Seen:
    """A stored line and a request found ``same`` message by message (``match``): the same pairs
    of objects need no comparing again (messages are immutable)."""

    stored: tuple[Message, ...]
    request: tuple[Message, ...]


def match(stored: Sequence[Message], request: Sequence[Message], *, same_tools: bool = True,
          seen: Seen | None = None) -> Match:
    if not same_tools:
        return Match(False, 0)
    # passed over in C: the pairs ``seen`` found same, and messages that are the stored objects
    # themselves (parsed once, ``intake``); the client's echo of each reply is compared once
    start = _seen_before(stored, request, seen) if seen is not None else 0
    differ = map(operator.is_not, itertools.islice(stored, start, None), itertools.islice(request, start, None))
    for i in itertools.compress(range(start, min(len(stored), len(request))), differ):
        if not same(stored[i], request[i]):
            return Match(False, i)
    if len(stored) > len(request):
        return Match(False, len(request))
    return Match(True, len(stored))


def _seen_before(stored: Sequence[Message], request: Sequence[Message], seen: Seen) -> int:
    """How many leading pairs are the pairs ``seen`` compared (the same objects, or equal ones,
    which ``same`` answers alike)."""
    n = min(len(stored), len(request), len(seen.stored), len(seen.request))
    if tuple(stored[:n]) == seen.stored[:n] and tuple(request[:n]) == seen.request[:n]:
        return n  # most turns: each pair the same objects again, told in one pass in C (``bench_proxy``)
    both = list(map(operator.and_, map(operator.is_, stored, seen.stored), map(operator.is_, request, seen.request)))
    return both.index(False) if False in both else len(both)


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


def _key(m: Message) -> str:
    calls = [[c.id, c.name, _args_key(c.arguments)] for c in m.tool_calls]
    return dumps_text([m.role, m.content, calls, m.tool_call_id])


def tools_key(tools: Sequence[JSONDict]) -> str:
    return json.dumps(list(tools), sort_keys=True, ensure_ascii=False)


def derived_id(messages: Sequence[Message], tools: Sequence[JSONDict]) -> str:
    """``px-<hash>`` of the tools and the messages up to and including the first user message."""
    head = []
    for m in messages:
        head.append(_key(m))
        if m.role == "user":
            break
    return "px-" + _digest(tools_key(tools), *head)[:24]


def fork_id(root: str, messages: Sequence[Message], tools: Sequence[JSONDict], at: Match) -> str:
    """The fork for a request that diverges from ``root``'s line at ``at.diverges_at``."""
    upto = [_key(m) for m in messages[:at.diverges_at + 1]]
    if at.diverges_at >= len(messages):
        upto.append("<end>")
    return f"{root[:100]}.{_digest(tools_key(tools), *upto)[:16]}"


class ForkIds:
    """``fork_id``, remembered for the very message objects it hashed (messages are immutable): a
    conversation that goes on in a fork made deep in its history hashes that history once, not on
    every turn. Each entry is counted as ``size`` (twice the request's body) in ``memo``."""

    def __init__(self, memo: Bounded[tuple[str, int, bool], tuple[tuple[Message, ...], list[JSONDict], str]]) -> None:
        self._memo = memo

    def __call__(self, root: str, messages: Sequence[Message], tools: Sequence[JSONDict], at: Match, *,
                 size: int = 0) -> str:
        upto = tuple(messages[:at.diverges_at + 1])
        key = (root, len(upto), at.diverges_at >= len(messages))
        hit = self._memo.get(key)
        if hit is not None and hit[1] == list(tools) and all(map(operator.is_, upto, hit[0])):
            return hit[2]
        made = fork_id(root, messages, tools, at)
        self._memo.put(key, (upto, list(tools), made), 2 * size)
        return made


def request_id(session: str, position: int, suffix: Sequence[Message], *, kind: str = "turn") -> str:
    """Idempotency key of an append: the same suffix at the same place is the same append."""
    return f"px-{kind}-" + _digest(session, str(position), *map(_key, suffix))[:32]
