"""Redis store: any number of replicas share one Redis (or Redis Cluster).

A session is a few keys under one hash tag, so a Cluster keeps them in one slot:
``{prefix}:{<id>}:meta`` (hash: incarnation, config, created, ttl, version),
``...:msgs`` (list of records), ``...:pay`` (hash handle -> payload), ``...:events`` (list) and
``...:req:<incarnation>:<request_id>`` (the idempotent result, expiring).
Two keys outside the tag index sessions: ``{prefix}:index`` (ids, for paging) and
``{prefix}:expiry`` (ids by expiry time, for the session quota).

Append is one Lua script: it checks the incarnation, replays a known request_id, checks the
expected version, pushes the batch, bumps the version, chains the batch into the session's digest
and records the request_id atomically, so concurrent writers on several replicas lose nothing and
each batch stays contiguous. At durability ``replica``/``aof`` the acknowledgement then waits for
replicas on the script's own connection (``redis_ha``). A replica reads only the records
past the version it has cached (one MULTI round trip). Connection failures become
``StoreUnavailable``; the pool reconnects by itself on the next call once Redis is back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from budgeter.errors import (
    AlreadyExists,
    EtagMismatch,
    InvalidInput,
    PayloadNotFound,
    SessionNotFound,
    StoreUnavailable,
)
from budgeter.store import redis_ha
from budgeter.store.base import (
    AppendOutcome,
    SessionRecord,
    StaleIncarnation,
    check_replay,
    check_version,
    now,
)

CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
redis.call('HSET', KEYS[1], 'incarnation', ARGV[1], 'config', ARGV[2], 'created', ARGV[3],
           'ttl', ARGV[4], 'version', 0)
if tonumber(ARGV[4]) > 0 then redis.call('PEXPIRE', KEYS[1], math.floor(ARGV[4] * 1000)) end
return 1
"""

APPEND = """
local meta = redis.call('HMGET', KEYS[1], 'incarnation', 'version', 'ttl', 'events', 'digest')
if not meta[1] then return {'NOT_FOUND'} end
if meta[1] ~= ARGV[1] then return {'STALE'} end
local version = tonumber(meta[2])
local digest = meta[5] or ''
if ARGV[2] ~= '' then
  local done = redis.call('GET', KEYS[3])
  if done then
    redis.call('PEXPIRE', KEYS[3], ARGV[6])
    return {'REPLAY', done, tostring(version), digest}
  end
end
if ARGV[4] ~= '' and tonumber(ARGV[4]) ~= version then return {'CONFLICT', tostring(version), digest} end
if ARGV[7] ~= '' and string.sub(digest, 1, #ARGV[7]) ~= ARGV[7] then
  return {'CONFLICT', tostring(version), digest}
end
local n = #ARGV - 7
for i = 8, #ARGV, 4000 do
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 3999, #ARGV)))
end
local before = digest
for i = 8, #ARGV do digest = redis.sha1hex(digest .. ARGV[i]) end
local new = redis.call('HINCRBY', KEYS[1], 'version', n)
redis.call('HSET', KEYS[1], 'digest', digest)
if ARGV[2] ~= '' then
  redis.call('SET', KEYS[3], ARGV[3] .. '\\n' .. version .. '\\n' .. ARGV[5], 'PX', ARGV[6])
end
local ttl = tonumber(meta[3])
if ttl and ttl > 0 then
  local ms = math.floor(ttl * 1000)
  redis.call('PEXPIRE', KEYS[1], ms)
  redis.call('PEXPIRE', KEYS[2], ms)
  redis.call('PEXPIRE', KEYS[4], ms)
  redis.call('PEXPIRE', KEYS[5], ms)
end
return {'OK', tostring(version), tostring(new), meta[3] or '0', meta[4] or '0', before, digest}
"""

ADD_EVENT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local n = redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'events', n)
local ms = redis.call('PTTL', KEYS[1])
if ms > 0 then redis.call('PEXPIRE', KEYS[2], ms) end
return n - 1
"""

PUT_PAYLOADS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], unpack(ARGV, 2))
local ms = redis.call('PTTL', KEYS[1])
if ms > 0 then redis.call('PEXPIRE', KEYS[2], ms) end
return 1
"""


SOCKET_TIMEOUT = 5.0
"""A reply's wait on a connection; a WAIT for replicas must end before it (``durability_timeout``)."""


