"""bench_peers, the README's peer comparison, on a tiny held-out session: every peer's row is there,
budgeter's prompts all fit by the exact count and keep every tool call with its result, and the
growth table has both stores. Behaviour only; the figures are the benchmark's to print."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.bench_service import SHARED

REPO = Path(__file__).resolve().parents[2]
ARGS = ["--quick", "--chars", "20000", "--turns", "3", "--growth", "20000", "40000", "--growth-turns", "4",
        "--no-llamacpp"]

pytestmark = pytest.mark.skipif(not (SHARED / "qwen3" / "tokenizer.json").exists(),
                                reason="the shared qwen3 tokenizer folder is absent")


def test_quick_run_prints_every_peer_and_budgeter_fits_with_pairs() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "tests.bench.bench_peers", *ARGS], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=280, check=False)
    out = done.stdout
    assert done.returncode == 0, done.stderr[-3000:]
    assert out.splitlines()[0] == "    python -m tests.bench.bench_peers " + " ".join(ARGS)
    rows = {m[0]: m[1:] for m in re.findall(r"^\| ([^|]+?) \| (\d+) \| [\d.]+ \| [\d.]+ \| [\d.]+x \| [^|]+ \| "
                                           r"(\d+)/(\d+) \(\d+%\) \| (\d+)/(\d+) \(\d+%\) \|", out, re.M)}
    expected = ["budgeter engine (append + build)", "budgeter gRPC (budgeter serve, memory store, one call)",
                "transformers apply_chat_template + tokenizer, drop oldest",
                "LangChain trim_messages, docs' counter on the HF tokenizer",
                "LangChain trim_messages, count_tokens_approximately"]
    if importlib.util.find_spec("litellm"):
        expected.append("LiteLLM trim_messages (its counter)")
    assert sorted(rows) == sorted(expected), out
    for name in expected[:2]:
        turns, fit, fit_of, pairs, pairs_of = (int(x) for x in rows[name])
        assert turns == 3 and fit == fit_of == pairs == pairs_of == 3, out
    exact = re.search(r"budgeter's reported count equalled the exact count on (\d+) of (\d+) prompts", out)
    assert exact is not None and exact[1] == exact[2] == "3", out
    assert "llama.cpp: skipped (--no-llamacpp)" in out
    assert re.search(r"^\| budgeter gRPC \| [\d.]+ ms \([\d.]+x\), fit 3/3 \|$", out, re.M), out
    growth = re.findall(r"^\| (memory|sqlite) \| ([\d,]+) \| \d+ \| [\d.]+ ms \| [\d.]+ \| [\d.]+x \|$", out, re.M)
    assert growth == [("memory", "20,000"), ("memory", "40,000"), ("sqlite", "20,000"), ("sqlite", "40,000")], out
