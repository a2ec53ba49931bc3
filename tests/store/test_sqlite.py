"""SQLite: checkpoints run on their own thread, never inside a commit, and a closed store is one
self-contained file."""

from __future__ import annotations

import time
import uuid

from budgeter.store import SessionRecord
from budgeter.store.sqlite import SQLiteStore


def _fill(store: SQLiteStore, n: int) -> None:
    rec = SessionRecord("s1", uuid.uuid4().hex, "{}", time.time(), None, None)
    store.create(rec)
    for i in range(n):
        store.append("s1", ["x" * 4000], incarnation=rec.incarnation, request_id=f"r{i}",
                     fingerprint=f"f{i}", result="r", expected_version=None)


def test_commits_leave_checkpoints_to_the_thread(tmp_path):
    store = SQLiteStore(tmp_path / "b.db", checkpoint_interval=3600)  # the thread stays asleep
    _fill(store, 400)  # ~1,600 KB of log: SQLite's own checkpoint would have run at 1,000 pages
    assert (tmp_path / "b.db-wal").stat().st_size > 1_500_000
    assert (tmp_path / "b.db").stat().st_size < 100_000  # nothing was checkpointed inside a commit
    store.close()
    assert not (tmp_path / "b.db-wal").exists() or (tmp_path / "b.db-wal").stat().st_size == 0
    reopened = SQLiteStore(tmp_path / "b.db")
    assert len(reopened.read("s1")[1]) == 400
    reopened.close()


def test_the_thread_checkpoints_while_the_store_is_open(tmp_path):
    store = SQLiteStore(tmp_path / "b.db", checkpoint_interval=0.05)
    _fill(store, 100)
    deadline = time.monotonic() + 10
    size = 0
    while time.monotonic() < deadline:
        size = (tmp_path / "b.db").stat().st_size
        if size > 300_000:  # the records reached the database file itself
            break
        time.sleep(0.05)
    assert size > 300_000
    store.close()
