"""Errors: upstream unreachable is 502, upstream errors pass through, budgeter's own are 400 with
code = reason, a silent upstream times out, unknown routes are an OpenAI-style 404; plus the other
routes (models, health, metrics) and the stateless fit."""

from __future__ import annotations

import json
import socket
import time

import httpx
import openai
import pytest

from tests.proxy.upstream import Script

pytestmark = pytest.mark.shared

SYSTEM = {"role": "system", "content": "You are terse."}
USER = {"role": "user", "content": "hi"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_upstream_is_a_502_with_an_openai_error(make_proxy):
    proxy = make_proxy(upstream_url=f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(openai.APIStatusError) as err:
        proxy.client.chat.completions.create(model="m", messages=[SYSTEM, USER])
    assert err.value.status_code == 502
    assert err.value.body["code"] == "UPSTREAM_UNREACHABLE"
    r = httpx.post(proxy.base_url + "/chat/completions", json={"model": "m", "messages": [USER], "stream": True})
    assert r.status_code == 502 and r.json()["error"]["type"] == "upstream_error"


def test_an_unreachable_upstream_is_not_ready_from_the_start(make_proxy, caplog):
    """/health is readiness: NOT_SERVING (503) while the upstream does not answer, saying why, and
    the start says so in the log; /health/liveness stays SERVING (nothing to restart)."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    with caplog.at_level("INFO", logger="budgeter.proxy"):
        proxy = make_proxy(upstream_url=url)
    assert any(f"the upstream {url}" in r.getMessage() and "503" in r.getMessage() and r.levelname == "WARNING"
               for r in caplog.records), caplog.text
    root = proxy.base_url.removesuffix("/v1")
    health = httpx.get(root + "/health")
    assert health.status_code == 503, health.text
    assert health.json()["status"] == "NOT_SERVING" and health.json()["upstream_reachable"] is False
    assert health.json()["store_reachable"] is True and url in health.json()["upstream_error"]
    live = httpx.get(root + "/health/liveness")
    assert live.status_code == 200 and live.json()["status"] == "SERVING"


def test_upstream_errors_pass_through_unchanged(proxy):
    error = {"error": {"message": "Failed to parse tool call arguments as JSON", "type": "server_error", "code": 500}}
    proxy.upstream.script(Script(status=500, error=error), Script(status=400, error={"error": {"message": "bad"}}))
    r = httpx.post(proxy.base_url + "/chat/completions", json={"model": "m", "messages": [SYSTEM, USER]})
    assert r.status_code == 500 and r.json() == error
    r = httpx.post(proxy.base_url + "/chat/completions",
                   json={"model": "m", "messages": [SYSTEM, USER], "stream": True})
    assert r.status_code == 400 and r.json() == {"error": {"message": "bad"}}


def test_budgeter_errors_are_400_with_the_reason_as_code(proxy):
    huge = {"role": "system", "content": "rules " * 5000}  # pinned, over the 3584-token budget
    with pytest.raises(openai.BadRequestError) as err:
        proxy.client.chat.completions.create(model="m", messages=[huge, USER])
    assert err.value.body["code"] == "PINNED_OVER_BUDGET" and "budget" in err.value.body["message"]
    assert proxy.upstream.received == []  # nothing was sent
    r = httpx.post(proxy.base_url + "/chat/completions", json={"model": "m", "messages": [{"role": "robot"}]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_MESSAGE"
    assert r.json()["error"]["param"] == "messages[0].role"
    r = httpx.post(proxy.base_url + "/chat/completions", content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_JSON"
    r = httpx.post(proxy.base_url + "/chat/completions", json={"model": "m", "messages": [USER]},
                   headers={"X-Budgeter-Session": "no spaces allowed"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_INPUT"
    for route in ("/chat/completions", "/budgeter/fit"):  # no messages: a clear 400, like `budgeter trim`
        r = httpx.post(proxy.base_url + route, json={"model": "m", "messages": []})
        assert r.status_code == 400 and r.json()["error"]["message"] == "messages must not be empty"


def test_a_silent_upstream_times_out_instead_of_hanging(make_proxy, upstream):
    proxy = make_proxy(upstream_read_timeout=0.5)
    upstream.script(Script(content="late", delay=3))
    r = httpx.post(proxy.base_url + "/chat/completions", json={"model": "m", "messages": [SYSTEM, USER]},
                   timeout=10)
    # (a 200 "late" had the proxy waited for the upstream: the code alone shows the timeout held)
    assert r.status_code == 504 and r.json()["error"]["code"] == "UPSTREAM_TIMEOUT"


def test_unknown_routes_are_openai_style_404s(proxy):
    r = httpx.get(proxy.base_url + "/embeddings")
    assert r.status_code == 404
    assert r.json() == {"error": {"message": "no such route: GET /v1/embeddings", "type": "invalid_request_error",
                                  "param": None, "code": "NOT_FOUND"}}
    r = httpx.get(proxy.base_url + "/chat/completions")
    assert r.status_code == 405 and r.json()["error"]["code"] == "METHOD_NOT_ALLOWED"


def test_models_health_and_metrics(proxy):
    assert [m.id for m in proxy.client.models.list()] == ["scripted"]
    root = proxy.base_url.removesuffix("/v1")
    health = httpx.get(root + "/health")
    assert health.status_code == 200 and health.json()["status"] == "SERVING"
    assert health.json()["upstream_reachable"] is True and health.json()["store_reachable"] is True
    proxy.upstream.script(Script(content="x", prompt_tokens=7))  # an upstream that counts otherwise
    proxy.client.chat.completions.create(model="m", messages=[SYSTEM, USER])
    text = httpx.get(root + "/metrics").text
    assert 'budgeter_rpc_duration_seconds_count{code="200",method="chat.completions"} 1.0' in text
    assert 'budgeter_proxy_prompt_tokens_mismatches_total{model="m"} 1.0' in text
    assert "budgeter_tokens_counted_total" in text and "budgeter_proxy_overhead_seconds_count 1.0" in text


def test_exact_replies_are_observed_at_zero(proxy, caplog):
    proxy.upstream.script(Script(content="x"))
    proxy.client.chat.completions.create(model="m", messages=[SYSTEM, USER])
    text = httpx.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    assert 'budgeter_proxy_prompt_tokens_delta_bucket{le="-1.0",model="m"} 0.0' in text
    assert 'budgeter_proxy_prompt_tokens_delta_bucket{le="0.0",model="m"} 1.0' in text
    assert "mismatch" not in caplog.text


def test_fit_returns_a_fitted_body_and_its_report(proxy):
    tools = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
    messages = [SYSTEM, USER]
    for i in range(12):
        messages += [{"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "run", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"line {i}\n" * 300}]
    messages.append({"role": "user", "content": "go on"})
    r = httpx.post(proxy.base_url + "/budgeter/fit",
                   json={"model": "m", "messages": messages, "tools": tools, "temperature": 0.2})
    assert r.status_code == 200
    out = r.json()
    assert out["body"]["model"] == "m" and out["body"]["temperature"] == 0.2 and out["body"]["tools"] == tools
    report = out["report"]
    assert report["tokens_before"] > report["budget"] >= report["tokens_after"] and report["fits"]
    assert report["compacted"] and out["body"]["messages"][-1] == {"role": "user", "content": "go on"}
    r = httpx.post(proxy.base_url + "/budgeter/fit",
                   json={"messages": messages, "tools": tools, "budgeter": {"window": 100000}})
    assert r.json()["report"]["compacted"] is False
    assert proxy.sessions.store.count() == 0  # stateless


def test_a_stream_cut_by_the_client_or_a_stalled_upstream_stores_nothing_and_never_hangs(make_proxy, upstream):
    proxy = make_proxy(upstream_read_timeout=0.5)
    body = {"model": "m", "messages": [SYSTEM, USER], "stream": True}
    upstream.script(Script(content="partial answer", stall=1.5))
    with httpx.stream("POST", proxy.base_url + "/chat/completions", json=body, timeout=10) as r:
        session = r.headers["x-budgeter-session"]
        next(r.iter_raw())  # the client goes away after the first chunk
    upstream.script(Script(content="partial answer", stall=3))
    with httpx.stream("POST", proxy.base_url + "/chat/completions", json=body, timeout=10) as r:
        got = b"".join(r.iter_raw())  # the upstream stalls past the read timeout: the stream ends
    assert b"partial" in got and b"[DONE]" not in got  # cut before the upstream's end
    time.sleep(1.6)
    assert [m.role for m in proxy.history(session)] == ["system", "user"]  # no half reply stored
    upstream.script(Script(content="whole"))
    r = httpx.post(proxy.base_url + "/chat/completions", json={**body, "stream": False})
    assert r.status_code == 200 and proxy.history(session)[-1].content == "whole"


def test_a_kept_alive_connection_the_upstream_closed_is_retried_on_a_new_one(make_proxy):
    """An upstream that keeps connections alive but closes one as the next request arrives on it
    (as llama.cpp's server may after a stream): the request goes again on a new connection instead
    of failing with a 502. Scripted with a raw socket server: the close is the behaviour tested."""
    import json
    import socketserver
    import threading

    reply = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                     "finish_reason": "stop"}]}).encode()
    connections = []

    class OneRequestPerConnection(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            connections.append(self.client_address)
            for served in range(2):
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    byte = self.rfile.read(1)
                    if not byte:
                        return
                    head += byte
                if served:  # a second request on this connection: dropped unanswered
                    return
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                self.rfile.read(length)
                self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                                 b"content-length: %d\r\n\r\n%s" % (len(reply), reply))
                self.wfile.flush()

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), OneRequestPerConnection)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        proxy = make_proxy(upstream_url=f"http://127.0.0.1:{server.server_address[1]}/v1")
        messages = [SYSTEM, USER]
        for k in range(3):
            got = proxy.client.chat.completions.create(model="m", messages=messages)
            assert got.choices[0].message.content == "ok"
            messages = [*messages, {"role": "assistant", "content": "ok"}, {"role": "user", "content": f"q{k}"}]
        assert len(connections) >= 3  # each request after the first was refused on its old connection
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("options,field", [({"window": "x"}, "policy.window"), ({"reserve": [1]}, "policy.reserve"),
                                           ({"keep_latest_failure": 1}, "policy.keep_latest_failure")])
def test_fit_with_an_ill_typed_policy_field_is_a_400_naming_it(proxy, options, field):
    r = httpx.post(proxy.base_url + "/budgeter/fit", json={"messages": [SYSTEM, USER], "budgeter": options})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field


def test_a_lone_surrogate_in_content_is_replaced_not_a_500(proxy):
    raw = ('{"messages": [{"role": "user", "content": "half \\ud800 of a pair"}, '
           '{"role": "user", "content": [{"type": "text", "text": "\\udfff"}]}]}')
    r = httpx.post(proxy.base_url + "/budgeter/fit", content=raw.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    assert [m["content"] for m in r.json()["body"]["messages"]] == ["half \ufffd of a pair", "\ufffd"]
    note = "2 lone surrogates replaced with U+FFFD: messages[0].content (1), messages[1].content (1)"
    assert r.headers["x-budgeter-notes"] == note and note in r.json()["report"]["notes"]


def test_a_chat_turn_with_lone_surrogates_sends_u_fffd_and_says_so(proxy, caplog):
    """Issue 55, item 4: lone surrogates in content and (escaped) in a call's arguments reach the
    upstream as U+FFFD in valid UTF-8, and the reply's X-Budgeter-Notes, the log and a metric say
    which message, which field and call, and how many; streamed or not. A clean turn says nothing."""
    call = {"id": "c1", "type": "function", "function": {"name": "write_file",
                                                         "arguments": '{"path": "a\\ud800.txt"}'}}
    raw = ('{"model": "m", "messages": [{"role": "user", "content": "half \\ud800 of a pair"}, '
           f'{{"role": "assistant", "content": "", "tool_calls": [{json.dumps(call)}]}}, '
           '{"role": "tool", "tool_call_id": "c1", "content": "written"}, {"role": "user", "content": "go"}]')
    note = ("2 lone surrogates replaced with U+FFFD: messages[0].content (1), "
            "messages[1].tool_calls[0].function.arguments of call 'c1' (1)")
    for stream in (False, True):
        body = (raw + f', "stream": {json.dumps(stream)}}}').encode()
        with caplog.at_level("WARNING", logger="budgeter.proxy"):
            r = httpx.post(proxy.base_url + "/chat/completions", content=body,
                           headers={"content-type": "application/json", "x-budgeter-session": f"s{stream}"})
        assert r.status_code == 200, r.text
        assert r.headers["x-budgeter-notes"] == note
        assert any(f"session s{stream}: {note}" == rec.getMessage() for rec in caplog.records), caplog.text
        sent = proxy.upstream.received[-1]
        json.dumps(sent, ensure_ascii=False).encode("utf-8")  # valid UTF-8: no surrogate left
        assert sent["messages"][0]["content"] == "half \ufffd of a pair"
        assert json.loads(sent["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {"path": "a\ufffd.txt"}
    clean = httpx.post(proxy.base_url + "/chat/completions", json={"model": "m", "messages": [SYSTEM, USER]})
    assert clean.status_code == 200 and "x-budgeter-notes" not in clean.headers
    metrics = httpx.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    assert 'budgeter_repaired_requests_total{kind="lone_surrogates"} 2.0' in metrics


NOT_COMPLETIONS = [
    (False, b"<html><body>502 Bad Gateway</body></html>", "text/html"),
    (False, b"[]", "application/json"),
    (False, b'{"object": "list", "data": []}', "application/json"),
    (False, b'{"choices": [{"index": 0, "finish_reason": "stop"}]}', "application/json"),
    (False, b"upstream says hello", "text/plain"),
    (True, b"<html><body>maintenance</body></html>", "text/html"),
    (True, b'{"id": "c", "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}]}',
     "application/json"),
    (True, b"<html><body>maintenance</body></html>", "text/event-stream"),
    (True, b"data: [DONE]\n\n", "text/event-stream"),
]


@pytest.mark.parametrize("stream,raw,media_type", NOT_COMPLETIONS)
def test_an_upstream_200_that_is_no_chat_completion_is_a_502_and_stores_nothing(proxy, stream, raw, media_type):
    proxy.upstream.script(Script(raw=raw, media_type=media_type))
    body = {"model": "m", "messages": [SYSTEM, USER], "stream": stream}
    r = httpx.post(proxy.base_url + "/chat/completions", json=body, headers={"X-Budgeter-Session": "s1"})
    assert r.status_code == 502, r.text
    error = r.json()["error"]
    assert error["code"] == "UPSTREAM_INVALID" and error["type"] == "upstream_error"
    assert proxy.upstream.base_url in error["message"]
    assert [m.role for m in proxy.history("s1")] == ["system", "user"]  # nothing stored as the reply
    proxy.upstream.script(Script(content="whole"))
    r = httpx.post(proxy.base_url + "/chat/completions", json=body, headers={"X-Budgeter-Session": "s1"})
    assert r.status_code == 200 and proxy.history("s1")[-1].content == "whole"


def test_a_reply_over_max_reply_bytes_is_a_502_naming_the_upstream_and_one_within_passes(make_proxy, upstream):
    proxy = make_proxy(max_reply_bytes=64 << 10)
    body = {"model": "m", "messages": [SYSTEM, USER]}
    headers = {"X-Budgeter-Session": "s1"}
    upstream.script(Script(content="x" * (100 << 10)))
    r = httpx.post(proxy.base_url + "/chat/completions", json=body, headers=headers)
    assert r.status_code == 502, r.text
    error = r.json()["error"]
    assert error["code"] == "UPSTREAM_TOO_LARGE" and error["type"] == "upstream_error"
    assert upstream.base_url in error["message"] and "max_reply_bytes" in error["message"]
    assert [m.role for m in proxy.history("s1")] == ["system", "user"]
    upstream.script(Script(content="y" * (40 << 10)))
    r = httpx.post(proxy.base_url + "/chat/completions", json=body, headers=headers)
    assert r.status_code == 200 and proxy.history("s1")[-1].content == "y" * (40 << 10)


def test_a_stream_over_max_reply_bytes_ends_with_an_error_event_and_stores_nothing(make_proxy, upstream):
    proxy = make_proxy(max_reply_bytes=64 << 10)
    body = {"model": "m", "messages": [SYSTEM, USER], "stream": True}
    upstream.script(Script(content="x" * 6000, split=True))  # ~860 events of ~150 bytes, each in two writes
    with pytest.raises(openai.APIError) as err:  # the error event, never half an event glued to it
        for _ in proxy.client.chat.completions.create(**body, extra_headers={"X-Budgeter-Session": "s1"}):
            pass
    assert "UPSTREAM_TOO_LARGE" in str(err.value.body) and "max_reply_bytes" in err.value.message
    assert [m.role for m in proxy.history("s1")] == ["system", "user"]
    upstream.script(Script(content="short"))
    got = "".join(c.choices[0].delta.content or "" for c in proxy.client.chat.completions.create(
        **body, extra_headers={"X-Budgeter-Session": "s1"}) if c.choices)
    assert got == "short" and proxy.history("s1")[-1].content == "short"


def test_a_stream_over_max_reply_bytes_in_its_first_piece_is_a_502(make_proxy, upstream):
    """Over the limit before anything was relayed (a loaded proxy reads the upstream in big pieces;
    here the first event alone is over it): a 502 naming the limit, never a 502 blaming the
    upstream's format, and nothing stored."""
    proxy = make_proxy(max_reply_bytes=64 << 10)
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [{"index": 0, "delta": {"content": "x" * (70 << 10)}, "finish_reason": None}]}
    upstream.script(Script(raw=b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n",
                           media_type="text/event-stream"))
    r = httpx.post(proxy.base_url + "/chat/completions", headers={"X-Budgeter-Session": "s1"}, timeout=60,
                   json={"model": "m", "messages": [SYSTEM, USER], "stream": True})
    assert r.status_code == 502 and r.json()["error"]["code"] == "UPSTREAM_TOO_LARGE", r.text[:300]
    assert [m.role for m in proxy.history("s1")] == ["system", "user"]


def test_a_reply_too_large_to_store_is_a_502_naming_the_upstream_not_a_400(proxy, upstream):
    """Over the default max_message_bytes (4 MiB), the store's limit for one message: it was a 400
    MESSAGE_TOO_LARGE naming messages[0], as if the client had sent it."""
    upstream.script(Script(content="x" * (5 << 20)))
    r = httpx.post(proxy.base_url + "/chat/completions", json={"model": "m", "messages": [SYSTEM, USER]},
                   headers={"X-Budgeter-Session": "s1"}, timeout=60)
    assert r.status_code == 502, r.text[:300]
    error = r.json()["error"]
    assert error["code"] == "UPSTREAM_TOO_LARGE" and "max_message_bytes" in error["message"]
    assert upstream.base_url in error["message"]
    assert [m.role for m in proxy.history("s1")] == ["system", "user"]


class Body:
    """A request body of ``chunks`` pieces of 64 KiB, counting how many the client got to send."""

    def __init__(self, chunks: int) -> None:
        self.chunks, self.sent = chunks, 0

    def __iter__(self):
        for _ in range(self.chunks):
            self.sent += 1
            yield b" " * (64 << 10)


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_body_over_max_request_bytes_is_a_413_before_the_rest_is_read(make_proxy, declared):
    """64 MiB offered against a limit of 128 KiB: the 413 comes while the client still has most of
    it to send (what the kernel's buffers take in meanwhile is far less than 64 MiB)."""
    proxy = make_proxy(max_request_bytes=128 << 10)
    body = Body(1024)
    headers = {"content-type": "application/json"}
    if declared:
        headers["content-length"] = str(1024 * (64 << 10))
    r = httpx.post(proxy.base_url + "/chat/completions", content=iter(body), headers=headers, timeout=60)
    assert r.status_code == 413, r.text
    error = r.json()["error"]
    assert error["code"] == "REQUEST_TOO_LARGE" and error["type"] == "invalid_request_error"
    assert str(128 << 10) in error["message"]
    assert body.sent < body.chunks  # the server stopped reading; the client never got to the end
    ok = httpx.post(proxy.base_url + "/chat/completions", json={"model": "m", "messages": [SYSTEM, USER]})
    assert ok.status_code == 200  # within the limit: served


def test_lone_surrogates_outside_content_are_replaced_and_fit_answers_not_a_500(proxy):
    """Found by tests/fuzz/test_mutations.py: a "\\ud800" escape in reasoning_content (or a name,
    an id, the model) reached the fit's JSON response as is, which cannot be UTF-8: a 500."""
    raw = ('{"model": "m\\ud800", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", '
           '"content": "", "reasoning_content": "\\ud800", "name": "a\\udc00", "tool_calls": [{"id": "c\\ud800", '
           '"type": "function", "function": {"name": "f\\ud800", "arguments": {"p": "\\ud800"}}}]}, '
           '{"role": "tool", "tool_call_id": "c\\ud800", "content": "ok"}, {"role": "user", "content": "go"}]}')
    r = httpx.post(proxy.base_url + "/budgeter/fit", content=raw.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    assert r.json()["body"]["model"] == "m\ud800"  # passed through, escaped as it came
    m = r.json()["body"]["messages"][1]
    assert (m["reasoning_content"], m["tool_calls"][0]["id"], m["tool_calls"][0]["function"]["name"]) == (
        "\ufffd", "c\ufffd", "f\ufffd")
    notes = r.headers["x-budgeter-notes"]
    for where in ("messages[1].reasoning_content (1)", "messages[1].name (1)", "messages[1].tool_calls[0].id (1)",
                  "messages[1].tool_calls[0].function.name (1)", "messages[2].tool_call_id (1)",
                  "messages[1].tool_calls[0].function.arguments of call 'c?' (1)"):
        assert where in notes, notes


@pytest.mark.parametrize("stream", ["yes", 1, [], {}])
def test_a_stream_flag_that_is_not_a_boolean_is_a_400(proxy, stream):
    """Found by tests/fuzz/test_mutations.py: ``"stream": "yes"`` was sent on as is, the proxy
    reading the reply as a completion and a server taking the flag as true streaming it (a 502)."""
    r = httpx.post(proxy.base_url + "/chat/completions", json={"messages": [SYSTEM, USER], "stream": stream})
    assert r.status_code == 400, r.text
    assert (r.json()["error"]["code"], r.json()["error"]["param"]) == ("INVALID_INPUT", "stream")
    assert proxy.upstream.received == []


@pytest.mark.parametrize("route", ["/chat/completions", "/budgeter/fit"])
def test_tools_nested_too_deep_are_a_400_naming_them_and_deep_arguments_pass(proxy, route):
    """A schema 99 objects deep made the first call of its tool a 500 (the JSON Schema check
    overflowed the stack); arguments nested ~990 levels overflowed the encoder."""
    schema: dict = {"type": "string"}
    for _ in range(99):
        schema = {"type": "object", "properties": {"a": schema}}
    deep = [{"type": "function", "function": {"name": "deep", "parameters": schema}}]
    r = httpx.post(proxy.base_url + route, json={"model": "m", "messages": [SYSTEM, USER], "tools": deep})
    assert r.status_code == 400, r.text
    assert (r.json()["error"]["code"], r.json()["error"]["param"]) == ("TOOLS_TOO_DEEP", "tools")
    assert proxy.upstream.received == []
    flat = [{"type": "function", "function": {"name": "deep", "parameters": {"type": "object"}}}]
    called = {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "deep", "arguments": '{"a": ' * 989 + "1" + "}" * 989}}]}
    history = [SYSTEM, USER, called, {"role": "tool", "tool_call_id": "c", "content": "done"}]
    r = httpx.post(proxy.base_url + route, json={"model": "m", "messages": history, "tools": flat})
    assert r.status_code == 200, r.text
