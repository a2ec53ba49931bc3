"""``ollama:NAME[:TAG]`` resolves a models folder the test writes in Ollama's layout."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from budgeter.errors import InvalidTokenizerSpec, UnknownTokenizer
from budgeter.tokenizers import ollama, resolve
from budgeter.tokenizers.formats import template_text
from tests import llamacpp
from tests.tokenizers.agent_sessions import session

CHATML_GO = """{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
"""
LLAMA2_GO = "{{ if .System }}<<SYS>>{{ .System }}<</SYS>>{{ end }}[INST] {{ .Prompt }} [/INST]"


def _blob(root: Path, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / digest.replace(":", "-")).write_bytes(data)
    return digest


def _install(root: Path, name: str, gguf: Path, *, template: str | None, system: str | None = None) -> None:
    host, namespace, model, tag = ollama.parse_name(name)
    layers = [{"mediaType": ollama.MODEL, "digest": _blob(root, gguf.read_bytes()), "size": gguf.stat().st_size}]
    for kind, text in ((ollama.TEMPLATE, template), (ollama.SYSTEM, system)):
        if text is not None:
            layers.append({"mediaType": kind, "digest": _blob(root, text.encode()), "size": len(text)})
    manifest = root / "manifests" / host / namespace / model / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "config": {}, "layers": layers}))


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_bpe_path):
    """An Ollama models folder: a tiny GGUF (ChatML vocabulary, Qwen2.5's Jinja template) pulled
    under three names, with a matching Go template, a different one, and none."""
    work = tmp_path_factory.mktemp("ollama")
    vocab = llamacpp.vocab_from_hf(tiny_bpe_path, pre="qwen2", chat_template=template_text("qwen2.5"))
    vocab.eos = vocab.tokens.index("<|im_end|>")
    gguf = llamacpp.write_tiny_gguf(vocab, work / "tiny.gguf")
    root = work / "models"
    _install(root, "tiny:latest", gguf, template=CHATML_GO, system="You are a helpful assistant.")
    _install(root, "someone/tiny-llama2:q4", gguf, template=LLAMA2_GO)
    _install(root, "example.com/ns/bare:v1", gguf, template=None)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OLLAMA_MODELS", str(root))
        yield root, gguf


def test_name_parsing():
    assert ollama.parse_name("qwen3") == ("registry.ollama.ai", "library", "qwen3", "latest")
    assert ollama.parse_name("qwen3:8b") == ("registry.ollama.ai", "library", "qwen3", "8b")
    assert ollama.parse_name("me/m:q4") == ("registry.ollama.ai", "me", "m", "q4")
    assert ollama.parse_name("localhost:5000/ns/m:1") == ("localhost:5000", "ns", "m", "1")
    for bad in ("", "a b", "../x", "a/b/c/d", "/x"):
        with pytest.raises(InvalidTokenizerSpec):
            ollama.parse_name(bad)


def test_counts_like_the_gguf_blob_and_says_the_go_template_agrees(models):
    _, gguf = models
    messages, tools = session(2, chars=10_000)
    counter = resolve("ollama:tiny")
    assert counter.count_prompt(messages, tools) == resolve(str(gguf)).count_prompt(messages, tools)
    notes = " ".join(counter.notes)
    assert "Ollama model tiny:latest" in notes and "agrees with the GGUF's Jinja template" in notes
    assert "default SYSTEM prompt" in notes


def test_a_different_go_template_is_reported_as_approximate(models):
    notes = " ".join(resolve("ollama:someone/tiny-llama2:q4").notes)
    assert "differs from the GGUF's Jinja template" in notes and "[INST]" in notes and "approximate" in notes
    notes = " ".join(resolve("ollama:example.com/ns/bare:v1").notes)
    assert "no TEMPLATE layer" in notes


def test_unknown_model_lists_what_is_installed(models):
    with pytest.raises(UnknownTokenizer) as err:
        resolve("ollama:nope:7b")
    assert "tiny:latest" in err.value.metadata["available"]
    assert "someone/tiny-llama2:q4" in err.value.message


def test_models_dir_follows_ollama_models(monkeypatch, tmp_path):
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path))
    assert ollama.models_dir() == tmp_path
    monkeypatch.delenv("OLLAMA_MODELS")
    assert ollama.models_dir() == Path.home() / ".ollama" / "models"


def test_ollama_blob_served_by_llama_server_counts_the_same(models):
    """The extension-less blob is the GGUF llama.cpp would load: its count is the server's."""
    from budgeter.core.messages import to_openai

    llamacpp.require_server()
    _, gguf = models
    counter = resolve("ollama:tiny")
    blob = ollama.find("tiny").gguf
    messages, tools = session(2, chars=6_000)
    with llamacpp.serve(blob) as url:
        assert counter.count_prompt(messages, tools) == \
            llamacpp.chat_prompt_tokens(url, [to_openai(m) for m in messages], tools)
