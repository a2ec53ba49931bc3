"""--recall-tool: a reply that calls only budgeter_recall is answered from the store and asked
again; the agent never sees the call (streamed or not). Other replies pass on unchanged."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from budgeter.proxy.recall import NAME
from tests.proxy.upstream import Script

pytestmark = pytest.mark.shared

LOG = "".join(f"{i:05d} build step {i} finished without errors\n" for i in range(150))
CHAT = "The build log says nothing new; carry on with the plan as agreed. " * 3


def conversation() -> list[dict]:
    """Over the 3,584-token budget; compaction to 75% of it (``LOW_WATER``) shrinks the log (a handle
    in the tool result) and the recalled log still fits the window beside the reply's max_tokens."""
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "run", "arguments": '{"cmd": "make"}'}}]}
    messages = [{"role": "system", "content": "You are a build agent."}, {"role": "user", "content": "build it"},
                call, {"role": "tool", "tool_call_id": "c1", "content": LOG}]
    for i in range(12):
        messages += [{"role": "assistant", "content": f"step {i} done. {CHAT}"},
                     {"role": "user", "content": f"next {i}. {CHAT}"}]
    return messages


def recall_first_handle(body: dict) -> Script:
    text = " ".join(str(m.get("content") or "") for m in body["messages"] if m["role"] == "tool")
    handle = re.search(r"h=([0-9a-f]{16})", text).group(1)
    return Script(tool_calls=[{"id": "r1", "name": NAME, "arguments": json.dumps({"handle": handle})}],
                  finish_reason="tool_calls")


TOOLS = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
LOW_WATER = 0.75


@pytest.mark.parametrize("stream", [False, True])
def test_a_recall_only_reply_is_answered_by_the_proxy(make_proxy, upstream, stream):
    proxy = make_proxy(recall_tool=True, low_water=LOW_WATER)
    upstream.script(Script(reply=recall_first_handle), Script(content="line 00042 was fine"))
    if stream:
        chunks = list(proxy.client.chat.completions.create(model="m", messages=conversation(), tools=TOOLS,
                                                           stream=True, max_tokens=64))
        assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        reply = proxy.client.chat.completions.create(model="m", messages=conversation(), tools=TOOLS,
                                                     max_tokens=64)
        assert reply.choices[0].message.tool_calls is None
        text = reply.choices[0].message.content
    assert text == "line 00042 was fine"
    first, second = upstream.received
    assert NAME in [t["function"]["name"] for t in first["tools"]]
    assert LOG not in json.dumps(first["messages"])  # elided in the prompt...
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "r1", "content": LOG}  # ...recalled
    assert second["messages"][:-2] == first["messages"]
    infos, _ = proxy.sessions.list_sessions()
    history = proxy.history(infos[0].id)
    assert history[-1].content == "line 00042 was fine"  # the recall round is not in the session
    assert not any(c.name == NAME for m in history for c in m.tool_calls)


def test_replies_that_do_not_call_recall_stream_unchanged(make_proxy, upstream):
    proxy = make_proxy(recall_tool=True, low_water=LOW_WATER)
    upstream.script(Script(tool_calls=[{"id": "x", "name": "run", "arguments": '{"cmd": "ls"}'}],
                           finish_reason="tool_calls"))
    body = {"model": "m", "messages": conversation(), "tools": TOOLS, "stream": True}
    with httpx.stream("POST", proxy.base_url + "/chat/completions", json=body, timeout=30) as r:
        got = b"".join(r.iter_raw())
    assert got == b"".join(upstream.sent) and len(upstream.received) == 1


def test_an_unknown_handle_is_answered_with_an_error_the_model_can_read(make_proxy, upstream):
    proxy = make_proxy(recall_tool=True)
    upstream.script(Script(tool_calls=[{"id": "r", "name": NAME, "arguments": '{"handle": "0000000000000000"}'}],
                           finish_reason="tool_calls"), Script(content="ok"))
    proxy.client.chat.completions.create(model="m", messages=conversation()[:2], tools=TOOLS)
    answer = upstream.received[1]["messages"][-1]
    assert answer["role"] == "tool" and answer["content"].startswith("Error: no payload")


@pytest.mark.parametrize("field,value", [("max_tokens", '"abc"'), ("max_tokens", "1e999"), ("max_tokens", "[1]"),
                                         ("max_completion_tokens", "true"), ("max_tokens", "1.5")])
@pytest.mark.parametrize("stream", [False, True])
def test_a_max_tokens_that_is_not_an_integer_is_a_400_before_the_upstream(make_proxy, upstream, field, value,
                                                                          stream):
    """Found by tests/fuzz/test_mutations.py: the recall round read it with int() (a 500 after the
    upstream had answered)."""
    proxy = make_proxy(recall_tool=True)
    upstream.script(Script(tool_calls=[{"id": "r", "name": NAME, "arguments": '{"handle": "0000000000000000"}'}],
                           finish_reason="tool_calls"), Script(content="ok"))
    body = json.dumps({"model": "m", "messages": conversation()[:2], "stream": stream})[:-1] + f', "{field}": {value}}}'
    r = httpx.post(proxy.base_url + "/chat/completions", content=body.encode(),
                   headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert (r.json()["error"]["code"], r.json()["error"]["param"]) == ("INVALID_INPUT", field)
    assert upstream.received == []
    fine = {"model": "m", "messages": conversation()[:2], field: 64, "stream": stream}
    assert httpx.post(proxy.base_url + "/chat/completions", json=fine).status_code == 200


@pytest.mark.parametrize("arguments", ["[" * 1100 + "]" * 1100, '{"a":' * 1100 + "1" + "}" * 1100])
def test_recall_arguments_nested_past_the_parser_are_answered_with_an_error(make_proxy, upstream, arguments):
    """Found by tests/fuzz/test_mutations.py: json.loads raised RecursionError, not ValueError (a 500)."""
    proxy = make_proxy(recall_tool=True)
    upstream.script(Script(tool_calls=[{"id": "r", "name": NAME, "arguments": arguments}], finish_reason="tool_calls"),
                    Script(content="ok"))
    got = proxy.client.chat.completions.create(model="m", messages=conversation()[:2], tools=TOOLS)
    assert got.choices[0].message.content == "ok"
    assert upstream.received[1]["messages"][-1]["content"].startswith("Error: arguments must be JSON")


@pytest.mark.parametrize("arguments", ["[1]", "null", "1e999", "{"])
@pytest.mark.parametrize("stream", [False, True])
def test_recall_arguments_that_are_no_object_are_sent_as_an_empty_one(make_proxy, upstream, arguments, stream):
    """Found by tests/fuzz/test_mutations.py: the call went back upstream as it came, and the
    proxy's count of that body failed in the template (`|items` on a list): a 400 TEMPLATE_ERROR
    for the client's good request."""
    proxy = make_proxy(recall_tool=True)
    upstream.script(Script(tool_calls=[{"id": "r", "name": NAME, "arguments": arguments}], finish_reason="tool_calls"),
                    Script(content="ok"))
    r = httpx.post(proxy.base_url + "/chat/completions",
                   json={"model": "m", "messages": conversation()[:2], "tools": TOOLS, "stream": stream})
    assert r.status_code == 200, r.text
    call, answer = upstream.received[1]["messages"][-2:]
    assert call["tool_calls"][0]["function"]["arguments"] == "{}"
    assert answer["content"].startswith("Error: ")
