"""Hostile and broken input: the engine and the service answer with a defined error, never a
crash, a hang, INTERNAL or UNKNOWN."""

from __future__ import annotations

import json
import os

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budgeter.core import Policy, trim
from budgeter.core.guards import validate_tool_call
from budgeter.core.jsonargs import classify_arguments, dumps_text
from budgeter.core.messages import ToolCall, from_openai_list
from budgeter.errors import BudgeterError
from budgeter.v1 import budgeter_pb2 as pb
from budgeter.v1 import budgeter_pb2_grpc as pb_grpc
from budgeter.wire import error_info

EXAMPLES = int(os.environ.get("BUDGETER_FUZZ_EXAMPLES", "60"))
"""Examples per fuzz test; a long run: BUDGETER_FUZZ_EXAMPLES=2000 python -m pytest tests/fuzz."""
DEEP = "[" * 10_000 + "]" * 10_000
NASTY_TEXT = st.sampled_from(["", "\x00", "a\x00b", "\ud800", "x\udfffy", "{" * 5000, DEEP,
                              "⟦budgeter:elided h=0123456789abcdef⟧", "<|im_start|>", "🎉" * 50,
                              "x" * 200_000, '"\\ud800"', "\\", "\n" * 1000])
NASTY_ARGS = st.sampled_from(['{"a": ' + DEEP + "}", "{" * 10_000, '{"a": "\\ud800"}', '{"p": "\\u0000"}',
                              "", "null", "[]", '{"a": 1', '"{\\"a\\": 1}"', "```json\n{}\n```",
                              '{"path": "' + "x" * 100_000])
DEFINED = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
           grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.ABORTED, grpc.StatusCode.RESOURCE_EXHAUSTED}


@st.composite
def hostile_sessions(draw):
    msgs = []
    for n in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["user", "system", "call", "orphan", "dup", "result"]))
        text = draw(NASTY_TEXT)
        if kind in ("user", "system"):
            msgs.append({"role": kind, "content": text})
        elif kind == "orphan":
            msgs.append({"role": "tool", "tool_call_id": f"nope{n}", "content": text})
        else:
            cid = "same" if kind == "dup" else f"c{n}"
            msgs.append({"role": "assistant", "content": "", "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": "write_file", "arguments": draw(NASTY_ARGS)}}]})
            if kind != "call":
                msgs.append({"role": "tool", "tool_call_id": cid, "content": text})
    return msgs


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_sessions(), st.integers(64, 8000))
def test_engine_survives_hostile_sessions(qwen36, raw, window):
    try:
        result = trim(from_openai_list(raw), counter=qwen36, policy=Policy(window=window, reserve=32))
    except BudgeterError as exc:  # a defined error (e.g. pinned content over budget)
        assert exc.reason in ("PINNED_OVER_BUDGET", "INVALID_MESSAGE", "TEMPLATE_ERROR") or \
            (exc.reason == "INVALID_INPUT" and not raw)  # nothing to trim
        return
    assert result.tokens <= window - 32
    for m in result.messages:
        for c in m.tool_calls:
            assert isinstance(json.loads(c.arguments), dict)
    dumps_text(result.openai_messages()).encode()  # what the CLI prints is encodable as UTF-8


@settings(max_examples=EXAMPLES, deadline=None)
@given(NASTY_ARGS, st.sampled_from([None, "length", "stop"]))
def test_argument_checks_survive_hostile_arguments(args, finish):
    classify_arguments(args, finish_reason=finish)
    verdict = validate_tool_call(ToolCall("a", "write_file", args), [
        {"type": "function", "function": {"name": "write_file", "parameters": {
            "type": "object", "required": ["path"], "properties": {"path": {"type": "string"}}}}}],
        finish_reason=finish)
    verdict.arguments.encode()  # always encodable (lone surrogates escaped)


