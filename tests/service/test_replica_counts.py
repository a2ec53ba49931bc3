"""A replica that has never seen a session does not tokenize its history again: it imports the
token and piece counts stored with each message (here: a second process on the same SQLite file)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from budgeter.core.messages import from_openai_list
from budgeter.errors import EtagMismatch
from budgeter.sessions.sessions import Sessions
from budgeter.sessions.tokenizers import Tokenizers
from budgeter.store import open_store
from tests.service.agent import TOOLS, turns

REPLICA = """
import json, sys
from budgeter.sessions.tokenizers import Tokenizers
from budgeter.sessions.sessions import Sessions
from budgeter.store import open_store
sessions = Sessions(open_store(sys.argv[1]), Tokenizers(default="qwen3.6"))
counter = sessions.tokenizers.counter("")
result = sessions.build("s").result
print(json.dumps({"tokens": result.tokens, "tokenized": counter.pieces.chars_tokenized,
                  "messages": len(result.messages)}))
"""


def test_a_new_replica_imports_counts_instead_of_tokenizing(tmp_path):
    url = f"sqlite://{tmp_path}/s.db"
    writer = Sessions(open_store(url), Tokenizers(default="qwen3.6"))
    writer.create(session_id="s", tools=TOOLS, policy={"window": 200_000})
    history = []
    for t in turns(9):
        writer.append("s", from_openai_list(t))
        history += t
    expected = writer.build("s").result
    writer.store.close()
    out = subprocess.run([sys.executable, "-c", REPLICA, url], capture_output=True, text=True,
                         check=True, timeout=120)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["tokens"] == expected.tokens and seen["messages"] == len(history)
    history_chars = sum(len(json.dumps(m, ensure_ascii=False)) for m in history)
    assert history_chars > 40_000
    # only what no stored record covers is tokenized: the system prompt with the tool schemas and
    # the template's tool instructions (1.3K chars with Qwen3.6's template), and the generation prompt
    counter = writer.tokenizers.counter("")
    system_turn = sum(map(len, counter.pieces.ordinary(counter.render(from_openai_list(history[:1]), TOOLS))))
    # and the stubs of answered failures, which are new text (the failure hygiene writes them)
    stubs = sum(len(m.content) + sum(len(c.arguments) for c in m.tool_calls)
                for m in expected.messages if m not in from_openai_list(history))
    assert seen["tokenized"] < system_turn + stubs + 300 < history_chars * 0.1, seen


def test_an_append_writes_through_to_the_replica_that_made_it(tmp_path):
    """The replica that appended hands the messages and their facts to its live engine: the next
    build reads nothing back from the store. Another replica's appends are read, once."""
    from budgeter.store.memory import MemoryStore

    store = MemoryStore()
    read_back: list[int] = []
    read = store.read

    def counting_read(session_id, *, since=0):
        record, records = read(session_id, since=since)
        read_back.append(len(records))
        return record, records

    store.read = counting_read  # type: ignore[method-assign]  # observe the real store's answers
    mine, other = Sessions(store, Tokenizers(default="qwen3.6")), Sessions(store, Tokenizers(default="qwen3.6"))
    mine.create(session_id="s", tools=TOOLS)
    batches = turns(4)
    mine.append("s", from_openai_list(batches[0]))
    read_back.clear()
    for t in batches[1:3]:
        mine.append("s", from_openai_list(t))
        mine.build("s")
    assert sum(read_back) == 0  # nothing this replica wrote came back from the store
    other.append("s", from_openai_list(batches[3]))
    read_back.clear()
    result = mine.build("s").result
    assert read_back == [len(batches[3])]  # the other replica's messages, read once
    fresh = Sessions(store, Tokenizers(default="qwen3.6")).build("s").result  # a replica reading it all
    assert result.messages == fresh.messages and result.tokens == fresh.tokens


