"""What the Redis store needs to survive a primary's death: durable acknowledgements and a Cluster
slot map that follows a failover.

Durability levels (``Settings.durability``), settled once, at the store's first ping (start-up) or
first write:
- ``primary``: an append is acknowledged when the primary's script returns. A primary that dies
  before its replicas have the write takes it with it (and its request_id record).
- ``replica``: after the script, ``WAIT replicas timeout`` on the same connection: acknowledged
  once that many replicas hold the write. Fewer in time: ``StoreUnavailable``, safe to retry with
  the same request_id (the write that did land on the primary is answered as a replay then).
- ``aof``: ``WAITAOF 1 replicas timeout`` (Redis >= 7.2): the primary and that many replicas have
  also written it to their append-only files.
- ``auto``: ``replica`` when every primary has a replica (``INFO replication``; a Cluster's slot
  map), else ``primary``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis

from budgeter.errors import InvalidInput, StoreUnavailable

log = logging.getLogger("budgeter.store")

LEVELS = ("auto", "primary", "replica", "aof")


def is_cluster(client: Any) -> bool:
    return not isinstance(client, redis.Redis)


def replica_count(client: Any) -> int:
    """The fewest replicas any primary has (a single Redis: its connected replicas)."""
    if is_cluster(client):
        slots = client.nodes_manager.slots_cache
        return min((len(nodes) - 1 for nodes in slots.values()), default=0)
    return int(client.info("replication").get("connected_slaves", 0))


def resolve(client: Any, asked: str, *, replicas: int) -> str:
    """The level to run at (``auto`` made concrete); ``aof`` on a Redis without WAITAOF is refused."""
    if asked not in LEVELS:
        raise InvalidInput(f"unknown durability {asked!r}: one of {', '.join(LEVELS)}", field="durability")
    if asked == "auto":
        found = replica_count(client)
        level = "replica" if found >= replicas else "primary"
        log.info("durability auto: %s (every primary has %d replicas or more)", level, found)
        return level
    if asked == "aof":
        version = redis_version(client)
        if version < (7, 2):
            raise InvalidInput(f"durability 'aof' needs WAITAOF (Redis >= 7.2); the store runs Redis "
                               f"{'.'.join(map(str, version))}: use 'replica'", field="durability")
    return asked


def redis_version(client: Any) -> tuple[int, ...]:
    """The server's version (a Cluster: its default node's)."""
    one = client.get_redis_connection(client.get_default_node()) if is_cluster(client) else client
    return tuple(int(x) for x in str(one.info("server")["redis_version"]).split(".")[:3])


def await_replicas(conn: Any, level: str, *, replicas: int, timeout_ms: int) -> None:
    """Block until ``replicas`` replicas (and, at ``aof``, the primary's and their append-only
    files) hold every write this connection made; ``StoreUnavailable`` when they do not in time."""
    if level == "replica":
        conn.send_command("WAIT", replicas, timeout_ms)
        got, local = int(conn.read_response()), 1
    elif level == "aof":
        conn.send_command("WAITAOF", 1, replicas, timeout_ms)
        local, got = (int(x) for x in conn.read_response())
    else:
        return
    if got < replicas or local < 1:
        raise StoreUnavailable(
            f"the write reached {got} of {replicas} replicas within {timeout_ms} ms, so it is not "
            "acknowledged; retry with the same request_id",
            metadata={"store": "redis", "durability": level, "replicas": got, "needed": replicas})


class SlotMap:
    """Refreshes a Cluster client's slot map after a connection error or a redirection (redis-py's
    pipelines do so only after 5 errors of one pipeline object, and each call makes a new one), at
    most once per ``every`` seconds however many threads fail at once."""

    def __init__(self, client: Any, *, every: float = 0.2) -> None:
        self.client = client if is_cluster(client) else None
        self.every = every
        self._lock = threading.Lock()
        self._last = 0.0

    def refresh(self, cause: BaseException) -> None:
        if self.client is None:
            return
        with self._lock:
            if time.monotonic() - self._last < self.every:
                return
            self._last = time.monotonic()
            log.warning("Redis Cluster: %s: %s; refreshing the slot map", type(cause).__name__, cause)
            try:
                self.client.nodes_manager.initialize()
            except redis.RedisError as exc:
                log.warning("Redis Cluster: the slot map could not be refreshed: %s", exc)

    def ping(self) -> None:
        """Every primary that owns slots answers; else the slot map is refreshed once (a replica
        may have taken over) and the primaries that still fail are named."""
        failed = self._unanswered()
        if failed:
            self.refresh(failed[0][1])
            failed = self._unanswered()
        if failed:
            names = ", ".join(name for name, _ in failed)
            raise StoreUnavailable(f"Redis Cluster primaries unreachable: {names} ({failed[0][1]})",
                                   metadata={"store": "redis", "nodes": names}) from failed[0][1]

    def _unanswered(self) -> list[tuple[str, BaseException]]:
        client = self.client
        assert client is not None
        out: list[tuple[str, BaseException]] = []
        for node in client.get_primaries():
            try:
                client.get_redis_connection(node).ping()
            except redis.RedisError as exc:
                out.append((node.name, exc))
        return out
