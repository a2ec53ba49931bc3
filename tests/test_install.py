"""What the base install and its extras hold: the base front doors (gRPC service, client, CLI with
the default tokenizer) run without any extra's packages, and a part that needs an extra says which
in one line. An extra is made absent in a subprocess by a ``None`` entry in ``sys.modules`` (its
import then fails as when it is not installed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import grpc
import pytest

import budgeter
from budgeter.client import Client, ClientError
from budgeter.errors import MissingExtra
from budgeter.service.errors import code_for

EXTRAS = [m for modules in MissingExtra.MODULES.values() for m in modules] + ["numpy", "httpx", "httpx_sse"]


def run(code: str, *, absent: list[str], args: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    prelude = f"import sys\nfor name in {absent!r}:\n    sys.modules[name] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=120)


def test_the_base_front_doors_need_no_extra():
    done = run("""
        import budgeter.cli, budgeter.client, budgeter.service.server
        from budgeter.core.messages import Message
        from budgeter.tokenizers import resolve
        counter = resolve(None)
        print(counter.count_prompt([Message("user", "hi")], []))
    """, absent=EXTRAS)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0


@pytest.mark.parametrize("absent", [["starlette", "uvicorn", "aiohttp", "msgspec"], ["msgspec"]])
def test_budgeter_proxy_without_the_proxy_extra(absent):
    done = run("from budgeter.cli import main\nsys.argv = ['budgeter', *sys.argv[1:]]\nmain()",
               absent=absent, args=("proxy", "--store", "memory://"))
    assert done.returncode == 2
    assert done.stderr == ("budgeter: MISSING_EXTRA: budgeter proxy needs the proxy extra: "
                           "pip install 'budgeter[proxy]'\n")


def test_each_part_names_its_extra(tmp_path):
    empty = tmp_path / "model.gguf"
    empty.write_bytes(b"")
    cases = {"redis": "from budgeter.store import open_store\nopen_store('redis://127.0.0.1:1/0')",
             "gguf": f"from budgeter.tokenizers import resolve\nresolve({str(empty)!r})",
             "mistral": "from budgeter.tokenizers import resolve\nresolve('mistral-tekken')"}
    for extra, code in cases.items():
        done = run(f"""
            from budgeter.errors import MissingExtra
            try:
                {code.replace(chr(10), chr(10) + ' ' * 16)}
            except MissingExtra as exc:
                print(exc.metadata['extra'], exc.message)
        """, absent=list(MissingExtra.MODULES[extra]))
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"{extra} "), done.stdout
        assert done.stdout.rstrip().endswith(f"needs the {extra} extra: pip install 'budgeter[{extra}]'")


def test_over_grpc_a_missing_extra_is_a_failed_precondition():
    assert code_for(MissingExtra("the mistral-tekken tokenizer", "mistral")) == grpc.StatusCode.FAILED_PRECONDITION


def test_serve_survives_its_package_replaced_on_disk(tmp_path):
    """`pip install` over a running `budgeter serve` replaces the package's files: the server runs
    from a copy of the package that is then deleted, and every RPC still answers (no INTERNAL)."""
    copy = tmp_path / "site"
    shutil.copytree(Path(budgeter.__file__).parent, copy / "budgeter", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    where = subprocess.run([sys.executable, "-c", "import budgeter; print(budgeter.__file__)"], env=env,
                           cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(copy))
    server = subprocess.Popen([sys.executable, "-m", "budgeter", "serve", "--port", "0", "--store", "memory://",
                               "--metrics-port", "0", "--log-level", "warning"],
                              env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("budgeter: serving on"), line + server.communicate(timeout=30)[1]
        port = int(line.split()[3].rpartition(":")[2])
        shutil.rmtree(copy)
        failed = every_rpc(Client(f"127.0.0.1:{port}", retries=0))
    finally:
        server.terminate()
        _, log = server.communicate(timeout=60)
    assert not failed, log


def every_rpc(client: Client) -> list[tuple[int, str]]:
    """The calls answered INTERNAL or UNKNOWN: (index, message)."""
    def call(name: str, **kw: Any) -> dict[str, Any]:
        return {"name": "write_file", "arguments": json.dumps(kw)}

    tools = [{"type": "function", "function": {"name": "write_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"]}}}]
    page = "<html><title>Shop</title></html>\n" * 40
    s = client.create_session(tools=tools, window=2000, reserve=200, protect_tail_turns=1)
    attempts = [
        lambda: s.append([{"role": "system", "content": "agent"}, {"role": "user", "content": "make a page"},
                          {"role": "assistant", "content": "", "tool_calls": [
                              {"id": "w1", "type": "function", "function": call("write_file", path="a.html",
                                                                                 content=page)}]},
                          {"role": "tool", "tool_call_id": "w1", "content": "ok " * 800}]),
        lambda: s.prompt(append=[{"role": "user", "content": "more " * 900}]),
        lambda: s.payload("nope"),
        lambda: client.count_tokens([{"role": "user", "content": "hi"}], tools=tools),
        lambda: client.count_tokens(text="hi", tokenizer="qwen2.5"),
        lambda: s.validate_tool_call({"id": "w2", "function": call("write_file", path="b.html")}),
        lambda: s.suggest_path(page),
        lambda: s.plan_edits([{"start_line": 1, "end_line": 1, "body": "x\n"}], snapshot="a\nb\n"),
        lambda: client.profile(s.id, tokenizers=["qwen3.6"], window=1000),
        lambda: s.events(),
        lambda: client.tokenizers(),
        lambda: client.get_session(s.id),
        lambda: client.list_sessions(),
        lambda: s.delete(),
    ]
    failed = []
    for n, attempt in enumerate(attempts):
        try:
            attempt()
        except ClientError as exc:
            if exc.code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
                failed.append((n, exc.message))
    return failed
