"""bench_service checks the counts of the prompts it replays: a count that differs from a fresh count
of the whole prompt is reported and fails the run (the latency figures stand only beside exact
counts)."""

from __future__ import annotations

import pytest

from tests.bench import bench_service
from tests.bench.sessions import make_session


def test_replay_checks_every_kept_prompt(capsys: pytest.CaptureFixture[str]) -> None:
    bodies = [make_session(3, chars=40_000)]
    assert bench_service.run_profiles(["qwen3.6"], bodies, 8192)
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.strip().startswith("qwen3.6"))
    checked = int(row.split()[-3])
    assert checked >= 2 and row.endswith(f"{checked} of {checked}")


def test_a_count_that_is_not_exact_fails_the_run(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    fresh = bench_service.fresh_count
    monkeypatch.setattr(bench_service, "fresh_count", lambda *a: fresh(*a) + 1)
    assert not bench_service.run_profiles(["qwen3.6"], [make_session(3, chars=40_000)], 8192)
    out = capsys.readouterr().out
    assert "counted afresh" in out and " 0 of " in out
