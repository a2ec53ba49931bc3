"""The gRPC API through a real server on 127.0.0.1:0 and a real channel."""

from __future__ import annotations

import contextlib
import json
import urllib.request

import grpc
import pytest

from budgeter.client import Client, ClientError
from budgeter.core.messages import from_openai_list
from budgeter.core.policy import Policy
from budgeter.service.server import create_server
from budgeter.store import MemoryStore
from budgeter.tokenizers import resolve
from budgeter.v1 import budgeter_pb2 as pb
from budgeter.v1 import budgeter_pb2_grpc as pb_grpc
from budgeter.wire import error_info
from tests.service.agent import TOOLS, turns
from tests.service.conftest import settings


def reason_of(excinfo) -> tuple[grpc.StatusCode, str]:
    return excinfo.value.code, excinfo.value.reason


def test_session_lifecycle_and_paging(client):
    ids = [client.create_session(session_id=f"s{i}", window=8192).id for i in range(5)]
    assert ids == [f"s{i}" for i in range(5)]
    auto = client.create_session()
    assert len(auto.id) == 32
    assert list(client.list_sessions(page_size=2)) == sorted([*ids, auto.id])
    got = client.get_session("s1")
    assert got["name"] == "sessions/s1" and got["policy"]["window"] == 8192
    assert got["tokenizer"] == "qwen3.6" and got["message_count"] == 0
    client.delete_session("s1")
    with pytest.raises(ClientError) as e:
        client.get_session("s1")
    assert reason_of(e) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
    with pytest.raises(ClientError) as e:
        client.create_session(session_id="s2")
    assert reason_of(e) == (grpc.StatusCode.ALREADY_EXISTS, "SESSION_EXISTS")


def test_each_session_shows_its_own_stored_config_on_every_read(client):
    """A stored config is parsed once and its tools written out once (``SessionConfig.from_json``,
    ``convert.session_to_pb``): every read still shows each session its own."""
    from budgeter.sessions.model import SessionConfig

    shapes = {"ta": TOOLS, "tb": TOOLS[:1], "tc": []}
    for sid, tools in shapes.items():
        client.create_session(session_id=sid, tools=tools, window=8192 if sid == "tb" else 32768)
    for _ in range(2):
        for sid, tools in shapes.items():
            got = client.get_session(sid)
            assert json.loads(got["tools_json"]) == tools
            assert got["policy"]["window"] == (8192 if sid == "tb" else 32768)
    text = SessionConfig(tokenizer="t", spec="s", policy=Policy(), tools=tuple(TOOLS)).to_json()
    assert SessionConfig.from_json(text) is SessionConfig.from_json(text)
    assert SessionConfig.from_json(text).tools == tuple(TOOLS)


@pytest.mark.parametrize(("kwargs", "reason", "field"), [
    ({"window": 100, "reserve": 200}, "INVALID_INPUT", "policy.reserve"),
    ({"low_water": 3.0}, "INVALID_INPUT", "policy.low_water"),
    ({"session_id": "bad id/x"}, "INVALID_INPUT", "session_id"),
])
def test_create_rejects_bad_input_with_field(server, kwargs, reason, field):
    stub = pb_grpc.BudgeterServiceStub(grpc.insecure_channel(server.target))
    sid = kwargs.pop("session_id", "")
    with pytest.raises(grpc.RpcError) as e:
        stub.CreateSession(pb.CreateSessionRequest(session_id=sid, policy=pb.Policy(**kwargs)))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(e.value)
    assert info.reason == reason and info.domain == "budgeter" and info.metadata["field"] == field


def test_unknown_tokenizer_lists_what_exists(client):
    with pytest.raises(ClientError) as e:
        client.create_session(tokenizer="gemma-9")
    assert reason_of(e) == (grpc.StatusCode.NOT_FOUND, "UNKNOWN_TOKENIZER")
    assert "qwen3.6" in e.value.metadata["available"]


