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


def test_readme_tokenizer_examples_run_as_written(tmp_path, tiny_bpe_path, monkeypatch):
    """Each `budgeter ...` line of README's Tokenizers block, run in a folder holding the files it
    names (request.json, model.gguf, an Ollama models folder with qwen3:8b)."""
    import os
    import re
    from pathlib import Path

    from budgeter.tokenizers.formats import template_text
    from tests import llamacpp
    from tests.tokenizers.test_ollama import CHATML_GO, _install

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Tokenizers (`--tokenizer SPEC`)")[1].split("```bash")[1].split("```")[0]
    commands = [line.split("#")[0].split() for line in block.splitlines() if line.startswith("budgeter ")]
    assert len(commands) >= 5
    messages, tools = session_dicts(7, chars=4_000)
    (tmp_path / "request.json").write_text(json.dumps({"messages": messages, "tools": tools}))
    vocab = llamacpp.vocab_from_hf(tiny_bpe_path, pre="qwen2")
    gguf = llamacpp.write_tiny_gguf(vocab, tmp_path / "model.gguf")
    vocab.chat_template = template_text("qwen2.5")
    _install(tmp_path / "models", "qwen3:8b", llamacpp.write_tiny_gguf(vocab, tmp_path / "q.gguf"),
             template=CHATML_GO)
    assert gguf.exists()
    env = {**os.environ, "OLLAMA_MODELS": str(tmp_path / "models")}
    for argv in commands:
        out = subprocess.run([sys.executable, "-m", "budgeter", *argv[1:]], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, (argv, out.stderr)
        if argv[1] == "render":
            assert re.search(r"^# \S+: \d+ tokens$", out.stderr, re.M), out.stderr


def test_trim_and_render_warn_in_one_line_when_the_request_is_rewritten(tmp_path, llama3_path):
    """The shared Llama 3.1 template renders neither tools nor tool calls: the request is sent with
    them as text, and trim and render say so on stderr; a request sent as given gets no warning."""
    tools = [{"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                                               "parameters": {"type": "object", "properties": {}}}}]
    body = tmp_path / "b.json"
    body.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}], "tools": tools}))
    for command in ("trim", "render"):
        out = run(command, str(body), "-t", llama3_path)
        assert out.returncode == 0, out.stderr
        warnings = [line for line in out.stderr.splitlines() if line.startswith("budgeter: warning:")]
        assert len(warnings) == 1 and "rewritten for llama3_1's template" in warnings[0], out.stderr
        assert "does not render tool schemas: counted (and sent) as a system message" in warnings[0]
    plain = run("trim", str(body), "-t", "qwen3.6")
    assert plain.returncode == 0 and "warning" not in plain.stderr, plain.stderr
