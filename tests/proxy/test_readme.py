"""The README's proxy section, run as written: its `budgeter proxy` command (as a process, in
front of a scripted upstream on port 8080), its OpenAI-SDK snippet, and the LiteLLM hook in
examples/ against that proxy's /v1/budgeter/fit."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.proxy.upstream import Running, Upstream

ROOT = Path(__file__).resolve().parents[2]


def section() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("## The OpenAI-compatible proxy", 1)[1].split("\n## ", 1)[0]


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT of an earlier run is fine
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def readme_proxy(tmp_path):
    if not (port_free(8080) and port_free(8400)):
        pytest.skip("ports 8080 and 8400 (the README's) are in use on this machine")
    command = re.search(r"```bash\n(budgeter proxy .*?)\n```", section()).group(1)
    argv = shlex.split(command)
    upstream = Upstream()
    running = Running(upstream.app, port=8080)
    env = {**os.environ, "BUDGETER_DATA_DIR": str(tmp_path)}  # the default SQLite store, kept out of ~
    proc = subprocess.Popen([sys.executable, "-m", "budgeter", *argv[1:]], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get("http://127.0.0.1:8400/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read().decode()
            time.sleep(0.2)
        yield upstream
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0].decode()
        running.stop()
    assert proc.returncode == 0 and "budgeter proxy: stopped" in out, out


def test_readme_proxy_and_agent_snippet_run_as_written(readme_proxy, capsys):
    code = re.search(r"```python\n(from openai import OpenAI.*?)```", section(), re.S).group(1)
    scope: dict = {}
    exec(code, scope)  # noqa: S102 - the documented snippet itself
    printed = capsys.readouterr().out
    assert printed.startswith("ok | px-")
    assert scope["messages"][-1] == {"role": "assistant", "content": "ok"}
    assert readme_proxy.received[0]["messages"] == scope["messages"][:2]


def test_litellm_hook_fits_through_the_proxy(readme_proxy):
    path = ROOT / "examples" / "litellm_budgeter_hook.py"
    spec = importlib.util.spec_from_file_location("litellm_budgeter_hook", path)
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "w", "arguments": '{"path": "a", "content": "x'}}]},
        {"role": "tool", "tool_call_id": "c", "content": "Error: cut"}]
    data = {"model": "local", "messages": messages, "temperature": 0}
    out = asyncio.run(hook.budgeter_fit.async_pre_call_hook(None, None, data, "acompletion"))
    assert out["model"] == "local" and out["temperature"] == 0 and len(out["messages"]) == 3
    import json

    json.loads(out["messages"][1]["tool_calls"][0]["function"]["arguments"])  # a valid stand-in now
