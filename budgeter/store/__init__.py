"""Session stores: one contract (``base.SessionStore``), three implementations.

``open_store(url)``: ``memory://``, ``sqlite:///path/to/file.db`` (or a bare path),
``redis://host:port/db``, ``rediss://...``, ``unix:///path.sock`` or ``redis+cluster://host:port``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from budgeter.errors import InvalidInput, MissingExtra
from budgeter.store.base import AppendOutcome, SessionRecord, SessionStore, StaleIncarnation
from budgeter.store.memory import MemoryStore

__all__ = ["AppendOutcome", "MemoryStore", "SessionRecord", "SessionStore", "StaleIncarnation",
           "open_store"]


def open_store(url: str, **kw: Any) -> SessionStore:
    if url in ("memory", "memory://"):
        return MemoryStore(**kw)
    if url.startswith(("redis://", "rediss://", "unix://", "redis+cluster://")):
        try:
            from budgeter.store.redis import RedisStore
        except ImportError as exc:
            if not MissingExtra.explains(exc, "redis"):
                raise
            raise MissingExtra(f"the store {url.partition('://')[0]}://", "redis") from exc

        return RedisStore.from_url(url, **kw)
    if url.startswith("sqlite://"):
        url = url.removeprefix("sqlite://")  # sqlite:///tmp/x.db -> /tmp/x.db
    elif "://" in url:
        raise InvalidInput(f"unknown store URL {url!r}: use memory://, sqlite:///PATH or redis://HOST",
                           field="store")
    from budgeter.store.sqlite import SQLiteStore

    return SQLiteStore(Path(url).expanduser(), **kw)
