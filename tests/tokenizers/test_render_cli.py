"""`budgeter render` prints the exact counted text; `budgeter tokenizers` names each template."""

import json
import subprocess
import sys

import pytest

from budgeter.core.messages import from_openai_list
from budgeter.tokenizers import resolve
from budgeter.tokenizers.registry import BUILTINS
from tests.tokenizers.agent_sessions import session_dicts


def run(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "budgeter", *args], input=stdin, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def body(tmp_path_factory):
    messages, tools = session_dicts(6, chars=8_000)
    path = tmp_path_factory.mktemp("render") / "body.json"
    path.write_text(json.dumps({"messages": messages, "tools": tools}, ensure_ascii=False), encoding="utf-8")
    return path, messages, tools


@pytest.mark.parametrize("spec", ["qwen3.6", "qwen3.6@vllm"])
def test_render_prints_the_counted_text(body, spec):
    path, messages, tools = body
    out = run("render", str(path), "--tokenizer", spec)
    assert out.returncode == 0, out.stderr
    counter = resolve(spec)
    parsed = from_openai_list(messages)
    assert out.stdout == counter.render(parsed, tools)
    tokens = counter.count_prompt(parsed, tools)
    assert len(counter.pieces.tokenizer.encode_full(out.stdout)) == tokens
    assert f"# {counter.name}: {tokens} tokens" in out.stderr
    assert all(f"# {n}" in out.stderr for n in counter.notes)


def test_render_mistral_decodes_its_own_encoding():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi 你好"},
                {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "again"}]
    out = run("render", "-", "--tokenizer", "mistral-tekken", stdin=json.dumps({"messages": messages}))
    assert out.returncode == 0, out.stderr
    counter = resolve("mistral-tekken")
    parsed = from_openai_list(messages)
    assert out.stdout.startswith("<s>[INST]") and "[/INST]Hello</s>" in out.stdout
    assert f"# mistral-tekken: {counter.count_prompt(parsed, [])} tokens" in out.stderr


def test_render_server_option_and_clear_errors(body):
    path, _, _ = body
    llama = run("render", str(path), "--server", "llama.cpp").stdout
    vllm = run("render", str(path), "--server", "vllm").stdout
    assert llama.count("<think>") > vllm.count("<think>")
    bad = run("render", str(path), "--server", "nope")
    assert bad.returncode == 2 and "INVALID_TOKENIZER_SPEC" in bad.stderr and "Traceback" not in bad.stderr
    assert run("render", "/no/such.json").returncode == 2


def test_tokenizers_lists_each_builtin_with_its_template():
    out = run("tokenizers")
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    for name, builtin in BUILTINS.items():
        line = next(x for x in lines if x.split("\t")[0].split(" ")[0] == name)
        assert f"template: {builtin.template}" in line
    assert "qwen3.6 (default)" in out.stdout and "Qwen3.6 published chat template" in out.stdout
    assert "ollama:NAME" in out.stdout
