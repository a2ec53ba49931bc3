"""Session affinity behind an L7 gRPC balancer: every call names its session in a header.

A replica keeps each recent session's engine state and tracks prefix stability
(``extends_previous``) for KV-cache reuse, so a session should keep landing on one replica. The
balancer cannot read the protobuf body; this channel interceptor copies the session id of each
request into the ``x-session-id`` metadata header, and the balancer hashes on it (nginx
``hash $http_x_session_id consistent``, Envoy ``ring_hash`` on the header; see
deploy/OPERATIONS.md). Calls without a session (``ListTokenizers``, a ``CreateSession`` that lets
the server pick the id) carry no header and are balanced as usual.

    from budgeter.affinity import affinity_channel
    from budgeter.client import Client

    client = Client(channel=affinity_channel("balancer:50051"))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import grpc

HEADER = "x-session-id"
PREFIX = "sessions/"
OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]


def session_of(request: Any) -> str:
    """The session id a request names: ``session``/``name`` (``sessions/{id}``) or ``session_id``."""
    for field in ("session", "name", "session_id"):
        value = getattr(request, field, "")
        if isinstance(value, str) and value:
            if field == "session_id":
                return value
            if value.startswith(PREFIX):
                return value.removeprefix(PREFIX)
    return ""


class _Details(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: Any
    compression: Any


class SessionAffinity(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Adds ``x-session-id: <id>`` to every unary call whose request names a session."""

    def intercept_unary_unary(self, continuation: Callable[[Any, Any], Any], details: Any,
                              request: Any) -> Any:
        sid = session_of(request)
        if sid:
            metadata = [*(details.metadata or ()), (HEADER, sid)]
            details = _Details(details.method, details.timeout, metadata, details.credentials,
                               getattr(details, "wait_for_ready", None), getattr(details, "compression", None))
        return continuation(details, request)


def affinity_channel(target: str, *, credentials: grpc.ChannelCredentials | None = None) -> grpc.Channel:
    """A channel to ``target`` whose calls carry their session id for the balancer to hash on."""
    channel = (grpc.secure_channel(target, credentials, options=OPTIONS) if credentials is not None
               else grpc.insecure_channel(target, options=OPTIONS))
    return grpc.intercept_channel(channel, SessionAffinity())