def test_append_counts_flags_truncation_and_is_idempotent(client):
    session = client.create_session(tools=TOOLS)
    batch = [m for t in turns(3) for m in t]
    out = session.append(batch, request_id="req-1")
    counter = resolve("qwen3.6")
    assert [int(m["tokens"]) for m in out["messages"]] == [
        counter.message_cost(m) for m in from_openai_list(batch)]
    assert [m["index"] for m in out["messages"]] == list(range(len(batch)))
    verdicts = {c["id"]: c for m in out["messages"] for c in m["tool_calls"]}
    assert verdicts["t2"]["status"] == "TRUNCATED" and not verdicts["t2"]["runnable"]
    assert verdicts["r1"]["status"] == "VALID" and verdicts["r1"]["runnable"]
    assert verdicts["r1"]["operation"] == "READ"
    assert verdicts["r1"]["path"] == "src/mod1.py"
    assert out["messages"][3]["result_status"] == "ERROR"
    again = session.append(batch, request_id="req-1")
    assert again["replayed"] and again["messages"] == out["messages"]
    assert client.get_session(session.id)["message_count"] == len(batch)
    with pytest.raises(ClientError) as e:
        session.append([{"role": "user", "content": "other"}], request_id="req-1")
    assert reason_of(e) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_ID_REUSED")


def test_etag_guards_concurrent_writers(client):
    session = client.create_session()
    first = session.append([{"role": "user", "content": "a"}])
    session.append([{"role": "user", "content": "b"}], etag=first["etag"])
    with pytest.raises(ClientError) as e:
        session.append([{"role": "user", "content": "c"}], etag=first["etag"])
    assert reason_of(e) == (grpc.StatusCode.ABORTED, "ETAG_MISMATCH")
    assert client.get_session(session.id)["message_count"] == 2


def test_limits_and_invalid_messages(server):
    srv = create_server(settings(max_messages_per_append=3, max_message_bytes=2048,
                                 max_sessions=2), store=MemoryStore())
    try:
        with Client(srv.target) as c:
            s = c.create_session()
            with pytest.raises(ClientError) as e:
                s.append([{"role": "user", "content": "x"}] * 4)
            assert reason_of(e) == (grpc.StatusCode.INVALID_ARGUMENT, "TOO_MANY_MESSAGES")
            with pytest.raises(ClientError) as e:
                s.append([{"role": "user", "content": "x" * 5000}])
            assert reason_of(e) == (grpc.StatusCode.INVALID_ARGUMENT, "MESSAGE_TOO_LARGE")
            assert e.value.metadata["field"] == "messages[0]"
            c.create_session()
            with pytest.raises(ClientError) as e:
                c.create_session()
            assert reason_of(e) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_SESSIONS")
            stub = pb_grpc.BudgeterServiceStub(c.channel)
            bad = pb.AppendMessagesRequest(session=f"sessions/{s.id}", messages=[
                pb.Message(role=pb.ROLE_TOOL, content="orphan")])
            with pytest.raises(grpc.RpcError) as e2:
                stub.AppendMessages(bad)
            assert e2.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert error_info(e2.value).reason == "INVALID_MESSAGE"
            assert c.get_session(s.id)["message_count"] == 0
    finally:
        srv.stop(0)


def test_build_fits_exactly_and_payloads_come_back(client):
    session = client.create_session(tools=TOOLS, window=6000, reserve=500)
    counter = resolve("qwen3.6")
    history = []
    prompts = []
    for t in turns(17):  # with Qwen3.6's template the first drop_oldest digest comes at turn 17
        session.append(t)
        history += t
        prompts.append(session.prompt())
    for p in prompts:
        assert p.tokens <= p.budget == 5500
        assert p.tokens == counter.count_prompt(from_openai_list(p.messages), TOOLS)
        for m in p.messages:
            for c in m.get("tool_calls", ()):
                json.loads(c["function"]["arguments"])
    assert any(p.report.get("compacted") for p in prompts)
    for before, p in zip(prompts, prompts[1:], strict=False):  # between compactions only the tail changes
        if not p.report["compacted"]:
            assert p.extends_previous or p.prefix_changed_at >= len(before.messages) - 6
            assert p.report["reread_tokens"] <= p.tokens
    handles = {h for p in prompts for h in p.report.get("handles", ())}
    assert handles
    texts = {m.get("content", "") for m in history}
    for m in history:
        for c in m.get("tool_calls", ()):
            texts.add(c["function"]["arguments"])
            with contextlib.suppress(ValueError):
                texts.update(v for v in json.loads(c["function"]["arguments"]).values()
                             if isinstance(v, str))
    kinds = set()
    for h in handles:  # byte for byte what was elided: a text, or the messages a digest replaced
        payload = session.payload(h)
        if payload in texts:
            kinds.add("text")
            continue
        dropped = json.loads(payload)
        # digests keep messages as appended, budgeter's finish_reason extension included (lossless)
        assert dropped and all(m in history for m in dropped), h
        kinds.add("messages")
    assert kinds == {"text", "messages"}
    with pytest.raises(ClientError) as e:
        session.payload("0000000000000000")
    assert reason_of(e) == (grpc.StatusCode.NOT_FOUND, "PAYLOAD_NOT_FOUND")


