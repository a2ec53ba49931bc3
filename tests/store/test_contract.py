"""One contract, run against every store: memory, SQLite and a real redis-server."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from budgeter.errors import (
    AlreadyExists,
    EtagMismatch,
    PayloadNotFound,
    RequestIdReused,
    SessionNotFound,
)
from budgeter.store import MemoryStore, SessionRecord, StaleIncarnation, open_store


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store(request, tmp_path):
    if request.param == "memory":
        s = MemoryStore()
    elif request.param == "sqlite":
        s = open_store(f"sqlite://{tmp_path}/store.db")
    else:
        s = open_store(request.getfixturevalue("redis_url"))
    yield s
    s.close()


def new(sid: str = "s1", *, ttl: float | None = None) -> SessionRecord:
    t = time.time()
    return SessionRecord(sid, uuid.uuid4().hex, '{"tokenizer": "x"}', t, ttl,
                         t + ttl if ttl else None)


def append(store, rec, records, *, rid="", fp="f", result="r", expected=None):
    return store.append(rec.id, records, incarnation=rec.incarnation, request_id=rid,
                        fingerprint=fp, result=result, expected_version=expected)


def test_create_get_delete(store):
    rec = new()
    store.create(rec)
    got = store.get("s1")
    assert (got.id, got.incarnation, got.config, got.version) == ("s1", rec.incarnation, rec.config, 0)
    with pytest.raises(AlreadyExists):
        store.create(new())
    store.delete("s1")
    with pytest.raises(SessionNotFound):
        store.get("s1")
    with pytest.raises(SessionNotFound):
        store.delete("s1")


def test_append_and_read_since(store):
    rec = new()
    store.create(rec)
    out = append(store, rec, ["a", "b"])
    assert (out.first_index, out.version, out.replayed) == (0, 2, False)
    out = append(store, rec, ["c"])
    assert (out.first_index, out.version) == (2, 3)
    got, records = store.read("s1")
    assert records == ["a", "b", "c"] and got.version == 3
    assert store.read("s1", since=2)[1] == ["c"]
    assert store.read("s1", since=3)[1] == []


def test_records_round_trip_unicode_and_newlines(store):
    rec = new()
    store.create(rec)
    text = '{"m": "上下文 🎉\\n", "raw": "line1\nline2\x00"}'
    append(store, rec, [text])
    assert store.read("s1")[1] == [text]


def test_request_id_replays_first_result(store):
    rec = new()
    store.create(rec)
    first = append(store, rec, ["a"], rid="req-1", fp="fp1", result="first")
    append(store, rec, ["b"])
    again = append(store, rec, ["a"], rid="req-1", fp="fp1", result="second")
    assert again.replayed and again.first_index == first.first_index == 0
    assert again.result == "first"
    assert store.read("s1")[1] == ["a", "b"]
    with pytest.raises(RequestIdReused):
        append(store, rec, ["zzz"], rid="req-1", fp="other")


def test_expected_version(store):
    rec = new()
    store.create(rec)
    append(store, rec, ["a"], expected=0)
    with pytest.raises(EtagMismatch) as info:
        append(store, rec, ["b"], expected=0)
    assert info.value.metadata["version"] == "1"
    assert store.read("s1")[1] == ["a"]


def test_recreated_session_is_a_new_incarnation(store):
    old = new()
    store.create(old)
    append(store, old, ["a"], rid="r")
    store.delete("s1")
    fresh = new()
    store.create(fresh)
    with pytest.raises(StaleIncarnation):
        append(store, old, ["stale"])
    out = append(store, fresh, ["b"], rid="r")
    assert not out.replayed and store.read("s1")[1] == ["b"]


def test_payloads(store):
    rec = new()
    store.create(rec)
    store.put_payloads("s1", {"h1": "payload ✓\n", "h2": ""})
    store.put_payloads("s1", {"h1": "payload ✓\n"})
    assert store.get_payload("s1", "h1") == "payload ✓\n"
    assert store.get_payload("s1", "h2") == ""
    with pytest.raises(PayloadNotFound):
        store.get_payload("s1", "nope")
    store.delete("s1")
    with pytest.raises(SessionNotFound):
        store.get_payload("s1", "h1")


def test_list_pages_in_id_order(store):
    for i in range(7):
        store.create(new(f"s{i}"))
    store.delete("s3")
    seen, after = [], ""
    while True:
        page = store.list_page(after=after, limit=3)
        if not page:
            break
        seen += [r.id for r in page]
        after = page[-1].id
    assert seen == ["s0", "s1", "s2", "s4", "s5", "s6"]
    assert store.count() == 6


def test_ttl_expires_and_append_renews(store):
    rec = new(ttl=0.6)
    store.create(rec)
    store.create(new("forever"))
    time.sleep(0.35)
    append(store, rec, ["a"])  # renews to 0.6 s from now
    time.sleep(0.35)
    assert store.read("s1")[1] == ["a"]
    assert store.get("s1").expires is not None
    time.sleep(0.5)
    with pytest.raises(SessionNotFound):
        store.get("s1")
    assert [r.id for r in store.list_page(after="", limit=10)] == ["forever"]
    assert store.count() == 1
    store.create(new())  # the id is free again


def test_concurrent_appends_lose_nothing_and_keep_each_writers_order(store):
    rec = new()
    store.create(rec)
    writers, per = 4, 40

    def write(w: int) -> None:
        for i in range(per):
            append(store, rec, [f"{w}:{i}:a", f"{w}:{i}:b"], rid=f"{w}-{i}")

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = store.read("s1")[1]
    assert len(records) == writers * per * 2
    for w in range(writers):
        mine = [r for r in records if r.startswith(f"{w}:")]
        assert mine == [f"{w}:{i}:{x}" for i in range(per) for x in "ab"]
    for k in range(0, len(records), 2):  # each batch stays contiguous
        assert records[k].rsplit(":", 1)[0] == records[k + 1].rsplit(":", 1)[0]


def test_events_are_counted_and_read_since(store):
    rec = new(ttl=30)
    store.create(rec)
    assert store.get("s1").events == 0
    assert store.add_event("s1", '{"kind": "a"}') == 0
    assert store.add_event("s1", '{"kind": "b ✓"}') == 1
    assert store.get("s1").events == 2 and store.read("s1")[0].events == 2
    outcome = store.append("s1", ["m"], incarnation=rec.incarnation, request_id="r", fingerprint="f", result="x")
    assert outcome.events == 2  # an append says how many events the session had when it landed
    replay = store.append("s1", ["m"], incarnation=rec.incarnation, request_id="r", fingerprint="f", result="x")
    assert replay.replayed and replay.events == -1
    assert store.events("s1") == ['{"kind": "a"}', '{"kind": "b ✓"}']
    assert store.events("s1", since=1) == ['{"kind": "b ✓"}']
    store.delete("s1")
    with pytest.raises(SessionNotFound):
        store.add_event("s1", "{}")
    fresh = new()
    store.create(fresh)
    assert store.events("s1") == [] and store.get("s1").events == 0
