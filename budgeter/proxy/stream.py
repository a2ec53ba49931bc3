"""The upstream's reply: passed through byte for byte, with a parsed copy for the history.

``tee`` forwards the upstream's body byte for byte, cut only where events end, and feeds the same
bytes to an event-stream parser (``sse.py``); events are never re-synthesised. ``Reply`` accumulates what the parsed
copy says (content, reasoning, tool calls by index, finish_reason, usage) into the assistant
message that is appended to the session.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from budgeter.core.messages import Message, ToolCall
from budgeter.proxy.intake import loads
from budgeter.proxy.sse import SSEParser


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class Reply:
    """The first choice of a reply, accumulated from a response body or from stream chunks."""

    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    chunks: int = 0

    @classmethod
    def of_body(cls, body: dict[str, Any], choice: dict[str, Any]) -> Reply:
        """The reply of a body ``completion`` checked, and its choice 0."""
        reply = cls()
        reply._usage(body)
        reply._delta(choice["message"])
        reply._finish(choice)
        return reply

    def add_chunk(self, data: Any) -> None:
        if not isinstance(data, dict):
            return
        self.chunks += 1
        self._usage(data)
        choice = _first_choice(data)
        if choice is not None:
            self._delta(choice.get("delta"))
            self._finish(choice)

    def _usage(self, data: dict[str, Any]) -> None:
        if isinstance(data.get("usage"), dict):
            self.usage = data["usage"]

    def _finish(self, choice: dict[str, Any]) -> None:
        if isinstance(choice.get("finish_reason"), str):
            self.finish_reason = choice["finish_reason"]

    def _delta(self, delta: Any) -> None:
        if not isinstance(delta, dict):
            return
        if isinstance(delta.get("content"), str):
            self.content.append(delta["content"])
        reasoning = delta.get("reasoning_content", delta.get("reasoning"))
        if isinstance(reasoning, str):
            self.reasoning.append(reasoning)
        for n, raw in enumerate(delta.get("tool_calls") or ()):
            if isinstance(raw, dict):
                self._call(raw, n)

    def _call(self, raw: dict[str, Any], n: int) -> None:
        index = raw.get("index", n)
        call = self.calls.setdefault(index if isinstance(index, int) else n, _Call())
        if isinstance(raw.get("id"), str) and raw["id"]:
            call.id = raw["id"]
        fn: dict[str, Any] = raw["function"] if isinstance(raw.get("function"), dict) else {}
        if isinstance(fn.get("name"), str) and fn["name"]:
            call.name = fn["name"]
        arguments = fn.get("arguments")
        if isinstance(arguments, str):
            call.arguments.append(arguments)
        elif isinstance(arguments, dict):  # some servers send objects in whole messages
            call.arguments.append(json.dumps(arguments, ensure_ascii=False, separators=(",", ":")))

    @property
    def prompt_tokens(self) -> int | None:
        value = (self.usage or {}).get("prompt_tokens")
        return value if isinstance(value, int) else None

    def message(self) -> Message:
        calls = tuple(ToolCall(c.id, c.name, "".join(c.arguments))
                      for _, c in sorted(self.calls.items()))
        return Message("assistant", "".join(self.content), calls,
                       reasoning="".join(self.reasoning) if self.reasoning else None,
                       finish_reason=self.finish_reason)


class NotACompletion(ValueError):
    """An upstream's 2xx body that is no chat completion (HTML, ``[]``, JSON without choices)."""


def completion(content: bytes) -> Reply:
    """The reply in a chat-completion body: a JSON object whose choice 0 holds a message."""
    try:
        body = loads(content)
    except (ValueError, RecursionError) as exc:
        raise NotACompletion(f"{len(content)} bytes that are not JSON") from exc
    choice = _first_choice(body) if isinstance(body, dict) else None
    if choice is None or not isinstance(choice.get("message"), dict):
        raise NotACompletion(f"JSON ({type(body).__name__}) without a message in choices[0]")
    return Reply.of_body(body, choice)


def _first_choice(data: dict[str, Any]) -> dict[str, Any] | None:
    choices = data.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            return choice
    return None


def parse_data(data: str) -> Any:
    if data == "[DONE]":
        return None
    try:
        return loads(data)
    except (ValueError, RecursionError):
        return None  # not ours to judge: the client gets the bytes as they were


class EventEnds:
    """Bytes in, the bytes up to the last blank line seen out: the rest of an event waits for its
    end. What went out thus always ends between events, so an error event the proxy adds after it
    (over ``max_reply_bytes``) is read as its own, never glued to half an upstream event.

    A blank line is two line ends in a row, ``\r\n`` being one: exactly where ``\n\n``, ``\n\r``
    or ``\r\r`` occurs (a cut after ``\n\r`` takes the ``\n`` after it, when it has come, as that
    ``\r\n``'s end; what went out ends with a blank line either way, and the bytes as a whole are
    unchanged)."""

    def __init__(self) -> None:
        self._held: list[bytes] = []
        """The bytes since the last blank line, as they came: an event read in a thousand pieces is
        joined once, not copied again with each piece."""

    def feed(self, chunk: bytes) -> bytes:
        if not self._held and chunk.endswith(b"\n\n"):  # (as servers write: one or more whole events)
            return chunk
        if not chunk:
            return b""
        before = self._held[-1][-1:] if self._held else b""  # the held bytes hold no blank line
        data = before + chunk
        at = max(data.rfind(b"\n\n"), data.rfind(b"\n\r"), data.rfind(b"\r\r"))
        if at < 0:
            self._held.append(chunk)
            return b""
        end = at + 2 - len(before)  # (in ``chunk``: at least 1)
        if data[at + 1] == 13 and chunk[end:end + 1] == b"\n":  # a blank line's \r\n goes out whole
            end += 1
        out = b"".join([*self._held, chunk[:end]])
        self._held = [chunk[end:]] if end < len(chunk) else []
        return out

    def close(self) -> bytes:
        """What the upstream sent after its last blank line (a stream without a final one)."""
        rest, self._held = b"".join(self._held), []
        return rest


async def tee(chunks: AsyncIterator[bytes], on_event: Callable[[str], None]) -> AsyncIterator[bytes]:
    """The upstream's raw body, given out as events complete (``EventEnds``), and a copy run
    through the event-stream parser. ``on_event`` sees the data of the events a chunk completes
    before their bytes are given out, and all of them before the iteration ends."""
    parser, ends = SSEParser(), EventEnds()
    async for chunk in chunks:
        for data in parser.feed(chunk):
            on_event(data)
        if piece := ends.feed(chunk):
            yield piece
    for data in parser.close():
        on_event(data)
    if rest := ends.close():
        yield rest
