from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from budgeter.proxy.server import ProxyServer, open_sessions, start
from budgeter.settings import Settings
from tests.proxy.upstream import Running, Upstream


def proxy_settings(upstream: str, tokenizer: str, **kw: Any) -> Settings:
    values: dict[str, Any] = {"upstream": upstream, "store": "memory://", "proxy_port": 0,
                              "tokenizers": {"qwen3": tokenizer}, "default_tokenizer": "qwen3",
                              "window": 4096, "reserve": 512, "upstream_read_timeout": 5.0,
                              "metrics_port": 0, **kw}
    return Settings(**values)


def template_dicts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """As vLLM and llama.cpp do: tool-call arguments parsed into objects before the template."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            calls = []
            for tc in m["tool_calls"]:
                fn = dict(tc["function"])
                with contextlib.suppress(ValueError, RecursionError):
                    fn["arguments"] = json.loads(fn["arguments"])
                calls.append({**tc, "function": fn})
            m["tool_calls"] = calls
        out.append(m)
    return out


@pytest.fixture(scope="session")
def hf_count(qwen3_path):
    """transformers' count of a received chat-completions body (the scripted upstream's usage)."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(qwen3_path)

    def count(body: dict[str, Any]) -> int:
        ids = hf.apply_chat_template(template_dicts(body["messages"]), tools=body.get("tools") or None,
                                     add_generation_prompt=True, tokenize=True)
        return len(ids["input_ids"] if hasattr(ids, "keys") else ids)

    return count


@pytest.fixture
def upstream(hf_count) -> Iterator[Upstream]:
    up = Upstream(count=hf_count)
    running = Running(up.app)
    up.base_url = running.base_url  # type: ignore[attr-defined]
    yield up
    running.stop()


class Proxied:
    """A running proxy in front of a scripted upstream, with an official OpenAI client."""

    def __init__(self, server: ProxyServer, upstream: Upstream | None) -> None:
        import openai

        self.server = server
        self.upstream = upstream
        self.sessions = server.sessions
        self.client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=30)

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def tokenizer_lock(self) -> Any:
        """The lock every append and build with this proxy's tokenizer takes: held, it holds back a
        reply's append."""
        return self.sessions.tokenizers.lock(self.server.proxy.turns.tokenizer)

    def history(self, session: str) -> list[Any]:
        assert self.server.settled(30), "a reply's append did not finish"
        live = self.sessions.live(session)
        with live.lock:
            return list(live.engine.history)


@pytest.fixture
def make_proxy(upstream, qwen3_path):
    started: list[Proxied] = []

    def make(*, upstream_url: str | None = None, **kw: Any) -> Proxied:
        settings = proxy_settings(upstream_url or upstream.base_url, qwen3_path, **kw)
        proxied = Proxied(start(settings, sessions=open_sessions(settings)), upstream)
        started.append(proxied)
        return proxied

    yield make
    for proxied in started:
        proxied.client.close()  # its kept-alive connection, else closed whenever it is collected
        proxied.server.stop()


@pytest.fixture
def proxy(make_proxy) -> Proxied:
    return make_proxy()