def test_a_cached_writer_appends_without_reading_and_catches_up_when_behind(redis_url):
    """A replica whose cached session is current appends in one store round trip (no read first);
    when another replica wrote or added an event meanwhile, the store's version check sends it back
    to read, and nothing is lost, doubled or left unapplied."""
    from budgeter.core.messages import to_openai
    from budgeter.store.redis import RedisStore

    store = RedisStore.from_url(redis_url)
    mine, other = Sessions(store, Tokenizers(default="qwen3.6")), Sessions(store, Tokenizers(default="qwen3.6"))
    mine.create(session_id="s", tools=TOOLS, policy={"window": 200_000})
    batches = turns(8)
    mine.append("s", from_openai_list(batches[0]))
    mine.build("s")
    before = store.round_trips
    mine.append("s", from_openai_list(batches[1]))
    assert store.round_trips - before == 1  # the append alone: no read of what this replica holds
    for k, t in enumerate(batches[2:], start=2):  # two writers, alternating: each is behind in turn
        (other if k % 2 else mine).append("s", from_openai_list(t))
    extra = [{"role": "user", "content": "catch up"}, {"role": "user", "content": "one more"}]
    mine.append("s", from_openai_list(extra[:1]))  # current again
    other.store.add_event("s", json.dumps({"kind": "snapshot_superseded", "path": "src/mod1.py", "at": 3}))
    before = store.round_trips
    last = mine.append("s", from_openai_list(extra[1:]))  # current by version, behind by one event
    assert last.current and store.round_trips - before == 2  # the append, then the event it reported
    assert mine.replica.cached("s").engine.superseded == {"src/mod1.py": 3}
    etag = mine.get("s").etag
    before = store.round_trips
    mine.append("s", from_openai_list([{"role": "user", "content": "with an etag"}]), etag=etag)
    assert store.round_trips - before == 1  # an etag naming the cached state: no read either
    with pytest.raises(EtagMismatch):  # the same etag again is stale: the caller's conflict
        mine.append("s", from_openai_list([{"role": "user", "content": "stale"}]), etag=etag)
    extra.append({"role": "user", "content": "with an etag"})
    expected = [m for t in batches for m in from_openai_list(t)] + from_openai_list(extra)
    for replica in (mine, other):
        assert [to_openai(m) for m in replica.live("s").engine.history] == [to_openai(m) for m in expected]
    assert store.read("s")[0].version == len(expected)
    store.close()


def test_a_retry_of_an_append_an_older_replica_stored_replays(redis_url):
    """Replicas before 2026-11-24 stored messages as JSON with spaces and fingerprinted that text.
    A retry of such an append (same request_id, same messages) that reaches a newer replica is
    answered as the replay it is: nothing is appended twice; other messages are still refused."""
    from budgeter.core.jsonargs import dumps_text
    from budgeter.core.messages import to_openai
    from budgeter.errors import RequestIdReused
    from budgeter.sessions.model import StoredMessage
    from budgeter.sessions.sessions import fingerprint
    from budgeter.store.redis import RedisStore

    store = RedisStore.from_url(redis_url)
    sessions = Sessions(store, Tokenizers(default="qwen3.6"))
    info = sessions.create(session_id="old", tools=TOOLS, policy={"window": 200_000})
    batch = from_openai_list(turns(2)[1])
    old_texts = [dumps_text(to_openai(m, extensions=True)) for m in batch]
    assert ", " in old_texts[0]  # the older form, spaces after separators
    store.append("old", [StoredMessage(t, "qwen3.6", 5).encode() for t in old_texts],
                 incarnation=info.record.incarnation, request_id="r1",
                 fingerprint=fingerprint([t.encode() for t in old_texts]),
                 result=json.dumps([[5, [], None] for _ in batch]))
    again = sessions.append("old", batch, request_id="r1")
    assert again.replayed and [a.index for a in again.messages] == list(range(len(batch)))
    assert store.read("old")[0].version == len(batch)
    with pytest.raises(RequestIdReused):
        sessions.append("old", from_openai_list([{"role": "user", "content": "other"}]), request_id="r1")
    fresh = sessions.append("old", batch, request_id="r2")  # today's form, compact
    assert not fresh.replayed and store.read("old", since=len(batch))[1][0].startswith('{"m": {"role":"')
    store.close()
