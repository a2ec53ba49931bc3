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
