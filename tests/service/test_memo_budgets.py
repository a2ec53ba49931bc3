"""The process-wide memos that hold message text stay under their budget of characters while a
server plays many long sessions (``core/memo.py``), and the budget follows ``live_bytes``
(``sessions/replica.py``, ``memo_chars``). Accounting, not RSS: ``tests/bench/bench_memory.py``
measures the process."""

from __future__ import annotations

import operator

import pytest

from budgeter.client import Client
from budgeter.core import memo
from budgeter.service.server import create_server
from budgeter.sessions.replica import MIN_MEMO_CHARS, Replica, memo_chars
from budgeter.sessions.tokenizers import Tokenizers
from budgeter.store import MemoryStore
from tests.bench.bench_engine import turns
from tests.bench.sessions import make_session
from tests.service.conftest import settings
from tests.service.test_live_bytes import WINDOW

BUDGET = 40_000
"""Characters each memo may hold here: under what the sessions below hold together, so each memo
that sees them all turns over."""


@pytest.fixture
def small():
    before = memo.budget()
    srv = create_server(settings(live_bytes=300_000), store=MemoryStore())
    memo.configure(BUDGET)  # (under memo_chars' floor, to overflow it with a test's sessions)
    try:
        with Client(srv.target, timeout=60) as client:
            yield srv, client
    finally:
        srv.stop(0)
        memo.configure(before)


def over_budget() -> list[tuple[str, int, int]]:
    return [(type(m).__name__, m.chars, m.limit_chars) for m in memo.bounded() if m.chars > m.limit_chars]


def test_memos_stay_under_their_budgets_with_many_long_sessions(small):
    srv, client = small
    played = 0
    for seed in range(5):
        body = make_session(seed, chars=30_000)
        sid = client.create_session(tools=body["tools"], window=WINDOW).id
        for turn in turns(body["messages"], role=operator.itemgetter("role")):
            client.prompt(sid, append=turn)
            assert over_budget() == []
        played += sum(len(m.get("content") or "") for m in body["messages"])
    assert played > 2 * BUDGET
    counter = srv.sessions.tokenizers.counter(srv.sessions.tokenizers.name(""))
    assert 0 < counter._dicts.chars <= BUDGET < played  # it turned over
    assert all(m.limit_chars == BUDGET for m in memo.bounded())


def test_the_budget_follows_live_bytes():
    before = memo.budget()
    try:
        Replica(MemoryStore(), Tokenizers({}, default="qwen3.6"), limit_bytes=256 << 20)
        assert memo.budget() == memo_chars(256 << 20) == 8 << 20
        Replica(MemoryStore(), Tokenizers({}, default="qwen3.6"), limit_bytes=1 << 20)
        assert memo.budget() == MIN_MEMO_CHARS
    finally:
        memo.configure(before)
