"""A replica's cached session never silently diverges from the store. A Redis failover can lose a
write a replica cached (the primary died before replicating it); another replica then appends at
the lost index and the two histories have one length. Here the loss is made by hand on a real
Redis: the session's keys are put back as they were before the append (DUMP/RESTORE), as the
promoted replica would hold them."""

from __future__ import annotations

import pytest
import redis

from budgeter.core.messages import from_openai_list
from budgeter.errors import EtagMismatch
from budgeter.sessions.sessions import Sessions
from budgeter.sessions.tokenizers import Tokenizers
from budgeter.store.redis import RedisStore


def user(text: str):
    return from_openai_list([{"role": "user", "content": text}])


def history(sessions: Sessions) -> list[str]:
    return [str(m.content) for m in sessions.build("s").result.messages]


def lose_what_follows(store: RedisStore):
    """Snapshot the session's keys; calling the result puts them back and drops the request_id
    records written since (everything a primary that died unreplicated takes with it)."""
    raw = redis.Redis.from_url(_url(store))
    keys = store.keys("s")
    saved = {k: raw.dump(keys[k]) for k in ("meta", "msgs")}
    requests = set(raw.keys(keys["req"] + ":*"))

    def lose() -> None:
        for k, blob in saved.items():
            raw.restore(keys[k], 0, blob, replace=True)
        for key in set(raw.keys(keys["req"] + ":*")) - requests:
            raw.delete(key)
        raw.close()
    return lose


def _url(store: RedisStore) -> str:
    kw = store.client.connection_pool.connection_kwargs
    return f"redis://{kw['host']}:{kw['port']}/{kw.get('db', 0)}"


def test_a_replica_whose_cached_write_was_lost_reloads_instead_of_serving_it(redis_url):
    a = Sessions(RedisStore.from_url(redis_url), Tokenizers(default="qwen3.6"))
    b = Sessions(RedisStore.from_url(redis_url), Tokenizers(default="qwen3.6"))
    a.create(session_id="s", policy={"window": 200_000})
    a.append("s", user("before"))
    lose = lose_what_follows(a.store)  # type: ignore[arg-type]
    lost = a.append("s", user("lost"), request_id="r-lost")
    assert history(a) == ["before", "lost"]
    lose()
    other = b.append("s", user("other"))  # at the lost index: the same version as the lost append
    assert other.message_count == lost.message_count and other.etag != lost.etag
    assert history(a) == history(b) == ["before", "other"]  # a reloads; it does not serve "lost"
    with pytest.raises(EtagMismatch):  # the lost append's etag names a history that is gone
        a.append("s", user("on top of lost"), etag=lost.etag)
    again = a.append("s", user("lost"), request_id="r-lost")  # the client's retry: stored anew
    assert not again.replayed
    a.append("s", user("next"))  # a's cache appends without reading first, onto the store's line
    assert history(a) == history(b) == ["before", "other", "lost", "next"]
    a.store.close()
    b.store.close()


def test_a_cached_writer_appending_onto_a_diverged_line_does_not_write_through(redis_url):
    """The lost write's replica appends next (no read first, its cache at the same version as the
    store): the store finds the digest differs, and the replica reads the store's line first."""
    a = Sessions(RedisStore.from_url(redis_url), Tokenizers(default="qwen3.6"))
    b = Sessions(RedisStore.from_url(redis_url), Tokenizers(default="qwen3.6"))
    a.create(session_id="s", policy={"window": 200_000})
    a.append("s", user("before"))
    lose = lose_what_follows(a.store)  # type: ignore[arg-type]
    a.append("s", user("lost"))
    lose()
    b.append("s", user("other"))
    a.append("s", user("mine"))
    assert history(a) == history(b) == ["before", "other", "mine"]
    a.store.close()
    b.store.close()
