"""The gRPC front door says when it made lone surrogates U+FFFD (issue 55, item 4). A protobuf
string is UTF-8, so a lone surrogate reaches the server only as a ``"\\ud800"`` escape inside
tool-call arguments; the Python client makes raw ones U+FFFD before sending and says so itself."""

from __future__ import annotations

import json

from budgeter.client import Client
from budgeter.core.jsonargs import loads
from budgeter.v1 import budgeter_pb2 as pb
from budgeter.v1 import budgeter_pb2_grpc as pb_grpc

ESCAPED = '{"path": "a\\ud800.txt", "text": "\\udc00"}'
NOTE = "2 lone surrogates replaced with U+FFFD: messages[0].tool_calls[0].function.arguments of call 'c1' (2)"


def call_and_result() -> list[pb.Message]:
    return [pb.Message(role=pb.ROLE_ASSISTANT, tool_calls=[pb.ToolCall(id="c1", name="write_file", arguments=ESCAPED)]),
            pb.Message(role=pb.ROLE_TOOL, tool_call_id="c1", content="written")]


def repaired_call(body_json: str) -> dict:
    body_json.encode("utf-8")  # valid UTF-8: no surrogate, raw or escaped, is left in it
    assert "\\ud800" not in body_json and "\\udc00" not in body_json
    call = next(m for m in loads(body_json)["messages"] if m.get("tool_calls"))
    return json.loads(call["tool_calls"][0]["function"]["arguments"])


def repairs_counted(server) -> float | None:
    return server.metrics.registry.get_sample_value("budgeter_repaired_requests_total", {"kind": "lone_surrogates"})


def test_append_messages_and_build_prompt_report_an_escaped_surrogate_in_arguments(server):
    with Client(server.target) as c:
        sid = c.create_session().id
        stub = pb_grpc.BudgeterServiceStub(c.channel)
        appended = stub.AppendMessages(pb.AppendMessagesRequest(session=f"sessions/{sid}", messages=[
            pb.Message(role=pb.ROLE_USER, content="Save a note."), *call_and_result()]))
        assert list(appended.notes) == [NOTE.replace("messages[0]", "messages[1]")]
        later = stub.BuildPrompt(pb.BuildPromptRequest(session=f"sessions/{sid}"))
        assert repaired_call(later.body_json) == {"path": "a\ufffd.txt", "text": "\ufffd"}
        assert not any("lone surrogate" in n for n in later.report.notes)  # said once, by the append

        built = stub.BuildPrompt(pb.BuildPromptRequest(session=f"sessions/{sid}", messages=call_and_result()))
        assert list(built.appended.notes) == [NOTE] and NOTE in built.report.notes
        assert repaired_call(built.body_json) == {"path": "a\ufffd.txt", "text": "\ufffd"}

        counted = stub.CountTokens(pb.CountTokensRequest(messages=call_and_result()))
        assert NOTE in counted.notes
        clean = stub.AppendMessages(pb.AppendMessagesRequest(session=f"sessions/{sid}", messages=[
            pb.Message(role=pb.ROLE_USER, content="And now?")]))
        assert list(clean.notes) == []
    assert repairs_counted(server) == 3


def test_the_python_client_repairs_before_sending_and_says_so(server):
    with Client(server.target) as c:
        session = c.create_session()
        out = session.append([{"role": "user", "content": "half \ud800 a pair"}])
        assert out["notes"] == ["1 lone surrogate replaced with U+FFFD: messages[0].content (1)"]
        prompt = session.prompt(append=[
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": ESCAPED}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "written"}])
        assert prompt.appended["notes"] == [NOTE] and NOTE in prompt.report["notes"]
        assert prompt.messages[0]["content"] == "half \ufffd a pair"
        assert json.loads(prompt.messages[1]["tool_calls"][0]["function"]["arguments"]) == {
            "path": "a\ufffd.txt", "text": "\ufffd"}
        assert session.append([{"role": "user", "content": "fine"}])["notes"] == []
    assert repairs_counted(server) is None  # the server received none: the client repaired them
