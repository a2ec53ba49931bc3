"""The store contract, shared by the memory, SQLite and Redis stores.

A store keeps sessions as opaque records; it knows nothing of messages or tokenizers:
- a session row (``SessionRecord``): immutable config JSON, a random ``incarnation`` (so a session
  deleted and created again under the same id is never mistaken for the old one), and ``version``,
  the number of appended messages;
- the session's history, a list of record strings, append-only;
- idempotency entries: ``request_id`` -> (fingerprint, first index, result), expiring;
- elided payloads, content-addressed (handle -> text), living as long as the session;
- events, an append-only list of JSON strings (the session record counts them);
- (Redis) ``digest``: a hash chained over every record appended, ``chain(digest, records)``, so
  two histories of one length that differ (a write lost in a failover, then another at its index)
  never look the same. Stores that cannot lose an acknowledged write keep it empty.

``append`` is atomic: the batch lands contiguously, after a check of the incarnation and, when
given, of the expected version (optimistic concurrency) and, where the store keeps digests, of
the expected digest's prefix (the others ignore it). ``read(since=n)`` returns the session row
and the records from index ``n`` in one round trip, so a replica fetches only what it lacks.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from budgeter.errors import EtagMismatch, InvalidInput, RequestIdReused

SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")


@dataclass(frozen=True, slots=True)
class SessionRecord:
    id: str
    incarnation: str
    config: str
    created: float
    ttl: float | None = None
    """Seconds; every append renews it."""
    expires: float | None = None
    version: int = 0
    events: int = 0
    """Number of session events (guard-rail verdicts, rescued paths, planned edits)."""
    digest: str = ""
    """``chain`` over the records appended (empty where the store keeps none)."""

    def renewed(self, now: float, version: int) -> SessionRecord:
        return replace(self, version=version, expires=now + self.ttl if self.ttl else None)


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    first_index: int
    version: int
    result: str
    replayed: bool = False
    events: int = -1
    """The session's event count when the batch landed (-1 on a replay): a writer that skipped
    reading the session first learns from it whether events came in meanwhile."""
    digest_before: str = ""
    """The session's digest the batch was chained onto (a write-through checks it is its own)."""
    digest: str = ""


class StaleIncarnation(Exception):
    """The session was deleted and created again since the caller read it (internal; retried)."""


class SessionStore(Protocol):
    name: str

    def create(self, record: SessionRecord) -> None: ...
    def get(self, session_id: str) -> SessionRecord: ...
    def list_page(self, *, after: str, limit: int) -> list[SessionRecord]: ...
    def delete(self, session_id: str) -> None: ...
    def count(self) -> int: ...
    def append(self, session_id: str, records: Sequence[str], *, incarnation: str,
               request_id: str, fingerprint: str, result: str,
               expected_version: int | None = None, expected_digest: str = "") -> AppendOutcome: ...
    def read(self, session_id: str, *, since: int = 0) -> tuple[SessionRecord, list[str]]: ...
    def add_event(self, session_id: str, event: str) -> int: ...
    def events(self, session_id: str, *, since: int = 0) -> list[str]: ...
    def put_payloads(self, session_id: str, payloads: Mapping[str, str]) -> None: ...
    def get_payload(self, session_id: str, handle: str) -> str: ...
    def ping(self) -> None: ...
    def close(self) -> None: ...


def check_session_id(session_id: str) -> str:
    if not SESSION_ID.match(session_id):
        raise InvalidInput(
            "session id must be 1-128 letters, digits, '.', '_' or '-', starting alphanumeric",
            field="session_id")
    return session_id


def check_replay(request_id: str, fingerprint: str, stored_fingerprint: str) -> None:
    if fingerprint != stored_fingerprint:
        raise RequestIdReused(
            f"request_id {request_id!r} was already used for a different append",
            field="request_id")


def check_version(expected: int | None, actual: int) -> None:
    if expected is not None and expected != actual:
        raise EtagMismatch(
            f"the session changed: expected version {expected}, it is at {actual}",
            metadata={"expected_version": expected, "version": actual})


def chain(digest: str, records: Sequence[str]) -> str:
    """The digest after ``records`` (as the Redis append script computes it)."""
    for record in records:
        digest = hashlib.sha1(digest.encode() + record.encode()).hexdigest()
    return digest


def now() -> float:
    return time.time()
