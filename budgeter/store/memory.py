"""In-process store: for tests and single-process experiments (nothing survives a restart)."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from budgeter.errors import AlreadyExists, PayloadNotFound, SessionNotFound
from budgeter.store.base import (
    AppendOutcome,
    SessionRecord,
    StaleIncarnation,
    check_replay,
    check_version,
    now,
)


@dataclass(slots=True)
class _Entry:
    record: SessionRecord
    history: list[str] = field(default_factory=list)
    requests: dict[str, tuple[str, int, str, float]] = field(default_factory=dict)
    payloads: dict[str, str] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)


class MemoryStore:
    name = "memory"

    def __init__(self, *, idempotency_ttl: float = 86_400.0) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, _Entry] = {}
        self._idem_ttl = idempotency_ttl

    def _entry(self, session_id: str) -> _Entry:
        entry = self._sessions.get(session_id)
        if entry is None or (entry.record.expires is not None and entry.record.expires <= now()):
            self._sessions.pop(session_id, None)
            raise SessionNotFound(f"session {session_id!r} does not exist",
                                  metadata={"session": session_id})
        return entry

    def create(self, record: SessionRecord) -> None:
        with self._lock:
            try:
                self._entry(record.id)
            except SessionNotFound:
                self._sessions[record.id] = _Entry(record)
                return
            raise AlreadyExists(f"session {record.id!r} already exists", metadata={"session": record.id})

    def get(self, session_id: str) -> SessionRecord:
        with self._lock:
            return self._entry(session_id).record

    def list_page(self, *, after: str, limit: int) -> list[SessionRecord]:
        with self._lock:
            t = now()
            ids = sorted(k for k, e in self._sessions.items()
                         if k > after and (e.record.expires is None or e.record.expires > t))
            return [self._sessions[k].record for k in ids[:limit]]

    def delete(self, session_id: str) -> None:
        with self._lock:
            self._entry(session_id)
            del self._sessions[session_id]

    def count(self) -> int:
        with self._lock:
            t = now()
            return sum(1 for e in self._sessions.values() if e.record.expires is None or e.record.expires > t)

    def append(self, session_id: str, records: Sequence[str], *, incarnation: str,
               request_id: str, fingerprint: str, result: str,
               expected_version: int | None = None, expected_digest: str = "") -> AppendOutcome:
        with self._lock:
            entry = self._entry(session_id)
            if entry.record.incarnation != incarnation:
                raise StaleIncarnation(session_id)
            t = now()
            done = entry.requests.get(request_id) if request_id else None
            if done is not None and done[3] > t:
                check_replay(request_id, fingerprint, done[0])
                return AppendOutcome(done[1], entry.record.version, done[2], replayed=True)
            check_version(expected_version, entry.record.version)
            first = len(entry.history)
            entry.history.extend(records)
            entry.record = entry.record.renewed(t, len(entry.history))
            if request_id:
                entry.requests[request_id] = (fingerprint, first, result, t + self._idem_ttl)
            return AppendOutcome(first, entry.record.version, result, events=entry.record.events)

    def read(self, session_id: str, *, since: int = 0) -> tuple[SessionRecord, list[str]]:
        with self._lock:
            entry = self._entry(session_id)
            return entry.record, entry.history[since:]

    def add_event(self, session_id: str, event: str) -> int:
        with self._lock:
            entry = self._entry(session_id)
            entry.events.append(event)
            entry.record = replace(entry.record, events=len(entry.events))
            return len(entry.events) - 1

    def events(self, session_id: str, *, since: int = 0) -> list[str]:
        with self._lock:
            return self._entry(session_id).events[since:]

    def put_payloads(self, session_id: str, payloads: Mapping[str, str]) -> None:
        with self._lock:
            self._entry(session_id).payloads.update(payloads)

    def get_payload(self, session_id: str, handle: str) -> str:
        with self._lock:
            text = self._entry(session_id).payloads.get(handle)
        if text is None:
            raise PayloadNotFound(f"no payload {handle!r} in session {session_id!r}",
                                  metadata={"session": session_id, "handle": handle})
        return text

    def ping(self) -> None:
        return None

    def close(self) -> None:
        return None
