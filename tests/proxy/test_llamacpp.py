"""A real llama.cpp server behind the proxy (tests/llamacpp.py): budgeter's count of every prompt
it sent equals the server's own usage.prompt_tokens, streamed and not, across compaction. Two
real GGUFs: Gemma 3 270M (a real model with a SentencePiece vocabulary, given a Gemma 3 template
file), and a tiny random-weight GGUF around the shared Qwen3 tokenizer and template (noise text,
but the server's own tokenizer, template, tool rendering, SSE and finish_reason length)."""

from __future__ import annotations

import httpx
import pytest

from budgeter.proxy.server import open_sessions, start
from budgeter.settings import Settings
from tests.bench.sessions import make_session
from tests.llamacpp import require_server, serve, vocab_from_hf, write_tiny_gguf
from tests.proxy.gemma import TEMPLATE, gemma_model, gemma_tokenizer_folder

QUESTIONS = ["What is the capital of France?", "Name three colours of the rainbow.",
             "Write one sentence about the sea.", "What do bees make?", "Count from one to five.",
             "Say something about mountains.", "What is two plus two?", "Name a fruit that is yellow.",
             "Describe rain in a few words.", "What animal says moo?", "Tell me about the moon.",
             "What is ice made of?"]


@pytest.fixture(scope="module")
def gemma():
    require_server()
    model, why = gemma_model()
    if model is None:
        pytest.skip(why)
    try:
        folder = gemma_tokenizer_folder(model)
    except ImportError as exc:  # transformers moved its GGUF tokenizer converter
        pytest.skip(f"cannot rebuild Gemma's tokenizer from the GGUF: {exc}")
    with serve(model, chat_template_file=TEMPLATE, ctx_size=2048) as url:
        yield url + "/v1", str(folder)


@pytest.fixture(scope="module")
def tiny_qwen3(qwen3_path, tmp_path_factory):
    require_server()
    model = write_tiny_gguf(vocab_from_hf(qwen3_path), tmp_path_factory.mktemp("gguf") / "qwen3-tiny.gguf")
    with serve(model, ctx_size=32768) as url:
        yield url + "/v1", qwen3_path


def agent_loop(base_url: str, turns: list[str], *, max_tokens: int = 12,
               system_at: int | None = None) -> list[tuple[int, int, bool, bool]]:
    """An unmodified OpenAI-SDK loop; (server prompt_tokens, budgeter's count, compacted, streamed)
    per turn. ``system_at``: the turn before which the loop adds a system message."""
    import openai

    llm = openai.OpenAI(base_url=base_url, api_key="-", max_retries=0, timeout=300)
    messages = [{"role": "system", "content": "You answer in one short sentence. " * 8}]
    seen = []
    for k, question in enumerate(turns):
        if k == system_at:
            messages.append({"role": "system", "content": "From now on, answer in French."})
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
    print("gemma (server prompt_tokens, budgeter, compacted, streamed):", seen)
    assert [server for server, *_ in seen] == [ours for _, ours, *_ in seen], seen
    assert any(compacted for *_, compacted, _ in seen) and any(s for *_, s in seen), seen
    assert all(ours <= 512 - 64 for _, ours, *_ in seen)
    assert 'budgeter_proxy_prompt_tokens_mismatches_total{model="gemma"}' not in metrics
    assert f'budgeter_proxy_prompt_tokens_delta_bucket{{le="0.0",model="gemma"}} {len(seen)}.0' in metrics


def test_gemma_takes_a_system_message_added_mid_session_through_the_proxy(gemma):
    """Gemma 3's template takes a system message only first (and alternation after it): one added
    after turn 2 is sent as user text on every later turn, accepted and counted exactly."""
    url, folder = gemma
    settings = Settings(upstream=url, store="memory://", proxy_port=0, tokenizers={"gemma3": folder},
                        default_tokenizer="gemma3", window=2048, reserve=64, metrics_port=0)
    proxy = start(settings, sessions=open_sessions(settings))
    try:
        seen = agent_loop(proxy.base_url, QUESTIONS[:5], system_at=2)
    finally:
        proxy.stop()
    assert [server for server, *_ in seen] == [ours for _, ours, *_ in seen], seen