def test_a_window_smaller_than_the_system_prompt_is_a_clear_error(qwen36):
    with pytest.raises(BudgeterError) as e:
        trim(from_openai_list([{"role": "system", "content": "rule " * 500}]), counter=qwen36,
             policy=Policy(window=100, reserve=10))
    assert e.value.reason == "PINNED_OVER_BUDGET" and "system message #0" in e.value.message


# -- the service ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def live_server():
    from budgeter.service.server import create_server
    from budgeter.store import MemoryStore
    from tests.service.conftest import settings as server_settings

    srv = create_server(server_settings(max_message_bytes=300_000), store=MemoryStore())
    channel = grpc.insecure_channel(srv.target)
    stub = pb_grpc.BudgeterServiceStub(channel)
    stub.CreateSession(pb.CreateSessionRequest(session_id="fuzz", policy=pb.Policy(window=4096, reserve=64)))
    yield srv, channel, stub
    channel.close()
    srv.stop(0)


def _assert_defined(call):
    try:
        call()
    except grpc.RpcError as err:
        assert err.code() in DEFINED, (err.code(), err.details())
        info = error_info(err)
        assert info is not None and info.reason and info.domain == "budgeter"


ROLES = st.sampled_from([pb.ROLE_UNSPECIFIED, pb.ROLE_SYSTEM, pb.ROLE_USER, pb.ROLE_ASSISTANT, pb.ROLE_TOOL, 7])
SAFE_TEXT = NASTY_TEXT.map(lambda t: t.encode("utf-8", "replace").decode("utf-8"))


@st.composite
def pb_messages(draw):
    out = []
    for _ in range(draw(st.integers(0, 5))):
        m = pb.Message(role=draw(ROLES), content=draw(SAFE_TEXT), tool_call_id=draw(st.sampled_from(["", "a", "b"])),
                       finish_reason=draw(st.sampled_from(["", "length"])), status=draw(st.integers(0, 3)))
        if draw(st.booleans()):
            m.tool_calls.add(id=draw(st.sampled_from(["a", "a", ""])), name=draw(st.sampled_from(["", "f"])),
                             arguments=draw(NASTY_ARGS).encode("utf-8", "replace").decode("utf-8"))
        out.append(m)
    return out


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(pb_messages(), st.sampled_from(["sessions/fuzz", "fuzz", "", "sessions/../x", "sessions/" + "z" * 300]))
def test_service_answers_random_requests_with_defined_codes(live_server, messages, session):
    _, _, stub = live_server
    _assert_defined(lambda: stub.AppendMessages(pb.AppendMessagesRequest(session=session, messages=messages)))
    _assert_defined(lambda: stub.BuildPrompt(pb.BuildPromptRequest(session=session)))
    _assert_defined(lambda: stub.CountTokens(pb.CountTokensRequest(messages=messages)))
    _assert_defined(lambda: stub.ValidateToolCall(pb.ValidateToolCallRequest(
        tool_call=messages[0].tool_calls[0] if messages and messages[0].tool_calls else pb.ToolCall(name="f"),
        tools_json=draw_tools(messages))))


def draw_tools(messages) -> str:
    return "[" * 3000 if len(messages) % 3 == 1 else ('[{"x": "\\ud800"}]' if len(messages) % 3 == 2 else "")


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400), st.sampled_from(["AppendMessages", "BuildPrompt", "CreateSession",
                                                  "CountTokens", "PlanEdits", "GetPayload"]))
def test_mutated_protobuf_bytes_get_invalid_argument_not_internal(live_server, data, method):
    _, channel, _ = live_server
    call = channel.unary_unary(f"/budgeter.v1.BudgeterService/{method}",
                               request_serializer=None, response_deserializer=None)
    _assert_defined(lambda: call(data, timeout=30))


def test_limits_are_checked_before_tokenizing(live_server):
    _, _, stub = live_server
    with pytest.raises(grpc.RpcError) as e:
        stub.AppendMessages(pb.AppendMessagesRequest(session="fuzz", messages=[
            pb.Message(role=pb.ROLE_USER, content="x" * 400_000)]))
    assert error_info(e.value).reason == "MESSAGE_TOO_LARGE"
