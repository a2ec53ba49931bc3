"""Embedded durable store: SQLite in WAL mode (the default of ``budgeter serve``).

One connection guarded by a lock: SQLite serialises writers anyway, and each append is one
``BEGIN IMMEDIATE`` transaction, so a crash leaves either the whole batch or none of it.

Checkpoints (copying the write-ahead log into the database, with an fsync) run on a thread of
their own every ``checkpoint_interval`` seconds, not inside a commit: SQLite's automatic one runs
in whichever commit crosses 1,000 pages and stalls it (``bench_durability``).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from budgeter.errors import AlreadyExists, PayloadNotFound, SessionNotFound, StoreUnavailable
from budgeter.store.base import (
    AppendOutcome,
    SessionRecord,
    StaleIncarnation,
    check_replay,
    check_version,
    now,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
  id TEXT PRIMARY KEY, incarnation TEXT NOT NULL, config TEXT NOT NULL, created REAL NOT NULL,
  ttl REAL, expires REAL, version INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS messages (
  session_id TEXT NOT NULL, idx INTEGER NOT NULL, record TEXT NOT NULL,
  PRIMARY KEY (session_id, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS requests (
  session_id TEXT NOT NULL, request_id TEXT NOT NULL, fingerprint TEXT NOT NULL,
  first_index INTEGER NOT NULL, result TEXT NOT NULL, expires REAL NOT NULL,
  PRIMARY KEY (session_id, request_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS requests_expires ON requests (expires);
CREATE TABLE IF NOT EXISTS events (
  session_id TEXT NOT NULL, idx INTEGER NOT NULL, event TEXT NOT NULL,
  PRIMARY KEY (session_id, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS payloads (
  session_id TEXT NOT NULL, handle TEXT NOT NULL, content TEXT NOT NULL,
  PRIMARY KEY (session_id, handle)
) WITHOUT ROWID;
"""
COLUMNS = "id, incarnation, config, created, ttl, expires, version"