def test_a_gguf_without_a_template_counts_exactly_with_the_format_named(gemma):
    """The newcomer's run: the Gemma GGUF itself as the tokenizer (it embeds no template) with the
    format its server renders named (``--chat-format gemma3``): every turn exact."""
    url, _ = gemma
    model, _ = gemma_model()
    settings = Settings(upstream=url, store="memory://", proxy_port=0, tokenizers={"gemma": str(model)},
                        chat_formats={"gemma": "gemma3"}, default_tokenizer="gemma", window=2048, reserve=64,
                        metrics_port=0)
    proxy = start(settings, sessions=open_sessions(settings))
    try:
        seen = agent_loop(proxy.base_url, QUESTIONS[:4])
    finally:
        proxy.stop()
    assert [server for server, *_ in seen] == [ours for _, ours, *_ in seen], seen


def proxied(url: str, folder: str, *, window: int, reserve: int):
    settings = Settings(upstream=url, store="memory://", proxy_port=0, tokenizers={"model": folder},
                        default_tokenizer="model", window=window, reserve=reserve, metrics_port=0)
    return start(settings, sessions=open_sessions(settings))


@pytest.mark.shared
def test_tiny_qwen3_coding_session_with_cut_calls_is_exact_and_accepted(tiny_qwen3):
    """A coding session holding tool calls cut mid-string: llama-server refuses it as it is; through
    the proxy every prompt (compacted, hygiene applied) is accepted and counted exactly."""
    import openai

    url, folder = tiny_qwen3
    body = make_session(1, chars=60_000)
    assert any(m.get("finish_reason") == "length" for m in body["messages"])
    raw = httpx.post(url + "/chat/completions", json={**body, "max_tokens": 1}, timeout=300)
    assert raw.status_code == 500 and "pars" in raw.text.lower()  # a strict provider, like the hosted ones
    proxy = proxied(url, folder, window=8192, reserve=512)
    llm = openai.OpenAI(base_url=proxy.base_url, api_key="-", max_retries=0, timeout=300)
    messages, seen = list(body["messages"]), []
    try:
        for k in range(6):
            kw = {"model": "tiny", "messages": messages, "tools": body["tools"], "max_tokens": 6}
            if k % 2:
                with llm.chat.completions.with_streaming_response.create(
                        **kw, stream=True, stream_options={"include_usage": True}) as r:
                    chunks, headers = list(r.parse()), r.headers
                text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                usage, finish = chunks[-1].usage, [c.choices[0].finish_reason for c in chunks if c.choices][-1]
            else:
                r = llm.chat.completions.with_raw_response.create(**kw)
                reply, headers = r.parse(), r.headers
                text, usage = reply.choices[0].message.content or "", reply.usage
                finish = reply.choices[0].finish_reason
            seen.append((usage.prompt_tokens, int(headers["x-budgeter-tokens-after"]),
                         headers["x-budgeter-compacted"], headers["x-budgeter-appended"], finish))
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"go on ({k})"}]
        assert proxy.settled(30)  # the last reply is stored just after its response
        stored = proxy.sessions.list_sessions()[0]
        history = proxy.sessions.live(stored[0].id).engine.history
    finally:
        proxy.stop()
    print("tiny qwen3 (server prompt_tokens, budgeter, compacted, appended, finish):", seen)
    assert [s[0] for s in seen] == [s[1] for s in seen], seen
    assert seen[0][2] == "true" and all(s[1] <= 8192 - 512 for s in seen)
    assert [s[3] for s in seen[1:]] == ["1"] * 5  # the echo matched the stored reply: only the user message is new
    assert len(stored) == 1 and history[-1].finish_reason == "length" == seen[-1][4]


LONE = '{"path": "notes.txt", "text": "half a pair: \\ud800 end"}'
"""Tool-call arguments that escape a lone surrogate: Python's JSON reads them, llama-server answers
HTTP 500 ("Failed to parse tool call arguments as JSON")."""


