"""bench_service checks the counts of the prompts it replays: a count that differs from a fresh count
of the whole prompt is reported and fails the run (the latency figures stand only beside exact
counts)."""

from __future__ import annotations

import os
import threading

import pytest

from tests.bench import bench_service
from tests.bench.sessions import make_session

can_pin = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="this OS cannot pin threads to CPUs")


def checked(out: str, profile: str) -> tuple[int, str]:
    """How many prompts the replay of ``profile`` checked, and its row."""
    row = next(line for line in out.splitlines() if line.strip().startswith(profile))
    return int(row.split()[-3]), row


def test_replay_checks_every_kept_prompt(capsys: pytest.CaptureFixture[str]) -> None:
    bodies = [make_session(3, chars=40_000)]
    assert bench_service.run_profiles(["qwen3.6"], bodies, 8192)
    n, row = checked(capsys.readouterr().out, "qwen3.6")
    assert n >= 2 and row.endswith(f"{n} of {n}")


def test_a_count_that_is_not_exact_fails_the_run(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    fresh = bench_service.fresh_count
    monkeypatch.setattr(bench_service, "fresh_count", lambda *a: fresh(*a) + 1)
    assert not bench_service.run_profiles(["qwen3.6"], [make_session(3, chars=40_000)], 8192)
    out = capsys.readouterr().out
    assert "counted afresh" in out and " 0 of " in out


@can_pin
def test_pinned_puts_the_server_on_one_cpu_and_the_client_on_another() -> None:
    """``--pin``: the threads the server starts run on the first CPU, the client from then on on
    the second, and the calling thread may use all of them again afterwards."""
    cpus = sorted(os.sched_getaffinity(0))
    seen: list[set[int]] = []
    with bench_service.pinned(True) as client_side:
        started = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        started.start()
        started.join()
        client_side()
        client = os.sched_getaffinity(0)
    assert seen == [{cpus[0]}]
    assert client == {cpus[min(1, len(cpus) - 1)]}
    assert sorted(os.sched_getaffinity(0)) == cpus
    with bench_service.pinned(False) as client_side:
        client_side()
        assert sorted(os.sched_getaffinity(0)) == cpus


@can_pin
def test_a_pinned_replay_is_checked_alike(capsys: pytest.CaptureFixture[str]) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    assert bench_service.run_profiles(["qwen3.6"], [make_session(4, chars=20_000)], 8192, pin=True)
    n, row = checked(capsys.readouterr().out, "qwen3.6")
    assert n >= 1 and row.endswith(f"{n} of {n}")
    assert sorted(os.sched_getaffinity(0)) == cpus