class SQLiteStore:
    name = "sqlite"

    def __init__(self, path: str | Path, *, idempotency_ttl: float = 86_400.0,
                 checkpoint_interval: float = 1.0) -> None:
        self.path = Path(path)
        self._idem_ttl = idempotency_ttl
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=10.0,
                                       isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer thread does it
            self._db.executescript(SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailable(f"cannot open SQLite store at {self.path}: {exc}",
                                   metadata={"store": "sqlite", "path": str(self.path)}) from exc
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._checkpointer = threading.Thread(target=self._checkpoints, args=(checkpoint_interval,),
                                              name="budgeter-sqlite-checkpoint", daemon=True)
        self._checkpointer.start()

    def _checkpoints(self, interval: float) -> None:
        """PASSIVE checkpoints on a connection of this thread's own: writers never wait for them."""
        try:
            db = sqlite3.connect(str(self.path), timeout=10.0, isolation_level=None)
        except sqlite3.Error:
            return
        try:
            while not self._closed.wait(interval):
                try:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error:  # busy or gone: the next round tries again
                    continue
        finally:
            db.close()

    @contextmanager
    def _tx(self, *, write: bool = False) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield self._db
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"SQLite store error: {exc}",
                                       metadata={"store": "sqlite"}) from exc

    @staticmethod
    def _row(db: sqlite3.Connection, session_id: str) -> SessionRecord:
        row = db.execute(f"SELECT {COLUMNS} FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None or (row[5] is not None and row[5] <= now()):
            raise SessionNotFound(f"session {session_id!r} does not exist",
                                  metadata={"session": session_id})
        events = db.execute("SELECT count(*) FROM events WHERE session_id = ?", (session_id,)).fetchone()[0]
        return replace(SessionRecord(*row), events=events)

    @staticmethod
    def _purge(db: sqlite3.Connection, session_id: str) -> None:
        for table, key in (("sessions", "id"), ("messages", "session_id"),
                           ("requests", "session_id"), ("payloads", "session_id"),
                           ("events", "session_id")):
            db.execute(f"DELETE FROM {table} WHERE {key} = ?", (session_id,))

    def create(self, record: SessionRecord) -> None:
        with self._tx(write=True) as db:
            try:
                self._row(db, record.id)
            except SessionNotFound:
                self._purge(db, record.id)  # an expired session under the same id
                db.execute(f"INSERT INTO sessions ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                           (record.id, record.incarnation, record.config, record.created,
                            record.ttl, record.expires, record.version))
                return
            raise AlreadyExists(f"session {record.id!r} already exists", metadata={"session": record.id})

    def get(self, session_id: str) -> SessionRecord:
        with self._tx() as db:
            return self._row(db, session_id)

    def list_page(self, *, after: str, limit: int) -> list[SessionRecord]:
        with self._tx() as db:
            rows = db.execute(
                f"SELECT {COLUMNS} FROM sessions WHERE id > ? AND (expires IS NULL OR expires > ?) "
                "ORDER BY id LIMIT ?", (after, now(), limit)).fetchall()
        return [SessionRecord(*r) for r in rows]

    def delete(self, session_id: str) -> None:
        with self._tx(write=True) as db:
            self._row(db, session_id)
            self._purge(db, session_id)

    def count(self) -> int:
        with self._tx() as db:
            return db.execute("SELECT count(*) FROM sessions WHERE expires IS NULL OR expires > ?",
                              (now(),)).fetchone()[0]

    def append(self, session_id: str, records: Sequence[str], *, incarnation: str,
               request_id: str, fingerprint: str, result: str,
               expected_version: int | None = None, expected_digest: str = "") -> AppendOutcome:
        with self._tx(write=True) as db:
            rec = self._row(db, session_id)
            if rec.incarnation != incarnation:
                raise StaleIncarnation(session_id)
            t = now()
            if request_id:
                done = db.execute(
                    "SELECT fingerprint, first_index, result FROM requests "
                    "WHERE session_id = ? AND request_id = ? AND expires > ?",
                    (session_id, request_id, t)).fetchone()
                if done is not None:
                    check_replay(request_id, fingerprint, done[0])
                    return AppendOutcome(done[1], rec.version, done[2], replayed=True)
            check_version(expected_version, rec.version)
            first = rec.version
            db.executemany("INSERT INTO messages (session_id, idx, record) VALUES (?, ?, ?)",
                           [(session_id, first + i, r) for i, r in enumerate(records)])
            new = rec.renewed(t, first + len(records))
            db.execute("UPDATE sessions SET version = ?, expires = ? WHERE id = ?",
                       (new.version, new.expires, session_id))
            if request_id:
                db.execute("DELETE FROM requests WHERE expires <= ?", (t,))
                db.execute("INSERT OR REPLACE INTO requests VALUES (?, ?, ?, ?, ?, ?)",
                           (session_id, request_id, fingerprint, first, result, t + self._idem_ttl))
            return AppendOutcome(first, new.version, result, events=rec.events)

    def read(self, session_id: str, *, since: int = 0) -> tuple[SessionRecord, list[str]]:
        with self._tx() as db:
            rec = self._row(db, session_id)
            rows = db.execute("SELECT record FROM messages WHERE session_id = ? AND idx >= ? "
                              "ORDER BY idx", (session_id, since)).fetchall()
        return rec, [r[0] for r in rows]

    def add_event(self, session_id: str, event: str) -> int:
        with self._tx(write=True) as db:
            index = self._row(db, session_id).events
            db.execute("INSERT INTO events VALUES (?, ?, ?)", (session_id, index, event))
            return index

    def events(self, session_id: str, *, since: int = 0) -> list[str]:
        with self._tx() as db:
            self._row(db, session_id)
            rows = db.execute("SELECT event FROM events WHERE session_id = ? AND idx >= ? ORDER BY idx",
                              (session_id, since)).fetchall()
        return [r[0] for r in rows]

    def put_payloads(self, session_id: str, payloads: Mapping[str, str]) -> None:
        with self._tx(write=True) as db:
            self._row(db, session_id)
            db.executemany("INSERT OR IGNORE INTO payloads VALUES (?, ?, ?)",
                           [(session_id, h, text) for h, text in payloads.items()])

    def get_payload(self, session_id: str, handle: str) -> str:
        with self._tx() as db:
            self._row(db, session_id)
            row = db.execute("SELECT content FROM payloads WHERE session_id = ? AND handle = ?",
                             (session_id, handle)).fetchone()
        if row is None:
            raise PayloadNotFound(f"no payload {handle!r} in session {session_id!r}",
                                  metadata={"session": session_id, "handle": handle})
        return row[0]

    def ping(self) -> None:
        with self._tx() as db:
            db.execute("SELECT 1")

    def close(self) -> None:
        self._closed.set()
        self._checkpointer.join(5)
        with self._lock:
            with contextlib.suppress(sqlite3.Error):  # leave one self-contained file
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.close()
