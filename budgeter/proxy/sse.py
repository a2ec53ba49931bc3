"""A server-sent-events parser fed raw bytes: the copy of the upstream's stream the proxy reads.

The line and event decoding is httpx-sse's (``httpx_sse/_decoders.py``, Copyright Florimond
Manca, MIT licence), which the proxy used through an ``httpx.Response`` wrapped around the chunks;
the bytes are decoded here as httpx decoded them (UTF-8, incrementally, errors replaced). Only
``\\r\\n``, ``\\r`` and ``\\n`` end a line (the SSE spec), a ``\\r`` at a chunk's end waits for the
next chunk, and an event is dispatched at a blank line
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation).
"""

from __future__ import annotations

import codecs
import contextlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    event: str = "message"
    data: str = ""
    id: str = ""
    retry: int | None = None


def _split(text: str) -> list[str]:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if text[-1] in "\r\n":
        lines.pop()
    return lines


class _Lines:
    """Text in, complete lines out (httpx-sse's ``SSELineDecoder``)."""

    def __init__(self) -> None:
        self.buffer: list[str] = []
        self.trailing_cr = False

    def decode(self, text: str) -> list[str]:
        if self.trailing_cr:
            text, self.trailing_cr = "\r" + text, False
        if text.endswith("\r"):
            text, self.trailing_cr = text[:-1], True
        if not text:
            return []
        ends_line = text[-1] in "\r\n"
        lines = _split(text)
        if len(lines) == 1 and not ends_line:
            self.buffer.append(lines[0])
            return []
        if self.buffer:
            lines[0] = "".join(self.buffer) + lines[0]
            self.buffer = []
        if not ends_line:
            self.buffer = [lines.pop()]
        return lines

    def flush(self) -> list[str]:
        if not self.buffer and not self.trailing_cr:
            return []
        lines, self.buffer, self.trailing_cr = ["".join(self.buffer)], [], False
        return lines


class _Events:
    """Lines in, events out (httpx-sse's ``SSEDecoder``)."""

    def __init__(self) -> None:
        self.event = ""
        self.data: list[str] = []
        self.last_id = ""
        self.retry: int | None = None

    def decode(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self.event = value
        elif name == "data":
            self.data.append(value)
        elif name == "id" and "\0" not in value:
            self.last_id = value
        elif name == "retry":
            with contextlib.suppress(ValueError):
                self.retry = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        if not self.event and not self.data and not self.last_id and self.retry is None:
            return None
        sse = ServerSentEvent(self.event or "message", "\n".join(self.data), self.last_id, self.retry)
        self.event, self.data, self.retry = "", [], None  # the last event id stays (the spec)
        return sse


class SSEParser:
    """``feed(chunk)`` returns the events that chunk completed; ``close()`` those the end completes."""

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lines = _Lines()
        self._events = _Events()

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        text = self._text.decode(chunk)
        return self._decode(self._lines.decode(text)) if text else []

    def close(self) -> list[ServerSentEvent]:
        text = self._text.decode(b"", final=True)
        lines = (self._lines.decode(text) if text else []) + self._lines.flush()
        return self._decode(lines)

    def _decode(self, lines: list[str]) -> list[ServerSentEvent]:
        return [sse for sse in map(self._events.decode, lines) if sse is not None]
