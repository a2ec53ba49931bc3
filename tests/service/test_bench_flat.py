"""bench_flat's session-layer part on small held-out sessions: each store's child counts the turns
asked for at each size, and the table has a row per store and size, the 100K one the base."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _bench(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "tests.bench.bench_flat", *args], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_layer_child_counts_the_last_turns_of_each_size() -> None:
    out = json.loads(_bench("--layer-child", "sqlite", "--sizes", "20000", "100000", "--turns", "3").splitlines()[-1])
    assert sorted(out) == ["100000", "20000"]
    for per_turn in out.values():
        assert len(per_turn) == 3 and all(ms > 0 for ms in per_turn), out


def test_layer_table_has_a_row_per_store_and_size() -> None:
    out = _bench("--only", "layer", "--sizes", "20000", "100000", "--turns", "3")
    rows = re.findall(r"^\| (memory|sqlite) \| ([\d,]+) \| ([\d.]+) ms \| ([\d.]+) ms \| ([\d.]+)x \|$", out, re.M)
    assert [(r[0], r[1]) for r in rows] == [("memory", "20,000"), ("memory", "100,000"),
                                            ("sqlite", "20,000"), ("sqlite", "100,000")], out
    assert all(r[4] == "1.00" for r in rows if r[1] == "100,000"), out
    assert all(float(r[2]) > 0 for r in rows), out


def test_shared_layout_table_has_a_row_per_store_and_size() -> None:
    out = _bench("--only", "shared", "--sizes", "20000", "100000", "--turns", "3")
    assert "one server holding every size's session" in out, out
    rows = re.findall(r"^\| (memory|sqlite) \| ([\d,]+) \| \d+ \| ([\d.]+) ms \| [\d.]+ ms \| [\d.]+ ms \| ([\d.]+)x "
                      r"\| ([\d.]+) ms \|$", out, re.M)
    assert [(r[0], r[1]) for r in rows] == [("memory", "20,000"), ("memory", "100,000"),
                                            ("sqlite", "20,000"), ("sqlite", "100,000")], out
    assert all(r[3] == "1.00" for r in rows if r[1] == "100,000"), out
    assert all(float(r[2]) > 0 and float(r[4]) > 0 for r in rows), out
