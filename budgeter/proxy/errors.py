"""OpenAI-style error bodies, and the one table from budgeter's errors to HTTP statuses.

``{"error": {"message", "type", "param", "code"}}``: ``code`` is budgeter's stable ``reason``
(``PINNED_OVER_BUDGET``, ``INVALID_MESSAGE``, ...) so a client can branch on it. Errors of the
upstream are not ours: their status and body are passed through unchanged. What the upstream does
wrong otherwise is an ``UpstreamError`` naming it: unreachable 502, silent 504, a 2xx that is no
chat completion 502 ``UPSTREAM_INVALID``, a reply over a limit 502 ``UPSTREAM_TOO_LARGE``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from starlette.responses import JSONResponse

from budgeter import errors as e
from budgeter.core.jsonargs import dumps_bytes


class RequestTooLarge(e.LimitExceeded):
    """A request body over ``max_request_bytes``: refused on its Content-Length, or once as many
    bytes came; the rest is never read (so the connection is closed after the answer)."""

    reason = "REQUEST_TOO_LARGE"


TABLE: tuple[tuple[type[e.BudgeterError], int, str], ...] = (
    (RequestTooLarge, 413, "invalid_request_error"),
    (e.StoreUnavailable, 503, "server_error"),
    (e.QuotaExceeded, 429, "rate_limit_error"),
    (e.EtagMismatch, 409, "conflict_error"),
    (e.BudgeterError, 400, "invalid_request_error"),  # bad input, pinned content over budget, ...
)


class UpstreamError(e.BudgeterError):
    """The upstream could not be reached, stayed silent past its timeout, or answered with what is
    no chat completion or is over a limit."""

    def __init__(self, message: str, *, reason: str, status: int) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status


class JSON(JSONResponse):
    """A JSON response written by budgeter's serializer: a lone surrogate that came in as a
    ``\\ud800`` escape (in a field passed back as it came) goes out as that escape, which
    Starlette's ``json.dumps(...).encode()`` cannot write."""

    def render(self, content: Any) -> bytes:
        return dumps_bytes(content)


def body(message: str, *, type_: str, code: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_response(exc: BaseException) -> JSON:
    if isinstance(exc, UpstreamError):
        return JSON(body(exc.message, type_="upstream_error", code=exc.reason), exc.status)
    if isinstance(exc, e.BudgeterError):
        status, type_ = next((s, t) for cls, s, t in TABLE if isinstance(exc, cls))
        field = getattr(exc, "field", "") or None
        headers = {"connection": "close"} if isinstance(exc, RequestTooLarge) else None  # body left unread
        return JSON(body(exc.message, type_=type_, code=exc.reason, param=field), status, headers=headers)
    from budgeter.sessions.logs import log_internal

    log_internal(exc)  # type and stack only: never message bodies
    return JSON(body("internal error", type_="server_error", code="INTERNAL"), 500)


UPSTREAM_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)
"""What the upstream client raises when the upstream cannot be reached or falls silent."""
STALE_CONNECTION = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)
"""What sending on a kept-alive connection that the upstream had just closed raises (the request
is sent once more, on a new connection)."""


def upstream_error(exc: BaseException, url: str) -> UpstreamError:
    """aiohttp's transport errors, translated where they enter: silent past the read timeout is
    504, anything else (refused, reset, no connection in time) 502."""
    connect = isinstance(exc, aiohttp.ConnectionTimeoutError)
    if isinstance(exc, aiohttp.ServerTimeoutError | asyncio.TimeoutError) and not connect:
        return UpstreamError(f"the upstream {url} sent nothing for too long ({type(exc).__name__})",
                             reason="UPSTREAM_TIMEOUT", status=504)
    return UpstreamError(f"the upstream {url} is unreachable: {type(exc).__name__}: {exc}",
                         reason="UPSTREAM_UNREACHABLE", status=502)


def upstream_invalid(url: str, what: str) -> UpstreamError:
    """A 2xx of the upstream that is no chat completion: the client gets a 502 naming the upstream,
    never the body as if it were a reply."""
    return UpstreamError(f"the upstream {url} answered with {what} instead of a chat completion",
                         reason="UPSTREAM_INVALID", status=502)


def upstream_too_large(url: str, what: str, *, limit: int, setting: str) -> UpstreamError:
    """A reply over ``max_reply_bytes``, or whose message is over what one stored message may be."""
    return UpstreamError(f"the upstream {url} sent {what}, over the limit of {limit} bytes ({setting})",
                         reason="UPSTREAM_TOO_LARGE", status=502)


def event(exc: UpstreamError) -> bytes:
    """The error as a server-sent event, for a stream whose status is already out (OpenAI's SDKs
    raise on an event whose data holds ``error``)."""
    return b"data: " + dumps_bytes(body(exc.message, type_="upstream_error", code=exc.reason)) + b"\n\n"
