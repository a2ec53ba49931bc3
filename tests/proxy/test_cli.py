"""`budgeter proxy`: bad settings, an unloadable tokenizer and a busy port are clear errors with
exit code 2, never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "budgeter", "proxy", "--store", "memory://", *args],
                          capture_output=True, text=True, timeout=120)


def test_bad_settings_and_tokenizers_are_clear_errors():
    r = run("--window", "100", "--reserve", "200")
    assert r.returncode == 2 and "budgeter: INVALID_SETTINGS: reserve (200) must be smaller" in r.stderr
    r = run("--port", "70000")
    assert r.returncode == 2 and "INVALID_SETTINGS" in r.stderr
    r = run("--tokenizer", "/nonexistent/model-folder", "--port", "0")
    assert r.returncode == 2 and "budgeter: INVALID_TOKENIZER_SPEC:" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_busy_port_is_a_clear_error():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        r = run("--port", str(busy.getsockname()[1]))
    assert r.returncode == 2 and "budgeter: CANNOT_LISTEN: cannot listen on 127.0.0.1:" in r.stderr
    assert "Traceback" not in r.stderr


def test_settings_come_from_the_environment_too(tmp_path):
    import os

    env = {**os.environ, "BUDGETER_WINDOW": "100", "BUDGETER_RESERVE": "200"}
    r = subprocess.run([sys.executable, "-m", "budgeter", "proxy", "--store", "memory://"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "reserve (200) must be smaller than the window (100)" in r.stderr
    config = tmp_path / "budgeter.toml"
    config.write_text('upstream_read_timeout = -1\n')
    r = run("--config", str(config))
    assert r.returncode == 2 and "upstream_read_timeout" in r.stderr


def test_a_gguf_without_a_template_needs_chat_format(tmp_path, tiny_bpe_path):
    """The README's `--tokenizer X.gguf` on a GGUF that embeds no template is refused, saying to
    name the format; an unknown format is refused at once, with every known name."""
    from tests import llamacpp

    gguf = llamacpp.write_tiny_gguf(llamacpp.vocab_from_hf(tiny_bpe_path, pre="qwen2"), tmp_path / "bare.gguf")
    r = run("--tokenizer", str(gguf), "--port", "0")
    assert r.returncode == 2 and "budgeter: NO_CHAT_TEMPLATE: bare.gguf ships no chat template" in r.stderr
    assert "--chat-format (chatml, qwen3.6, qwen2.5, gemma3, or a .jinja file)" in r.stderr
    r = run("--tokenizer", str(gguf), "--chat-format", "gemma-3", "--port", "0")
    assert r.returncode == 2 and "budgeter: INVALID_TOKENIZER_SPEC: unknown chat format 'gemma-3'; known: " \
        "chatml, qwen3.6, qwen2.5, gemma3, or a .jinja file" in r.stderr
    assert "Traceback" not in r.stderr


def test_chat_formats_reach_the_profiles(tmp_path, tiny_bpe_path):
    from budgeter.proxy.server import open_sessions
    from budgeter.settings import Settings

    settings = Settings(store="memory://", tokenizers={"bare": tiny_bpe_path}, default_tokenizer="bare",
                        chat_formats="bare=chatml")
    sessions = open_sessions(settings)
    try:
        assert any("chatml (chosen)" in n for n in sessions.tokenizers.counter("bare").notes)
    finally:
        sessions.store.close()
