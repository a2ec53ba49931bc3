"""examples/agent_loop.py, the README's agent loop, run as written: a real budgeter server and a
scripted OpenAI-compatible model that repeats an empty-path write three times, or asks to write
outside --workdir."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from budgeter.service.server import create_server
from budgeter.store.memory import MemoryStore
from tests.service.conftest import settings

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "agent_loop.py"
PAGE = "<!DOCTYPE html><html><head><title>Shop</title></head><body>" + "<p>offer</p>" * 590 + "</body></html>"


def test_the_readme_shows_the_example_file_as_it_is():
    readme = (ROOT / "README.md").read_text()
    shown = re.search(r"```python\n(\"\"\"A complete agent loop over budgeter.*?)```", readme, re.S)
    assert shown is not None, "the README must show examples/agent_loop.py"
    assert shown.group(1) == EXAMPLE.read_text()


@pytest.fixture
def servers():
    pytest.importorskip("openai")
    from tests.proxy.upstream import Running, Script, Upstream

    srv = create_server(settings(), store=MemoryStore())
    upstream = Upstream()
    running = Running(upstream.app)
    write = json.dumps({"path": "", "content": PAGE})
    upstream.script(*[Script(tool_calls=[{"id": f"w{i}", "name": "write_file", "arguments": write}],
                             finish_reason="tool_calls") for i in range(3)],
                    Script(content="I cannot write that file."))
    try:
        yield srv, upstream, running
    finally:
        running.stop()
        srv.stop(0)


def test_the_agent_loop_runs_no_failing_call(servers, tmp_path):
    srv, upstream, running = servers
    out = subprocess.run([sys.executable, str(EXAMPLE), "Write a shop page", "--llm", running.base_url,
                          "--budgeter", srv.target, "--workdir", str(tmp_path / "ws")],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0 tool calls run"  # the empty-path write ran zero times
    assert not (tmp_path / "ws").exists()
    assert len(upstream.received) == 4
    last = upstream.received[-1]["messages"]
    pages = sum(PAGE in json.dumps(m) for m in last)
    assert pages == 1  # only the newest, not yet answered attempt is verbatim; x3 folded into it
    results = [m["content"] for m in last if m["role"] == "tool"]
    assert len(results) == 1 and "x3" in results[0] and "Error: not run:" in results[0]


def test_the_agent_loop_writes_nothing_outside_its_workdir(tmp_path):
    """A scripted model asks for ../escaped.txt, an absolute path outside --workdir, and a path
    through a symlink that leads out of it (lexically inside, so budgeter's verdict lets it run:
    the loop's own resolve-and-check refuses it); only the write inside lands."""
    pytest.importorskip("openai")
    from tests.proxy.upstream import Running, Script, Upstream

    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (ws / "link").symlink_to(outside, target_is_directory=True)
    asks = ["../escaped.txt", str(tmp_path / "absolute.txt"), "link/through.txt", str(ws / "kept.txt")]
    srv = create_server(settings(), store=MemoryStore())
    upstream = Upstream()
    running = Running(upstream.app)
    upstream.script(*[Script(tool_calls=[{"id": f"w{i}", "name": "write_file",
                                          "arguments": json.dumps({"path": path, "content": "x"})}],
                             finish_reason="tool_calls") for i, path in enumerate(asks)],
                    Script(content="Done."))
    try:
        out = subprocess.run([sys.executable, str(EXAMPLE), "Write files", "--llm", running.base_url,
                              "--budgeter", srv.target, "--workdir", str(ws)],
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
    finally:
        running.stop()
        srv.stop(0)
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["kept.txt", "link", "outside", "ws"]
    assert (ws / "kept.txt").read_text() == "x"
    results = [m["content"] for m in upstream.received[-1]["messages"] if m["role"] == "tool"]
    assert len(results) == 4 and results[3].startswith("wrote ")
    assert all("Error" in r for r in results[:3]), results
    assert "outside the workspace" in results[2]  # refused by the loop itself, not by the verdict