@pytest.mark.shared
def test_tiny_qwen3_lone_surrogates_are_repaired_and_every_turn_is_accepted(tiny_qwen3):
    """A session whose history holds a lone surrogate in a call's arguments and in content: sent as
    is, llama-server refuses it; through the proxy it is repaired to U+FFFD (inside the parsed
    arguments), X-Budgeter-Notes says so, and every later turn is accepted and counted exactly."""
    import json

    url, folder = tiny_qwen3
    tools = [{"type": "function", "function": {"name": "write_file", "description": "Write a file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}}}}}]
    messages = [{"role": "system", "content": "You write files."}, {"role": "user", "content": "Save a note."},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
                    "name": "write_file", "arguments": LONE}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "wrote it \ud800"}]
    raw = httpx.post(url + "/chat/completions", content=json.dumps({"messages": messages, "tools": tools,
                                                                    "max_tokens": 1}), timeout=300,
                     headers={"content-type": "application/json"})
    assert raw.status_code in (400, 500)
    proxy = proxied(url, folder, window=8192, reserve=512)
    seen = []
    try:
        for k in range(4):
            messages.append({"role": "user", "content": f"And now? ({k})"})
            reply = httpx.post(proxy.base_url + "/chat/completions", timeout=300,
                               content=json.dumps({"model": "tiny", "messages": messages, "tools": tools,
                                                   "max_tokens": 4}),
                               headers={"content-type": "application/json"})
            assert reply.status_code == 200, reply.text
            assert ("2 lone surrogates replaced with U+FFFD: messages[2].tool_calls[0].function.arguments of call "
                    "'c1' (1), messages[3].content (1)") in reply.headers["x-budgeter-notes"]  # each turn: again
            body = reply.json()
            seen.append((body["usage"]["prompt_tokens"], int(reply.headers["x-budgeter-tokens-after"])))
            messages.append({"role": "assistant", "content": body["choices"][0]["message"]["content"] or ""})
        assert proxy.settled(30)
        history = proxy.sessions.live(proxy.sessions.list_sessions()[0][0].id).engine.history
    finally:
        proxy.stop()
    assert [s for s, _ in seen] == [ours for _, ours in seen], seen
    call = next(m for m in history if m.tool_calls).tool_calls[0]
    assert json.loads(call.arguments) == {"path": "notes.txt", "text": "half a pair: \ufffd end"}
    assert "\ufffd" in next(m for m in history if m.role == "tool").content


def test_every_front_door_returns_what_gemma_accepts_and_counts_as_budgeter_said(gemma, tmp_path):
    """One coding session (tools, calls, results: Gemma 3's template renders none of them and
    requires alternation), through each front door: the request trim prints, the body fit returns,
    the gRPC client's prompt.body and the render's count. llama-server accepts each as sent and
    its prompt_tokens equal the count budgeter gave for it."""
    import json
    import subprocess
    import sys

    from budgeter.client import Client
    from budgeter.service.server import create_server
    from budgeter.store import MemoryStore
    from tests.llamacpp import chat_prompt_tokens
    from tests.service.conftest import settings as server_settings

    url, folder = gemma
    server = url.removesuffix("/v1")
    body = make_session(4, chars=6_000)
    body["messages"] = [m for m in body["messages"] if m.get("finish_reason") != "length"]
    source = tmp_path / "body.json"
    source.write_text(json.dumps(body))
    profile = ("--tokenizer", folder)
    seen = {}

    def cli(*args):
        out = subprocess.run([sys.executable, "-m", "budgeter", *args], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        return out

    out = cli("trim", str(source), *profile, "--window", "1500", "--reserve", "64",
              "--report", str(tmp_path / "r.json"))
    trimmed = json.loads(out.stdout)
    seen["trim"] = (chat_prompt_tokens(server, trimmed["messages"], trimmed.get("tools")),
                    json.loads((tmp_path / "r.json").read_text())["tokens_after"])
    (tmp_path / "trimmed.json").write_text(out.stdout)
    rendered = cli("render", str(tmp_path / "trimmed.json"), *profile)
    seen["render"] = (seen["trim"][0], int(rendered.stderr.split(" tokens")[0].rsplit(" ", 1)[1]))

    settings = Settings(upstream=url, store="memory://", proxy_port=0, tokenizers={"gemma3": folder},
                        default_tokenizer="gemma3", window=1500, reserve=64, metrics_port=0)
    proxy = start(settings, sessions=open_sessions(settings))
    try:
        fit = httpx.post(proxy.base_url + "/budgeter/fit", json=body, timeout=600).json()
    finally:
        proxy.stop()
    seen["fit"] = (chat_prompt_tokens(server, fit["body"]["messages"], fit["body"].get("tools")),
                   fit["report"]["tokens_after"])

    grpc_server = create_server(server_settings(tokenizers={"gemma3": folder}, default_tokenizer="gemma3"),
                                store=MemoryStore())
    try:
        with Client(grpc_server.target, timeout=600) as c:
            session = c.create_session(tools=body["tools"], window=1500, reserve=64)
            session.append(body["messages"])
            prompt = session.prompt()
    finally:
        grpc_server.stop(0)
    seen["grpc"] = (chat_prompt_tokens(server, prompt.body["messages"], prompt.body.get("tools")), prompt.tokens)
    print("front door: (llama-server prompt_tokens, budgeter):", seen)
    assert all(server_count == ours for server_count, ours in seen.values()), seen
