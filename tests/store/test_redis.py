"""Redis-only behaviour: one hash slot per session, outage -> StoreUnavailable, self-recovery."""

from __future__ import annotations

import time
import uuid

import pytest
from redis.crc import key_slot

from budgeter.errors import StoreUnavailable
from budgeter.store import SessionRecord, open_store
from budgeter.store.redis import RedisStore


def test_every_key_of_a_session_shares_one_slot(redis_url):
    store = open_store(redis_url)
    assert isinstance(store, RedisStore)
    keys = store.keys("agent-7")
    keys["req"] += ":inc:req-1"
    assert len({key_slot(k.encode()) for k in keys.values()}) == 1
    assert len({key_slot(k.encode()) for k in store.keys("agent-8").values()}) == 1
    store.close()


def test_scripts_flushed_from_redis_are_loaded_again(private_redis):
    """Redis forgets its scripts on a restart or SCRIPT FLUSH; every scripted write then loads
    its script again and goes through."""
    store = open_store(private_redis.url)
    rec = SessionRecord("s", uuid.uuid4().hex, "{}", time.time())
    store.client.script_flush()
    store.create(rec)
    store.client.script_flush()
    out = store.append("s", ["x"], incarnation=rec.incarnation, request_id="r", fingerprint="f", result="")
    store.client.script_flush()
    store.put_payloads("s", {"h1": "payload"})
    store.client.script_flush()
    assert store.add_event("s", "{}") == 0
    assert out.version == 1 and store.read("s")[1] == ["x"] and store.get_payload("s", "h1") == "payload"
    store.close()


def test_outage_gives_unavailable_and_recovers(private_redis):
    store = open_store(private_redis.url)
    rec = SessionRecord("s", uuid.uuid4().hex, "{}", time.time())
    store.create(rec)
    private_redis.stop()
    with pytest.raises(StoreUnavailable) as info:
        store.get("s")
    assert info.value.reason == "STORE_UNAVAILABLE"
    with pytest.raises(StoreUnavailable):
        store.append("s", ["x"], incarnation=rec.incarnation, request_id="", fingerprint="",
                     result="")
    private_redis.start()  # same port, empty (no persistence): the store must reconnect by itself
    store.create(rec)
    out = store.append("s", ["x"], incarnation=rec.incarnation, request_id="r", fingerprint="f",
                       result="")
    assert out.version == 1 and store.read("s")[1] == ["x"]
    store.close()


def _clients(url: str, name: str | None = None) -> int:
    import redis

    admin = redis.Redis.from_url(url)
    try:
        others = [c for c in admin.client_list() if c["id"] != str(admin.client_id())]
        return len([c for c in others if name is None or c.get("name") == name])
    finally:
        admin.close()


def test_scripted_writes_survive_their_connection_being_cut(private_redis):
    """When Redis cuts the connection a script goes out on (a timeout, a proxy, CLIENT KILL), the
    next write reconnects and is stored exactly once."""
    import redis

    store = open_store(private_redis.url)
    rec = SessionRecord("s", uuid.uuid4().hex, "{}", time.time())
    store.create(rec)
    store.append("s", ["a"], incarnation=rec.incarnation, request_id="r1", fingerprint="f1", result="")
    admin = redis.Redis.from_url(private_redis.url)
    assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
    out = store.append("s", ["b"], incarnation=rec.incarnation, request_id="r2", fingerprint="f2", result="")
    admin.client_kill_filter(_type="normal", skipme=True)
    store.put_payloads("s", {"h": "payload"})
    assert out.version == 2 and store.read("s")[1] == ["a", "b"] and store.get_payload("s", "h") == "payload"
    admin.close()
    store.close()


def test_threads_append_at_once_and_close_releases_their_connections(private_redis):
    import threading

    store = open_store(private_redis.url)
    records = [SessionRecord(f"s{i}", uuid.uuid4().hex, "{}", time.time()) for i in range(4)]
    for rec in records:
        store.create(rec)
    start = threading.Barrier(len(records))

    def write(rec: SessionRecord) -> None:
        start.wait()
        for j in range(25):
            store.append(rec.id, [f"{rec.id}-{j}"], incarnation=rec.incarnation, request_id=f"r{j}",
                         fingerprint=f"f{j}", result="")

    threads = [threading.Thread(target=write, args=(rec,)) for rec in records]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for rec in records:
        info, stored = store.read(rec.id)
        assert info.version == 25 and stored == [f"{rec.id}-{j}" for j in range(25)]
    store.close()
    deadline = time.monotonic() + 5
    while _clients(private_redis.url) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _clients(private_redis.url) == 0
