"""The official OpenAI client against budgeter proxy, in front of a scripted upstream: the prompt
sent is the one BuildPrompt returns, streamed bytes pass through unchanged, the reply is appended
once with its finish_reason, and sessions are reconciled by the documented rule."""

from __future__ import annotations

import json
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from budgeter.core.jsonargs import ArgStatus, classify_arguments
from tests.proxy.upstream import Held, Script

pytestmark = pytest.mark.shared

SYSTEM = {"role": "system", "content": "You are a coding agent."}
TOOLS = [{"type": "function", "function": {
    "name": "write_file", "description": "Write a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                   "required": ["path", "content"]}}}]


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def test_non_streamed_turn_sends_the_built_prompt_and_appends_the_reply(proxy):
    proxy.upstream.script(Script(content="Hello there."))
    messages = [SYSTEM, user("hi")]
    raw = proxy.client.chat.completions.with_raw_response.create(model="m", messages=messages)
    reply = raw.parse()
    assert reply.choices[0].message.content == "Hello there."
    sent = proxy.upstream.received[-1]
    assert sent["messages"] == messages and sent["model"] == "m"
    assert sent["max_tokens"] == 512  # the reserve, as the request had none
    session = raw.headers["x-budgeter-session"]
    assert session.startswith("px-")
    assert int(raw.headers["x-budgeter-tokens-after"]) == reply.usage.prompt_tokens  # transformers' count
    assert raw.headers["x-budgeter-appended"] == "2" and raw.headers["x-budgeter-forked"] == "false"
    history = proxy.history(session)
    assert [m.role for m in history] == ["system", "user", "assistant"]
    assert history[-1].content == "Hello there." and history[-1].finish_reason == "stop"


def test_streamed_bytes_pass_through_unchanged_and_the_copy_is_appended(proxy):
    proxy.upstream.script(Script(content="Streaming works, chunk by chunk."))
    body = {"model": "m", "messages": [SYSTEM, user("stream please")], "stream": True}
    with httpx.stream("POST", proxy.base_url + "/chat/completions", json=body, timeout=30) as r:
        got = b"".join(r.iter_raw())
        session = r.headers["x-budgeter-session"]
        assert r.headers["content-type"].startswith("text/event-stream")
    assert got == b"".join(proxy.upstream.sent)
    history = proxy.history(session)
    assert history[-1].content == "Streaming works, chunk by chunk." and history[-1].finish_reason == "stop"


def test_openai_client_streamed(proxy):
    proxy.upstream.script(Script(content="one two three"))
    stream = proxy.client.chat.completions.create(model="m", messages=[SYSTEM, user("count")], stream=True,
                                                  stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two three"
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0


def test_a_tool_call_cut_by_length_is_stored_truncated_and_never_recovered(proxy):
    cut = '{"path": "index.html", "content": "<html><body>unfinish'
    proxy.upstream.script(Script(tool_calls=[{"id": "c1", "name": "write_file", "arguments": cut}],
                                 finish_reason="length"), Script(content="ok"))
    messages = [SYSTEM, user("write a page")]
    stream = proxy.client.chat.completions.create(model="m", messages=messages, tools=TOOLS, stream=True)
    chunks = list(stream)
    assert chunks[-1].choices[0].finish_reason == "length"
    args = "".join(c.choices[0].delta.tool_calls[0].function.arguments or ""
                   for c in chunks if c.choices and c.choices[0].delta.tool_calls)
    assert args == cut  # the agent gets the upstream's bytes, cut as they were
    session = [s for s in _sessions(proxy)][0]
    stored = proxy.history(session)[-1]
    assert stored.finish_reason == "length" and stored.tool_calls[0].arguments == cut
    assert classify_arguments(cut, finish_reason="length").status == ArgStatus.TRUNCATED
    # the agent goes on (its executor refused the cut call); the prompt sent upstream stays valid
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": cut}}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "Error: the call was cut; send it again"}
    proxy.client.chat.completions.create(model="m", messages=[*messages, call, result], tools=TOOLS)
    sent = proxy.upstream.received[-1]
    for m in sent["messages"]:
        for tc in m.get("tool_calls") or ():
            json.loads(tc["function"]["arguments"])  # every argument string in the prompt parses
    assert len(proxy.history(session)) == 5


def _sessions(proxy) -> list[str]:
    infos, _ = proxy.sessions.list_sessions()
    return [i.id for i in infos]


def test_tokens_before_is_what_the_client_sent(make_proxy, hf_count):
    """A fitting prompt whose failed retries the clean-up folds: X-Budgeter-Tokens-Before is the
    upstream tokenizer's count of the client's own request, not of the prompt sent on."""
    proxy = make_proxy(window=32768)
    proxy.upstream.script(Script(content="ok"))
    call = {"id": "c0", "type": "function", "function": {
        "name": "write_file", "arguments": json.dumps({"path": "", "content": "<html>" + "x" * 3000})}}
    messages = [SYSTEM, user("make a site")]
    for k in range(3):
        messages += [{"role": "assistant", "content": "", "tool_calls": [{**call, "id": f"c{k}"}]},
                     {"role": "tool", "tool_call_id": f"c{k}", "content": "rejected: path must not be empty"}]
    messages.append(user("try again"))
    raw = proxy.client.chat.completions.with_raw_response.create(model="m", messages=messages, tools=TOOLS)
    assert raw.headers["x-budgeter-compacted"] == "false"
    before, after = int(raw.headers["x-budgeter-tokens-before"]), int(raw.headers["x-budgeter-tokens-after"])
    assert before == hf_count({"messages": messages, "tools": TOOLS}) > after == raw.parse().usage.prompt_tokens


def test_a_request_rewritten_for_the_template_says_so(make_proxy, llama3_path, caplog):
    """The Llama 3.1 template renders no tools: the agent learns from X-Budgeter-Notes that its
    model sees them as text, the start logs it once, and a metric counts such requests by kind."""
    with caplog.at_level("WARNING", logger="budgeter.proxy"):
        proxy = make_proxy(tokenizers={"qwen3": llama3_path})
    logged = [r.getMessage() for r in caplog.records if "rewritten for its template" in r.getMessage()]
    assert any("tools_as_text" in m for m in logged), caplog.text
    proxy.upstream.script(Script(content="ok"), Script(content="ok"))
    raw = proxy.client.chat.completions.with_raw_response.create(model="m", messages=[user("hi")], tools=TOOLS)
    notes = raw.headers["x-budgeter-notes"]
    assert "does not render tool schemas: counted (and sent) as a system message" in notes and notes.isascii()
    assert "tools" not in proxy.upstream.received[-1]
    assert len([r for r in caplog.records if "rewritten for its template" in r.getMessage()]) == len(logged)
    plain = proxy.client.chat.completions.with_raw_response.create(model="m", messages=[user("hello")])
    assert "x-budgeter-notes" not in plain.headers  # sent as given
    metrics = httpx.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    assert 'budgeter_proxy_adapted_requests_total{kind="tools_as_text"} 1.0' in metrics


def test_the_response_does_not_wait_for_its_reply_to_be_stored_and_the_next_turn_does(proxy):
    """The reply is appended after its response goes out. Here its append is held back by the
    tokenizer's lock (which an append takes), taken once the upstream has the request: the response
    still arrives. The conversation's next request, sent meanwhile, waits for that append, so it
    adds only its own new message."""
    held = Held("first answer")
    proxy.upstream.script(held.script, Script(content="second answer"))
    first = [SYSTEM, user("one")]
    second = [*first, {"role": "assistant", "content": "first answer"}, user("two")]

    def ask(messages: list) -> object:
        return proxy.client.chat.completions.with_raw_response.create(
            model="m", messages=messages, extra_headers={"X-Budgeter-Session": "deferred"})

    with ThreadPoolExecutor(2) as pool:
        one = pool.submit(ask, first)
        assert held.arrived.wait(30)
        with proxy.tokenizer_lock():
            held.go.set()
            assert one.result(60).parse().choices[0].message.content == "first answer"
            assert not proxy.server.settled(0)  # its append waits for the lock
            two = pool.submit(ask, second)
        raw = two.result(60)
    assert raw.headers["x-budgeter-appended"] == "1"  # "two" alone: the reply was stored before it
    assert [m.content for m in proxy.history("deferred")] == [
        SYSTEM["content"], "one", "first answer", "two", "second answer"]


def test_a_turn_waits_for_the_append_of_its_conversations_last_reply(proxy):
    """The order alone, in process: while the last reply's append is handed over and unfinished,
    the conversation's next turn does not begin (were it to, it would store the reply from the
    request, and the append would find the session moved on). Completes once the append is in."""
    from budgeter.core.messages import from_openai
    from budgeter.proxy.turns import Request

    turns = proxy.server.proxy.turns
    first = [SYSTEM, user("one")]
    turn = turns.turn(Request.of({"messages": first}), session="ordered")
    pending: futures.Future[bool] = futures.Future()
    turns.reply_pending(turn, pending)
    with ThreadPoolExecutor(1) as pool:
        reply = {"role": "assistant", "content": "first answer"}
        later = pool.submit(turns.turn, Request.of({"messages": [*first, reply, user("two")]}), session="ordered")
        assert not futures.wait([later], timeout=0.5).done  # (a machine too slow to begin would pass it too)
        assert turns.append_reply(turn, from_openai(reply))
        pending.set_result(True)
        assert later.result(30).appended == 1  # "two" alone
    assert turns.settled(0)
