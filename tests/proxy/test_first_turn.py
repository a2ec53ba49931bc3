"""A fresh proxy's first turns import nothing: what they need is loaded before it serves (a module
loaded on a turn costs that turn its loading, ~10 ms for anyio's backend under the first streamed
reply, and could come from another version after a ``pip install`` over the running proxy)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

CODE = textwrap.dedent("""
    import json, sys, tempfile
    import httpx
    from tests.proxy.upstream import Running, Upstream
    from budgeter.proxy.server import start
    from budgeter.settings import Settings

    up = Running(Upstream().app)
    httpx.get(up.base_url + "/models")  # the test's own client, loaded before the count starts
    with tempfile.TemporaryDirectory() as tmp:
        proxy = start(Settings(upstream=up.base_url, store=f"sqlite://{tmp}/b.db", proxy_port=0, metrics_port=0))
        before = set(sys.modules)
        tools = [{"type": "function", "function": {"name": "read_file", "parameters": {
            "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
        messages = [{"role": "user", "content": "read a.txt"}]
        with httpx.Client(base_url=proxy.base_url.removesuffix("/v1"), timeout=60) as client:
            for stream in (False, True, True):
                r = client.post("/v1/chat/completions", headers={"x-budgeter-session": "first"},
                                json={"model": "m", "messages": messages, "tools": tools, "stream": stream})
                assert r.status_code == 200, r.text
                messages += [{"role": "assistant", "content": r.text[:20]}, {"role": "user", "content": "again"}]
            for path in ("/health", "/health/liveness", "/metrics", "/v1/models"):
                r = client.get(path)
                assert r.status_code == 200, (path, r.text)
            assert client.post("/v1/budgeter/fit", json={"messages": messages}).status_code == 200
        print(json.dumps(sorted(set(sys.modules) - before)))
        proxy.stop()
    up.stop()
""")


def test_a_fresh_proxy_imports_nothing_on_its_first_turns():
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