def test_overrides_do_not_change_the_session(client):
    session = client.create_session(window=32768)
    for t in turns(6):
        session.append(t)
    full = session.prompt()
    small = session.prompt(window=3000, reserve=200)
    assert small.tokens <= 2800 < full.tokens
    assert session.prompt().messages == full.messages
    with pytest.raises(ClientError) as e:
        session.prompt(window=100, reserve=500)
    assert reason_of(e) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_INPUT")


def test_pinned_over_budget_is_failed_precondition(client):
    session = client.create_session(window=300, reserve=10)
    session.append([{"role": "system", "content": "rule " * 400}, {"role": "user", "content": "hi"}])
    with pytest.raises(ClientError) as e:
        session.prompt()
    assert reason_of(e) == (grpc.StatusCode.FAILED_PRECONDITION, "PINNED_OVER_BUDGET")


def test_count_tokens_and_tokenizers(client):
    counter = resolve("qwen3.6")
    msgs = [{"role": "user", "content": "hello ✓"}]
    assert client.count_tokens(msgs, tools=TOOLS) == counter.count_prompt(from_openai_list(msgs), TOOLS)
    assert client.count_tokens(text="hello world") == counter.count_text("hello world")
    with pytest.raises(ClientError) as e:
        client.count_tokens(msgs, text="both")
    assert reason_of(e) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_INPUT")
    names = {t["name"]: t for t in client.tokenizers()}
    assert names["qwen3.6"]["is_default"] and "mistral-tekken" in names


def test_unknown_session_everywhere(client):
    for call in (lambda: client.prompt("nope"), lambda: client.payload("nope", "h"),
                 lambda: client.append("nope", [{"role": "user", "content": "x"}]),
                 lambda: client.delete_session("nope")):
        with pytest.raises(ClientError) as e:
            call()
        assert reason_of(e) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")


def test_health_reflection_and_metrics():
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )

    from tests.redis_server import free_port

    srv = create_server(settings(metrics_port=free_port()), store=MemoryStore())
    try:
        channel = grpc.insecure_channel(srv.target)
        health = health_pb2_grpc.HealthStub(channel)
        reply = health.Check(health_pb2.HealthCheckRequest(service="budgeter.v1.BudgeterService"))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        db = ProtoReflectionDescriptorDatabase(channel)
        assert "budgeter.v1.BudgeterService" in db.get_services()
        from google.protobuf.descriptor_pool import DescriptorPool

        service = DescriptorPool(db).FindServiceByName("budgeter.v1.BudgeterService")
        assert {"AppendMessages", "BuildPrompt", "GetPayload"} <= set(service.methods_by_name)
        with Client(srv.target) as c:
            c.create_session().append([{"role": "user", "content": "hi"}])
            with pytest.raises(ClientError):
                c.get_session("missing")
        text = urllib.request.urlopen(f"http://127.0.0.1:{srv.metrics_port}/metrics").read().decode()
        assert 'budgeter_rpc_duration_seconds_count{code="OK",method="AppendMessages"} 1.0' in text
        assert 'code="NOT_FOUND",method="GetSession"' in text
        assert 'budgeter_tokens_counted_total{tokenizer="qwen3.6"}' in text
    finally:
        srv.stop(0)
        channel.close()
    reply_after = None
    channel = grpc.insecure_channel(srv.target)
    health = health_pb2_grpc.HealthStub(channel)
    with pytest.raises(grpc.RpcError):
        reply_after = health.Check(health_pb2.HealthCheckRequest(), timeout=1)
    assert reply_after is None
    channel.close()


