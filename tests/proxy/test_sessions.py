"""The reconciliation rule: the new suffix is appended once, a retried request appends nothing
twice, a diverging history goes to its own fork, and the header names the session."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.proxy.upstream import Held, Script

pytestmark = pytest.mark.shared

SYSTEM = {"role": "system", "content": "You are terse."}


def ask(proxy, messages, **headers):
    raw = proxy.client.chat.completions.with_raw_response.create(model="m", messages=messages,
                                                                 extra_headers=headers or None)
    return raw.parse(), raw.headers


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def test_each_turn_appends_only_the_new_suffix_and_extends_the_previous_prompt(proxy):
    proxy.upstream.script(Script(content="a1"), Script(content="a2"))
    first = [SYSTEM, {"role": "user", "content": "u1"}]
    _, h1 = ask(proxy, first)
    second = [*first, assistant("a1"), {"role": "user", "content": "u2"}]
    _, h2 = ask(proxy, second)
    assert h2["x-budgeter-session"] == h1["x-budgeter-session"]
    assert h2["x-budgeter-appended"] == "1"  # a1 was stored by the proxy; only u2 is new
    assert h2["x-budgeter-extends-previous"] == "true"
    assert [m.content for m in proxy.history(h1["x-budgeter-session"])] == ["You are terse.", "u1", "a1", "u2", "a2"]


def test_a_client_echo_without_reasoning_or_with_null_content_still_matches(proxy):
    proxy.upstream.script(Script(tool_calls=[{"id": "t1", "name": "ls", "arguments": '{"path": "."}'}],
                                 finish_reason="tool_calls"), Script(content="done"))
    first = [SYSTEM, {"role": "user", "content": "list"}]
    _, h1 = ask(proxy, first)
    echo = {"role": "assistant", "content": None, "refusal": None, "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "ls", "arguments": '{"path":"."}'}}]}
    _, h2 = ask(proxy, [*first, echo, {"role": "tool", "tool_call_id": "t1", "content": "a.txt"}])
    assert h2["x-budgeter-session"] == h1["x-budgeter-session"] and h2["x-budgeter-forked"] == "false"
    assert h2["x-budgeter-appended"] == "1"


def test_a_retried_request_appends_nothing_twice(proxy):
    proxy.upstream.script(Script(status=500), Script(content="a1"))
    messages = [SYSTEM, {"role": "user", "content": "u1"}]
    import openai

    with pytest.raises(openai.InternalServerError):
        ask(proxy, messages)  # the upstream failed: the request stands, no reply
    _, h = ask(proxy, messages)  # the client retries
    assert h["x-budgeter-appended"] == "0" and h["x-budgeter-forked"] == "false"
    assert [m.content for m in proxy.history(h["x-budgeter-session"])] == ["You are terse.", "u1", "a1"]


def test_a_regenerated_turn_goes_to_a_fork_and_its_line_continues_there(proxy):
    proxy.upstream.script(Script(content="a1"), Script(content="b1"), Script(content="b2"), Script(content="a2"))
    messages = [SYSTEM, {"role": "user", "content": "u1"}]
    _, h1 = ask(proxy, messages)
    root = h1["x-budgeter-session"]
    _, h2 = ask(proxy, messages)  # "regenerate": the stored line already holds a1
    fork = h2["x-budgeter-session"]
    assert fork != root and fork.startswith(root + ".") and h2["x-budgeter-forked"] == "true"
    _, h3 = ask(proxy, [*messages, assistant("b1"), {"role": "user", "content": "u2"}])
    # a regenerate's answer is not stored (the fork stays at the request for the next regenerate):
    # the client's next turn brings the answer it kept
    assert h3["x-budgeter-session"] == fork and h3["x-budgeter-appended"] == "2"
    _, h4 = ask(proxy, [*messages, assistant("a1"), {"role": "user", "content": "v2"}])
    assert h4["x-budgeter-session"] == root  # the first line is untouched and goes on
    assert [m.content for m in proxy.history(root)] == ["You are terse.", "u1", "a1", "v2", "a2"]
    assert [m.content for m in proxy.history(fork)] == ["You are terse.", "u1", "b1", "u2", "b2"]
    assert proxy.sessions.store.count() == 2  # the two lines, nothing else


def test_the_same_request_sent_ten_times_gets_ten_answers_and_any_one_continues(proxy):
    """A script run again, a "regenerate" button, a client's own retry: every resend is answered,
    with or without X-Budgeter-Session, and whichever answer the client keeps goes on."""
    proxy.upstream.script(*(Script(content=f"a{k}") for k in range(10)), Script(content="next"))
    messages = [SYSTEM, {"role": "user", "content": "u1"}]
    sessions = []
    for k in range(10):
        reply, headers = ask(proxy, messages)
        assert reply.choices[0].message.content == f"a{k}"
        sessions.append(headers["x-budgeter-session"])
    assert len(set(sessions[1:])) == 1 and sessions[1] != sessions[0]  # one fork for every regenerate
    _, h = ask(proxy, [*messages, assistant("a7"), {"role": "user", "content": "u2"}])
    assert h["x-budgeter-session"] == sessions[1]
    assert [m.content for m in proxy.history(sessions[1])] == ["You are terse.", "u1", "a7", "u2", "next"]
    assert [m.content for m in proxy.history(sessions[0])] == ["You are terse.", "u1", "a0"]


def test_an_edited_request_regenerated_ten_times_gets_ten_answers(proxy):
    proxy.upstream.script(*(Script(content=f"r{k}") for k in range(11)))
    ask(proxy, [SYSTEM, {"role": "user", "content": "u1"}])
    edited = [SYSTEM, {"role": "user", "content": "u1, edited"}]
    for k in range(10):
        reply, _ = ask(proxy, edited)
        assert reply.choices[0].message.content == f"r{k + 1}"
    named = [SYSTEM, {"role": "user", "content": "named"}]
    for _ in range(3):
        raw = proxy.client.chat.completions.with_raw_response.create(
            model="m", messages=named, extra_headers={"X-Budgeter-Session": "mine"})
        assert raw.http_response.status_code == 200


def test_an_edited_history_never_mixes_with_the_stored_one(proxy):
    proxy.upstream.script(Script(content="a1"), Script(content="a2"), Script(content="c2"))
    first = [SYSTEM, {"role": "user", "content": "u1"}]
    _, h = ask(proxy, first)
    ask(proxy, [*first, assistant("a1"), {"role": "user", "content": "u2"}])
    edited = [*first, assistant("a1 (edited by the client)"), {"role": "user", "content": "u2"}]
    _, h3 = ask(proxy, edited)
    assert h3["x-budgeter-forked"] == "true" and h3["x-budgeter-appended"] == "4"
    assert proxy.upstream.received[-1]["messages"] == edited
    assert len(proxy.history(h["x-budgeter-session"])) == 5


def test_the_header_names_the_session_and_other_tools_fork(proxy):
    proxy.upstream.script(Script(content="x"), Script(content="y"))
    messages = [SYSTEM, {"role": "user", "content": "u1"}]
    _, h = ask(proxy, messages, **{"X-Budgeter-Session": "agent-7"})
    assert h["x-budgeter-session"] == "agent-7"
    tools = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]
    raw = proxy.client.chat.completions.with_raw_response.create(
        model="m", messages=[*messages, assistant("x")], tools=tools, extra_headers={"X-Budgeter-Session": "agent-7"})
    assert raw.headers["x-budgeter-session"].startswith("agent-7.")


def test_the_proxy_and_the_grpc_service_share_one_store(proxy):
    from budgeter.sessions.sessions import Sessions

    proxy.upstream.script(Script(content="a1"))
    _, h = ask(proxy, [SYSTEM, {"role": "user", "content": "u1"}])
    assert proxy.server.settled(30)  # the reply is stored just after its response went out
    other = Sessions(proxy.sessions.store, proxy.sessions.tokenizers)  # what `budgeter serve` would open
    result = other.build(h["x-budgeter-session"]).result
    assert [m["content"] for m in result.openai_messages()] == ["You are terse.", "u1", "a1"]
    assert result.tokens > int(h["x-budgeter-tokens-after"])  # the prompt sent, plus the stored reply


def test_two_proxy_replicas_over_one_redis_continue_each_others_sessions(make_proxy, redis_url):
    a, b = make_proxy(store=redis_url), make_proxy(store=redis_url)
    a.upstream.script(Script(content="a1"), Script(content="a2"), Script(content="a3"))
    first = [SYSTEM, {"role": "user", "content": "u1"}]
    _, h1 = ask(a, first)
    assert a.server.settled(30)  # a's reply is stored (just after its response) before the next turn
    second = [*first, assistant("a1"), {"role": "user", "content": "u2"}]
    _, h2 = ask(b, second)  # the next turn lands on the other replica
    assert h2["x-budgeter-session"] == h1["x-budgeter-session"] and h2["x-budgeter-appended"] == "1"
    assert b.server.settled(30)
    _, h3 = ask(a, [*second, assistant("a2"), {"role": "user", "content": "u3"}])
    assert h3["x-budgeter-appended"] == "1" and h3["x-budgeter-forked"] == "false"
    assert a.server.settled(30)
    assert [m.content for m in b.history(h1["x-budgeter-session"])][-2:] == ["u3", "a3"]


def test_a_next_turn_on_another_replica_before_the_reply_is_stored_keeps_one_copy(make_proxy, redis_url):
    """Replica a answers, but its append of the reply is held back (by its tokenizer's lock, which
    an append takes); the next turn lands on b meanwhile and stores the reply from the request. a's
    append then finds the session moved on: the reply is stored once, nothing is lost."""
    a, b = make_proxy(store=redis_url), make_proxy(store=redis_url)
    held = Held("a1")
    a.upstream.script(held.script, Script(content="a2"))
    first = [SYSTEM, {"role": "user", "content": "u1"}]
    second = [*first, assistant("a1"), {"role": "user", "content": "u2"}]
    with ThreadPoolExecutor(1) as pool:
        one = pool.submit(ask, a, first, **{"X-Budgeter-Session": "hop"})
        assert held.arrived.wait(30)
        with a.tokenizer_lock():
            held.go.set()
            assert one.result(60)[0].choices[0].message.content == "a1"
            _, h2 = ask(b, second, **{"X-Budgeter-Session": "hop"})
    assert h2["x-budgeter-appended"] == "2" and h2["x-budgeter-forked"] == "false"  # a1 from the request
    assert a.server.settled(30) and b.server.settled(30)
    assert [m.content for m in b.history("hop")] == [SYSTEM["content"], "u1", "a1", "u2", "a2"]


def test_concurrent_duplicates_append_once_and_store_one_reply(proxy):

    proxy.upstream.script(*[Script(content=f"r{i}", delay=0.2) for i in range(4)])
    messages = [SYSTEM, {"role": "user", "content": "same request, sent four times at once"}]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: ask(proxy, messages), range(4)))
    sessions = {h["x-budgeter-session"] for _, h in results}
    root = min(sessions, key=len)
    history = proxy.history(root)
    assert [m.role for m in history] == ["system", "user", "assistant"]  # one user message, one reply
    assert history[-1].content in {r.choices[0].message.content for r, _ in results}
