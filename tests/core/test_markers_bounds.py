"""A marker's handles can always be read back, whatever its parts hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from budgeter.core import Engine, Policy
from budgeter.core.markers import CLOSE, OPEN, handles_in, marker
from budgeter.core.messages import from_openai_list

REPRO = Path(__file__).resolve().parents[3] / "shared" / "repro" / "drop-indexerror.json"


def test_a_long_or_bracketed_part_keeps_the_handle_readable():
    for name in ("t" * 5000, f"a{CLOSE}b", f"{OPEN}x{CLOSE}" * 300):
        text = marker("digest", f"calls: {name} x2", "h=0123456789abcdef")
        assert handles_in(text) == ["0123456789abcdef"], name[:20]
        assert text.count(CLOSE) == 1 and len(text) < 400


def test_the_hardening_issues_drop_repro_builds(qwen36):
    """91 messages whose tool name is thousands of characters long, built at window 3000 with no
    reserve: the digest's handle was lost and the build raised IndexError (INTERNAL)."""
    if not REPRO.exists():
        pytest.skip("../shared/repro is absent (only beside the project checkout)")
    tools = [{"type": "function", "function": {"name": "write_file", "parameters": {
                 "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                 "required": ["path", "content"]}}},
             {"type": "function", "function": {"name": "read_file", "parameters": {
                 "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
    session = Engine(qwen36, policy=Policy(window=3000, reserve=0), tools=tools)
    session.append(from_openai_list(json.loads(REPRO.read_text())))
    r = session.build()
    assert r.tokens <= 3000
    digests = [m.content for m in r.messages if "budgeter:digest" in m.content]
    assert digests and all(h in r.handles for d in digests for h in handles_in(d))