def test_readme_agent_loop(client):
    """The README's loop, with a scripted model: a cut write is refused, then redone."""
    replies = iter([
        {"role": "assistant", "content": "", "finish_reason": "length", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "write_file", "arguments": '{"path": "a.py", "content": "pri'}}]},
        {"role": "assistant", "content": "", "finish_reason": "tool_calls", "tool_calls": [
            {"id": "c2", "type": "function",
             "function": {"name": "write_file", "arguments": '{"path": "a.py", "content": "print(1)"}'}}]},
        {"role": "assistant", "content": "Done.", "finish_reason": "stop"},
    ])
    ran = []
    session = client.create_session(tools=TOOLS, window=32768, reserve=2048)
    session.append([{"role": "system", "content": "sys"}, {"role": "user", "content": "write a.py"}])
    while True:
        prompt = session.prompt()
        assert prompt.tokens <= prompt.budget
        reply = next(replies)
        verdicts = session.append([reply])["messages"][0]["tool_calls"]
        if not verdicts:
            break
        session.append([{"role": "tool", "tool_call_id": v["id"],
                         "content": ran.append(c["id"]) or "ok" if v["runnable"]
                         else f"Error: {v['detail']}; send it again"}
                        for c, v in zip(reply["tool_calls"], verdicts, strict=True)])
    assert ran == ["c2"]
    results = [m for m in session.prompt().messages if m["role"] == "tool"]
    assert results[0]["content"].startswith("Error: cut inside a string")


def test_prompt_views(client, server):
    session = client.create_session(tools=TOOLS)
    for t in turns(3):
        session.append(t)
    stub = pb_grpc.BudgeterServiceStub(client.channel)
    name = f"sessions/{session.id}"
    full = stub.BuildPrompt(pb.BuildPromptRequest(session=name))
    typed = stub.BuildPrompt(pb.BuildPromptRequest(session=name, view=pb.PROMPT_VIEW_TYPED))
    text = stub.BuildPrompt(pb.BuildPromptRequest(session=name, view=pb.PROMPT_VIEW_JSON))
    assert full.messages == typed.messages and not typed.body_json
    assert full.body_json == text.body_json and not text.messages
    from budgeter.client import messages_of

    body = json.loads(full.body_json)
    assert messages_of(full) == body["messages"] and body["tools"] == TOOLS
    assert full.tokens == typed.tokens == text.tokens


def test_append_and_build_in_one_call(client):
    session = client.create_session(tools=TOOLS)
    batch = [m for t in turns(2) for m in t]
    prompt = session.prompt(append=batch, request_id="turn-1")
    assert [m["content"] for m in prompt.messages][:2] == [batch[0]["content"], batch[1]["content"]]
    assert len(prompt.appended["messages"]) == len(batch) and not prompt.appended["replayed"]
    again = session.prompt(append=batch, request_id="turn-1")  # a retry: nothing appended twice
    assert again.appended["replayed"] and again.messages == prompt.messages
    assert client.get_session(session.id)["message_count"] == len(batch)
    cut = session.prompt(append=[{"role": "assistant", "content": "", "finish_reason": "length",
                                  "tool_calls": [{"id": "x", "type": "function", "function": {
                                      "name": "write_file", "arguments": '{"path": "a", "content": "b'}}]}])
    verdict = cut.appended["messages"][0]["tool_calls"][0]
    assert verdict["status"] == "TRUNCATED" and not verdict["runnable"]
    with pytest.raises(ClientError) as e:
        session.prompt(append=[{"role": "user", "content": "x" * 10}] * 5000)
    assert e.value.reason == "TOO_MANY_MESSAGES"


