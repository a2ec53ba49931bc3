"""A real llama.cpp server behind the proxy: budgeter's count of every prompt it sent equals the
server's own usage.prompt_tokens, streamed and not, across compaction.

Gemma 3 270M (a real model with a SentencePiece vocabulary, given a Gemma 3 template file)."""

from __future__ import annotations

import httpx
import pytest

from budgeter.proxy.server import open_sessions, start
from budgeter.settings import Settings
from tests.proxy.gemma import TEMPLATE, gemma_model, gemma_tokenizer_folder
from tests.proxy.llama_server import llama_server, need_binary

QUESTIONS = ["What is the capital of France?", "Name three colours of the rainbow.",
             "Write one sentence about the sea.", "What do bees make?", "Count from one to five.",
             "Say something about mountains.", "What is two plus two?", "Name a fruit that is yellow.",
             "Describe rain in a few words.", "What animal says moo?", "Tell me about the moon.",
             "What is ice made of?"]


@pytest.fixture(scope="module")
def gemma():
    need_binary()
    model, why = gemma_model()
    if model is None:
        pytest.skip(why)
    folder = gemma_tokenizer_folder(model)
    with llama_server(model, "--chat-template-file", str(TEMPLATE), ctx=2048) as url:
        yield url, str(folder)


def agent_loop(base_url: str, turns: list[str], *, max_tokens: int = 12) -> list[tuple[int, int, bool, bool]]:
    """An unmodified OpenAI-SDK loop; (server prompt_tokens, budgeter's count, compacted, streamed)
    per turn."""
    import openai

    llm = openai.OpenAI(base_url=base_url, api_key="-", max_retries=0, timeout=300)
    messages = [{"role": "system", "content": "You answer in one short sentence. " * 8}]
    seen = []
    for k, question in enumerate(turns):
        messages.append({"role": "user", "content": question + " Please answer with care and detail. " * 3})
        stream = k % 2 == 1
        if stream:
            with llm.chat.completions.with_streaming_response.create(
                    model="gemma", messages=messages, max_tokens=max_tokens, stream=True,
                    stream_options={"include_usage": True}) as raw:
                chunks = list(raw.parse())
                headers = raw.headers
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            usage = chunks[-1].usage
        else:
            raw = llm.chat.completions.with_raw_response.create(model="gemma", messages=messages, max_tokens=max_tokens)
            reply = raw.parse()
            headers, text, usage = raw.headers, reply.choices[0].message.content or "", reply.usage
        messages.append({"role": "assistant", "content": text})
        seen.append((usage.prompt_tokens, int(headers["x-budgeter-tokens-after"]),
                     headers["x-budgeter-compacted"] == "true", stream))
    return seen


def test_gemma_prompt_tokens_equal_budgeter_count_across_compaction(gemma):
    url, folder = gemma
    settings = Settings(upstream=url, store="memory://", proxy_port=0, tokenizers={"gemma3": folder},
                        default_tokenizer="gemma3", window=512, reserve=64, metrics_port=0)
    proxy = start(settings, sessions=open_sessions(settings))
    try:
        seen = agent_loop(proxy.base_url, QUESTIONS)
        metrics = httpx.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    finally:
        proxy.stop()
    assert [server for server, *_ in seen] == [ours for _, ours, *_ in seen], seen
    assert any(compacted for *_, compacted, _ in seen) and any(s for *_, s in seen), seen
    assert all(ours <= 512 - 64 for _, ours, *_ in seen)
    assert 'budgeter_proxy_prompt_tokens_mismatches_total{model="gemma"}' not in metrics
    assert f'budgeter_proxy_prompt_tokens_delta_bucket{{le="0.0",model="gemma"}} {len(seen)}.0' in metrics
