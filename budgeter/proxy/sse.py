"""A server-sent-events parser fed raw bytes: the copy of the upstream's stream the proxy reads.

The line and event decoding is httpx-sse's (``httpx_sse/_decoders.py``, Copyright Florimond
Manca, MIT licence), which the proxy used through an ``httpx.Response`` wrapped around the chunks;
the bytes are decoded here as httpx decoded them (UTF-8, incrementally, errors replaced). Only
``\\r\\n``, ``\\r`` and ``\\n`` end a line (the SSE spec), a ``\\r`` at a chunk's end waits for the
next chunk, and an event is dispatched at a blank line
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation).
Only an event's data is kept: the proxy reads nothing else (``event``, ``id`` and ``retry`` lines
are skipped, and an event without data is none).
"""

from __future__ import annotations

import codecs


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
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        if ends_line:
            lines.pop()
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


class SSEParser:
    """``feed(chunk)`` returns the data of the events that chunk completed; ``close()`` of those the
    end completes."""

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lines = _Lines()
        self._data: list[str] = []  # of the event being read

    def feed(self, chunk: bytes) -> list[str]:
        text = self._text.decode(chunk)
        return self._decode(self._lines.decode(text)) if text else []

    def close(self) -> list[str]:
        text = self._text.decode(b"", final=True)
        lines = (self._lines.decode(text) if text else []) + self._lines.flush()
        return self._decode(lines)

    def _decode(self, lines: list[str]) -> list[str]:
        """Lines in, the data of the events they complete out (httpx-sse's ``SSEDecoder``)."""
        events = []
        for line in lines:
            name, _, value = line.partition(":")
            if name == "data":
                self._data.append(value.removeprefix(" "))
            elif not line and self._data:
                events.append("\n".join(self._data))
                self._data = []
        return events
