"""tests/llamacpp.py itself: a tiny GGUF around a real tokenizer, served by a real llama-server,
renders and counts a request exactly as transformers does."""

import pytest

from tests import llamacpp

MESSAGES = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hello 你好 🎉 — read `main.py`"}]


@pytest.fixture(scope="module")
def binary():
    return llamacpp.require_server()


@pytest.mark.parametrize("folder", ["qwen3", "llama3_1"])
def test_tiny_gguf_counts_like_transformers(binary, tmp_path, folder):
    from tests.conftest import shared_tokenizer

    path = shared_tokenizer(folder)
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(path)
    expected = hf.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)
    expected = expected["input_ids"] if hasattr(expected, "keys") else expected
    model = llamacpp.write_tiny_gguf(llamacpp.vocab_from_hf(path), tmp_path / "m.gguf")
    with llamacpp.serve(model) as url:
        assert llamacpp.chat_prompt_tokens(url, MESSAGES) == len(expected)
        text = llamacpp.apply_template(url, MESSAGES)
        assert llamacpp.tokenize(url, text, add_special=True) == list(expected)


def test_skip_reason_names_the_build_script(monkeypatch, tmp_path):
    monkeypatch.setenv("BUDGETER_CACHE", str(tmp_path))
    monkeypatch.delenv("BUDGETER_LLAMA_SERVER", raising=False)
    assert llamacpp.server_binary() is None
    assert "build-llama-server" in (llamacpp.skip_reason() or "")
