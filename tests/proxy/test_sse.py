"""budgeter/proxy/sse.py parses an event stream, however it is cut into chunks, as httpx-sse did
(the proxy's parser before; httpx-sse stays in the test extra for this comparison): the same data,
events without data aside (the proxy reads only the data of events)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from budgeter.proxy.sse import SSEParser
from budgeter.proxy.stream import EventEnds

PIECES = ["data: ", "data:", "event: delta", "id: 7", "id: a\0b", "retry: 30", "retry: x", ": comment",
          "{\"a\": 1}", "[DONE]", "é", "\n", "\r", "\r\n", "\n\n", "x"]


def ours(chunks: list[bytes]) -> list[str]:
    parser = SSEParser()
    return [d for chunk in chunks for d in parser.feed(chunk) if d] + [d for d in parser.close() if d]


def theirs(chunks: list[bytes]) -> list[str]:
    httpx = pytest.importorskip("httpx")
    httpx_sse = pytest.importorskip("httpx_sse")

    async def stream():  # type: ignore[no-untyped-def]
        for chunk in chunks:
            yield chunk

    async def run() -> list[str]:
        response = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream())
        return [e.data async for e in httpx_sse.EventSource(response).aiter_sse() if e.data]

    return asyncio.run(run())


def cut(body: bytes, points: list[int]) -> list[bytes]:
    edges = sorted({0, len(body), *(p % (len(body) + 1) for p in points)})
    return [body[a:b] for a, b in zip(edges, edges[1:], strict=False) if b > a]


@given(st.lists(st.sampled_from(PIECES), max_size=30), st.lists(st.integers(0, 10_000), max_size=8))
def test_same_events_as_httpx_sse(pieces, points):
    chunks = cut("".join(pieces).encode(), points)
    assert ours(chunks) == theirs(chunks)


ERROR = b'data: {"error": {"code": "UPSTREAM_TOO_LARGE"}}\n\n'


@given(st.lists(st.sampled_from(PIECES), max_size=30), st.lists(st.integers(0, 10_000), max_size=8))
def test_an_event_added_after_any_relayed_piece_is_read_as_its_own(pieces, points):
    """What the proxy relays is the body unchanged, cut only between events: an error event added
    after any piece (a stream over max_reply_bytes) is read as one more event, after those relayed
    whole, never glued to the half of an event the upstream had not finished."""
    body = "".join(pieces).encode()
    ends, relayed = EventEnds(), b""
    for chunk in cut(body, points):
        relayed += ends.feed(chunk)
        assert theirs([relayed, ERROR]) == theirs([relayed]) + [ERROR[6:-2].decode()]
    assert relayed + ends.close() == body


def test_an_event_cut_mid_value_waits_for_its_end():
    ends = EventEnds()
    assert ends.feed(b'data: {"a": 1}\n\ndata: {"id":') == b'data: {"a": 1}\n\n'
    assert ends.feed(b' "c"}\r\n') == b""
    assert ends.feed(b'\r\ndata: [DONE]\n\n') == b'data: {"id": "c"}\r\n\r\ndata: [DONE]\n\n'
    assert ends.close() == b""
    assert ends.feed(b"data: 1\r\n\r\ndata: 2\r\n\r\n") == b"data: 1\r\n\r\ndata: 2\r\n\r\n"  # CRLF whole
    assert ends.feed(b"data: 3\r\n\r") == b"data: 3\r\n\r"  # (its \n not come yet: goes with the next event)
    assert ends.feed(b"\ndata: 4") == b"" and ends.close() == b"\ndata: 4"


def test_an_openai_stream():
    body = (b'data: {"choices":[{"index":0,"delta":{"content":"h\xc3\xa9"}}]}\n\n'
            b': keep-alive\r\n\r\ndata: {"choices":[]}\r\n\r\ndata: [DONE]\n\n')
    chunks = [body[i:i + 5] for i in range(0, len(body), 5)]  # splits the two bytes of é
    assert ours(chunks) == ['{"choices":[{"index":0,"delta":{"content":"hé"}}]}', '{"choices":[]}', "[DONE]"]
