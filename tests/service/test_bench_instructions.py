"""bench_instructions on a small held-out session: a row per size with the turns counted, and the
same count on a second run (the figure is meant to not move with the machine)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.bench_instructions import missing

REPO = Path(__file__).resolve().parents[2]
ARGS = ["--sizes", "20000", "--turns", "3"]

pytestmark = pytest.mark.skipif(bool(missing()), reason=f"bench_instructions cannot run: {missing()}")


def _run() -> tuple[str, float]:
    done = subprocess.run([sys.executable, "-m", "tests.bench.bench_instructions", *ARGS], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    row = re.search(r"^\| 20,000 \| (\d+) \| ([\d.]+)M \| ([\d.]+)M \| ([\d.]+)M \| 1\.00x \| ([\d,]+) \|$",
                    done.stdout, re.M)
    assert row is not None, done.stdout
    assert done.stdout.splitlines()[0] == "    python -m tests.bench.bench_instructions " + " ".join(ARGS)
    assert int(row[1]) == 3 and 0 < float(row[2]) <= float(row[3]), done.stdout
    assert int(row[5].replace(",", "")) > 0, "the counted turns tokenized nothing: their texts were counted before"
    return done.stdout, float(row[2])


def test_counts_each_turn_and_repeats() -> None:
    _, first = _run()
    _, second = _run()
    assert abs(first - second) <= 0.01 * first, (first, second)
