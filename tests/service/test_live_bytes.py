"""A replica's cache of engine state stays under its byte bound (``live_bytes``) by evicting the
least recently used sessions; an evicted session is read from the store again and builds the same
prompt, and a session larger than the whole bound still works."""

from __future__ import annotations

import operator
from typing import Any

import pytest

from budgeter.client import Client
from budgeter.service.server import create_server
from budgeter.sessions.replica import Replica, footprint
from budgeter.store import MemoryStore
from tests.bench.bench_engine import turns
from tests.bench.sessions import make_session
from tests.service.conftest import settings

WINDOW = 400_000
"""Large enough that no build compacts: a session loaded again builds the same prompt."""


def check_accounting(replica: Replica) -> None:
    cached = [replica.cached(sid) for sid in list(replica._live)]
    assert all(live is not None and live.size == footprint(live.engine.history) for live in cached)
    assert replica.used == sum(live.size for live in cached if live is not None)
    assert replica.used <= replica.limit_bytes or len(replica) == 1


@pytest.fixture
def bounded(request):
    srv = create_server(settings(live_bytes=request.param), store=MemoryStore())
    with Client(srv.target, timeout=60) as client:
        yield srv, client
    srv.stop(0)


def play(client: Client, replica: Replica, seed: int, chars: int) -> tuple[str, Any]:
    body = make_session(seed, chars=chars)
    sid = client.create_session(tools=body["tools"], window=WINDOW).id
    prompt = None
    for turn in turns(body["messages"], role=operator.itemgetter("role")):
        prompt = client.prompt(sid, append=turn)
        check_accounting(replica)
    return sid, prompt


@pytest.mark.parametrize("bounded", [1_500_000], indirect=True)
def test_the_cache_evicts_to_stay_under_its_byte_bound(bounded):
    srv, client = bounded
    replica = srv.sessions.replica
    played = [play(client, replica, seed, 60_000) for seed in range(5)]
    assert 1 < len(replica) < 5  # some were evicted, by bytes (not by the 512-session count)
    assert replica.cached(played[0][0]) is None
    assert replica.cached(played[-1][0]) is not None
    for sid, last in played:  # evicted or not, each builds the prompt it built last
        again = client.prompt(sid)
        assert (again.tokens, again.messages) == (last.tokens, last.messages)
        assert replica.cached(sid) is not None  # read from the store again
        check_accounting(replica)


@pytest.mark.parametrize("bounded", [100_000], indirect=True)
def test_a_session_larger_than_the_bound_still_works(bounded):
    srv, client = bounded
    replica = srv.sessions.replica
    big, last = play(client, replica, 0, 60_000)
    live = replica.cached(big)
    assert live is not None and live.size > replica.limit_bytes and len(replica) == 1  # kept while in use
    other, _ = play(client, replica, 1, 5_000)
    assert replica.cached(big) is None and replica.cached(other) is not None  # evicted once another was used
    again = client.prompt(big, append=[{"role": "user", "content": "Run the tests again."}])
    assert again.tokens > last.tokens and again.messages[:-1] == last.messages
    assert replica.cached(big) is not None and replica.cached(other) is None
    check_accounting(replica)