def test_prompt_since_the_previous_one_sends_only_what_changed(client, server):
    """A client that holds the previous prompt gets the messages after the shared prefix; the prompt
    it rebuilds equals the whole one, turn by turn, through compaction (a small window)."""
    session = client.create_session(tools=TOOLS, window=3000, reserve=256)
    stub = pb_grpc.BudgeterServiceStub(client.channel)
    prev = None
    compacted = kept = 0
    for t in turns(12):
        delta = session.prompt(append=t, since=prev)
        whole = session.prompt()  # the same history built again: the same prompt, sent whole
        assert (delta.messages, delta.tools, delta.tokens) == (whole.messages, whole.tools, whole.tokens)
        assert delta.prompt_id and delta.prompt_id != whole.prompt_id
        raw = stub.BuildPrompt(pb.BuildPromptRequest(session=f"sessions/{session.id}", view=pb.PROMPT_VIEW_JSON,
                                                     known_prompt=whole.prompt_id))
        sent = json.loads(raw.body_json)
        assert raw.kept_messages == len(whole.messages) and sent == {"messages": []}  # nothing changed
        typed = stub.BuildPrompt(pb.BuildPromptRequest(session=f"sessions/{session.id}", known_prompt=raw.prompt_id))
        assert typed.kept_messages == len(whole.messages) and not typed.messages  # both views: the change only
        if prev is not None and delta.prefix_changed_at:  # the kept messages are the ones the client held
            assert delta.messages[0] is prev.messages[0]
            kept += 1
        compacted += delta.report["compacted"]
        prev = session.prompt()
    assert compacted and kept >= 6
    stale = session.prompt(since=delta)  # not the previous prompt any more: the whole body
    assert stale.messages == session.prompt().messages and stale.tools == TOOLS
    assert session.prompt(since=prev, reserve=512).prompt_id == ""  # overrides: a one-off prompt


def _rewriting_profile(name: str) -> str:
    """A tokenizer spec whose template needs the conversation rewritten (or a skip saying why)."""
    if name == "llama3":  # its template renders no tool schemas: the tools go in the system message
        from tests.conftest import shared_tokenizer

        return shared_tokenizer("llama3_1")
    from tests.proxy.gemma import gemma_model  # Gemma 3's template: strict alternation, no tool roles

    model, why = gemma_model()
    if model is None:
        pytest.skip(why)
    return str(model)


@pytest.mark.parametrize("profile", ["llama3", "gemma3"])
def test_a_prompt_rewritten_for_the_template_is_also_sent_as_what_changed(profile):
    """A prompt sent rewritten for the profile's template: a client that holds the previous one and
    takes a change gets the rewritten messages after the ones the two share (where a new tool
    result merges into the last user turn, from that turn on); one that does not gets the whole
    body, as a client written before that answer does."""
    srv = create_server(settings(tokenizers={profile: _rewriting_profile(profile)},
                                 chat_formats={"gemma3": "gemma3"} if profile == "gemma3" else {}),
                        store=MemoryStore())
    try:
        with Client(srv.target, timeout=60) as client:
            session = client.create_session(tokenizer=profile, tools=TOOLS, window=3000, reserve=256)
            stub = pb_grpc.BudgeterServiceStub(client.channel)
            prev = None
            compacted = kept = partial = 0
            for t in turns(12):
                delta = session.prompt(append=t, since=prev)
                whole = session.prompt()
                assert (delta.messages, delta.tools, delta.tokens) == (whole.messages, whole.tools, whole.tokens)
                assert whole.messages[0]["role"] == "system" and whole.tools == []  # (rewritten: tools as text)
                if prev is not None and delta.messages[0] is prev.messages[0]:  # the client kept its own
                    kept += 1
                    last = len(prev.messages) - 1  # a turn that sent its last message again, changed
                    partial += len(delta.messages) > last and delta.messages[last] is not prev.messages[last]
                compacted += delta.report["compacted"]

                def raw(known: str, accept: bool) -> pb.BuildPromptResponse:
                    return stub.BuildPrompt(pb.BuildPromptRequest(
                        session=f"sessions/{session.id}", view=pb.PROMPT_VIEW_JSON, known_prompt=known,
                        accept_body_delta=accept))

                same = raw(whole.prompt_id, True)  # nothing changed since: no message sent
                assert (same.kept_messages, same.kept_body_messages) == (0, len(whole.messages))
                assert json.loads(same.body_json) == {"messages": []}
                plain = raw(same.prompt_id, False)  # a client that does not take a change: the whole body
                assert plain.kept_body_messages == 0 and json.loads(plain.body_json)["messages"] == whole.messages
                prev = session.prompt()
            assert compacted and kept >= 8 and partial
            stale = session.prompt(since=delta)  # not the previous prompt any more: the whole body
            assert stale.messages == session.prompt().messages
    finally:
        srv.stop(0)