def connect(url: str) -> Any:
    """A client for ``redis://``/``rediss://``/``unix://`` URLs, or ``redis+cluster://`` for a
    Redis Cluster. Retries connection errors briefly, with backoff, before giving up."""
    opts: dict[str, Any] = dict(retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 3),
                                socket_connect_timeout=2.0, socket_timeout=SOCKET_TIMEOUT,
                                health_check_interval=15)
    if url.startswith("redis+cluster://"):
        from redis.cluster import RedisCluster

        return RedisCluster.from_url("redis://" + url.removeprefix("redis+cluster://"), **opts)
    return redis.Redis.from_url(url, **opts)


class RedisStore:
    name = "redis"

    def __init__(self, client: Any, *, prefix: str = "budgeter", idempotency_ttl: float = 86_400.0,
                 durability: str = "auto", durability_replicas: int = 1,
                 durability_timeout: float = 1.0) -> None:
        self.client = client
        self.prefix = prefix
        self._idem_ms = int(idempotency_ttl * 1000)
        self._create = client.register_script(CREATE)
        self._append = client.register_script(APPEND)
        self._put = client.register_script(PUT_PAYLOADS)
        self._event = client.register_script(ADD_EVENT)
        self._index = f"{prefix}:index"
        self._expiry = f"{prefix}:expiry"
        self.round_trips = 0
        """Requests sent to Redis (a pipeline or a script counts once); exported as a metric."""
        self._asked = durability
        self._level: str | None = None
        self._replicas = durability_replicas
        if not 0 < durability_timeout < SOCKET_TIMEOUT - 1:
            raise InvalidInput(f"durability_timeout must be above 0 and under {SOCKET_TIMEOUT - 1:g} s (the "
                               f"connection's read timeout is {SOCKET_TIMEOUT:g} s)", field="durability_timeout")
        self._wait_ms = max(1, int(durability_timeout * 1000))
        self._slots = redis_ha.SlotMap(client)
        self._level_lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **kw: Any) -> RedisStore:
        return cls(connect(url), **kw)

    def keys(self, session_id: str) -> dict[str, str]:
        base = f"{self.prefix}:{{{session_id}}}"
        return {"meta": f"{base}:meta", "msgs": f"{base}:msgs", "pay": f"{base}:pay",
                "events": f"{base}:events", "req": f"{base}:req"}

    @property
    def durability(self) -> str:
        """The level appends are acknowledged at (``redis_ha``), settled at the first call."""
        if self._level is None:
            with self._guard(trips=0), self._level_lock:
                self._level = self._level or redis_ha.resolve(self.client, self._asked,
                                                              replicas=self._replicas)
        return self._level

    @contextmanager
    def _guard(self, trips: int = 1) -> Iterator[None]:
        self.round_trips += trips
        try:
            yield
        except (redis.ConnectionError, redis.TimeoutError, redis.exceptions.BusyLoadingError,
                redis.exceptions.ReadOnlyError, redis.exceptions.ClusterDownError,
                redis.exceptions.MovedError, redis.exceptions.AskError) as exc:
            self._slots.refresh(exc)  # a failover moved the slot: the next call goes to its new owner
            raise StoreUnavailable(f"Redis is unavailable: {exc}",
                                   metadata={"store": "redis"}) from exc
        except redis.RedisError as exc:
            raise StoreUnavailable(f"Redis error: {exc}", metadata={"store": "redis"}) from exc

    def _script(self, script: Any, *, keys: Sequence[str], args: Sequence[Any],
                durable: Callable[[Any], bool] | None = None) -> Any:
        """``script(keys=..., args=...)`` as one EVALSHA (loaded again where Redis lost it), on a
        pooled connection to the node that owns ``keys[0]``, held until a durable write has been
        waited for on it (the connection that made it). ``durable(reply)``: whether the reply acknowledges a write that
        must reach the replicas first (``redis_ha.await_replicas``). A connection error or a
        Cluster redirection before the reply sends the script again (after a refresh of the slot
        map), three times with backoff; one while waiting for replicas does not (the caller retries
        with its request_id)."""
        level = self.durability if durable is not None else "primary"
        attempt = 0
        while True:
            pool = self._pool(keys[0])
            conn = pool.get_connection()
            try:
                try:
                    reply = self._evalsha(conn, script, keys, args)
                except (redis.ConnectionError, redis.TimeoutError, redis.exceptions.MovedError,
                        redis.exceptions.AskError) as exc:
                    conn.disconnect()
                    self._slots.refresh(exc)
                    if attempt == 3:
                        raise
                    time.sleep(0.05 * 2 ** attempt)
                    attempt += 1
                    continue
                if durable is not None and durable(reply):
                    redis_ha.await_replicas(conn, level, replicas=self._replicas, timeout_ms=self._wait_ms)
                return reply
            finally:
                pool.release(conn)

    @staticmethod
    def _evalsha(conn: Any, script: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            conn.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
            return conn.read_response()
        except redis.exceptions.NoScriptError:
            conn.send_command("SCRIPT", "LOAD", script.script)
            conn.read_response()
            conn.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
            return conn.read_response()

    def _pool(self, key: str) -> Any:
        """The connection pool of the node that owns ``key`` (a single Redis: the one node)."""
        if redis_ha.is_cluster(self.client):
            return self.client.get_redis_connection(self.client.get_node_from_key(key)).connection_pool
        return self.client.connection_pool

    @staticmethod
    def _not_found(session_id: str) -> SessionNotFound:
        return SessionNotFound(f"session {session_id!r} does not exist", metadata={"session": session_id})

    @staticmethod
    def _record(session_id: str, meta: Mapping[bytes, bytes], pttl: int, version: int | None = None
                ) -> SessionRecord:
        ttl = float(meta[b"ttl"]) or None
        return SessionRecord(
            id=session_id, incarnation=meta[b"incarnation"].decode(),
            config=meta[b"config"].decode(), created=float(meta[b"created"]), ttl=ttl,
            expires=now() + pttl / 1000 if pttl > 0 else None,
            version=int(meta[b"version"]) if version is None else version,
            events=int(meta.get(b"events", 0)), digest=meta.get(b"digest", b"").decode())

    def create(self, record: SessionRecord) -> None:
        k = self.keys(record.id)
        with self._guard(trips=2):  # the script, then the index pipeline
            made = self._script(self._create, keys=[k["meta"], k["msgs"], k["pay"], k["events"]],
                                args=[record.incarnation, record.config, repr(record.created),
                                      repr(record.ttl or 0)], durable=bool)
            if not made:
                raise AlreadyExists(f"session {record.id!r} already exists",
                                    metadata={"session": record.id})
            pipe = self.client.pipeline(transaction=False)
            pipe.zadd(self._index, {record.id: 0})
            pipe.zadd(self._expiry, {record.id: record.expires or float("inf")})
            pipe.execute()

    def get(self, session_id: str) -> SessionRecord:
        return self.read(session_id, since=-1)[0]

    def list_page(self, *, after: str, limit: int) -> list[SessionRecord]:
        """Ids from the index, then every session row of the batch in one pipelined round trip;
        ids whose session has expired are dropped from the index."""
        out: list[SessionRecord] = []
        with self._guard():
            while len(out) < limit:
                low = f"({after}" if after else "-"
                ids = [i.decode() for i in self.client.zrangebylex(self._index, low, "+", 0, limit)]
                if not ids:
                    break
                pipe = self.client.pipeline(transaction=False)
                for sid in ids:
                    pipe.hgetall(self.keys(sid)["meta"])
                    pipe.pttl(self.keys(sid)["meta"])
                self.round_trips += 2
                replies = pipe.execute()
                gone = [sid for sid, meta in zip(ids, replies[0::2], strict=True) if not meta]
                if gone:
                    self._forget(*gone)
                out += [self._record(sid, meta, pttl)
                        for sid, meta, pttl in zip(ids, replies[0::2], replies[1::2], strict=True) if meta]
                after = ids[-1]
        return out[:limit]

    def _forget(self, *ids: str) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.zrem(self._index, *ids)
        pipe.zrem(self._expiry, *ids)
        pipe.execute()

    def delete(self, session_id: str) -> None:
        k = self.keys(session_id)
        with self._guard(trips=2):
            if not self.client.delete(k["meta"], k["msgs"], k["pay"], k["events"]):
                raise self._not_found(session_id)
            self._forget(session_id)

    def count(self) -> int:
        with self._guard(trips=2):
            expired = self.client.zrangebyscore(self._expiry, "-inf", now())
            if expired:
                self._forget(*(i.decode() for i in expired))
            return int(self.client.zcard(self._index))

    def append(self, session_id: str, records: Sequence[str], *, incarnation: str,
               request_id: str, fingerprint: str, result: str,
               expected_version: int | None = None, expected_digest: str = "") -> AppendOutcome:
        k = self.keys(session_id)
        req = f"{k['req']}:{incarnation}:{request_id}"
        args = [incarnation, request_id, fingerprint,
                "" if expected_version is None else str(expected_version), result,
                str(self._idem_ms), expected_digest, *records]
        with self._guard():
            reply = self._script(self._append, keys=[k["meta"], k["msgs"], req, k["pay"], k["events"]],
                                 args=args, durable=lambda r: r[0] in (b"OK", b"REPLAY"))
            status = reply[0].decode()
            if status == "OK" and float(reply[3]) > 0:
                self.round_trips += 1
                self.client.zadd(self._expiry, {session_id: now() + float(reply[3])})
        if status == "NOT_FOUND":
            raise self._not_found(session_id)
        if status == "STALE":
            raise StaleIncarnation(session_id)
        if status == "CONFLICT":
            check_version(expected_version, int(reply[1]))
            raise EtagMismatch(f"the session changed: expected digest {expected_digest}, it is at "
                               f"{reply[2].decode()[:len(expected_digest)]} (same version, other history)",
                               metadata={"version": int(reply[1])})
        if status == "REPLAY":
            stored_fp, first, stored = reply[1].decode().split("\n", 2)
            check_replay(request_id, fingerprint, stored_fp)
            return AppendOutcome(int(first), int(reply[2]), stored, replayed=True, digest=reply[3].decode())
        return AppendOutcome(int(reply[1]), int(reply[2]), result, events=int(reply[4]),
                             digest_before=reply[5].decode(), digest=reply[6].decode())

    def read(self, session_id: str, *, since: int = 0) -> tuple[SessionRecord, list[str]]:
        k = self.keys(session_id)
        with self._guard():
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(k["meta"])
            pipe.pttl(k["meta"])
            if since >= 0:
                pipe.lrange(k["msgs"], since, -1)
            meta, pttl, *rest = pipe.execute()
        if not meta:
            raise self._not_found(session_id)
        records = [r.decode() for r in rest[0]] if rest else []
        return self._record(session_id, meta, pttl), records

    def add_event(self, session_id: str, event: str) -> int:
        k = self.keys(session_id)
        with self._guard():
            index = int(self._script(self._event, keys=[k["meta"], k["events"]], args=[event]))
        if index < 0:
            raise self._not_found(session_id)
        return index

    def events(self, session_id: str, *, since: int = 0) -> list[str]:
        k = self.keys(session_id)
        with self._guard():
            pipe = self.client.pipeline(transaction=True)
            pipe.exists(k["meta"])
            pipe.lrange(k["events"], since, -1)
            exists, items = pipe.execute()
        if not exists:
            raise self._not_found(session_id)
        return [i.decode() for i in items]

    def put_payloads(self, session_id: str, payloads: Mapping[str, str]) -> None:
        if not payloads:
            return
        k = self.keys(session_id)
        flat = [x for pair in payloads.items() for x in pair]
        with self._guard():
            if not self._script(self._put, keys=[k["meta"], k["pay"]], args=["", *flat]):
                raise self._not_found(session_id)

    def get_payload(self, session_id: str, handle: str) -> str:
        k = self.keys(session_id)
        with self._guard():
            pipe = self.client.pipeline(transaction=True)
            pipe.exists(k["meta"])
            pipe.hget(k["pay"], handle)
            exists, text = pipe.execute()
        if not exists:
            raise self._not_found(session_id)
        if text is None:
            raise PayloadNotFound(f"no payload {handle!r} in session {session_id!r}",
                                  metadata={"session": session_id, "handle": handle})
        return text.decode()

    def ping(self) -> None:
        """The store answers: a single Redis, or every primary of a Cluster (after a refresh of
        the slot map, so a promoted replica counts and the dead primary does not)."""
        with self._guard():
            if redis_ha.is_cluster(self.client):
                self._slots.ping()
            else:
                self.client.ping()
        self.durability  # noqa: B018 - settled at start-up (the first ping), not at the first write

    def close(self) -> None:
        self.client.close()
