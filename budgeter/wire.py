"""Message conversion between the domain and the wire (protobuf), and the ErrorInfo of a failed
call: what both the client and the server need. It imports no server module, so the client
stays a client (a test checks what ``import budgeter.client`` loads)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from budgeter.core.jsonargs import dumps_compact
from budgeter.core.memo import CharMemo
from budgeter.core.messages import Message, Repair, from_openai, to_openai
from budgeter.v1 import budgeter_pb2 as pb

ROLE_TO_STR = {pb.ROLE_SYSTEM: "system", pb.ROLE_USER: "user", pb.ROLE_ASSISTANT: "assistant",
               pb.ROLE_TOOL: "tool", pb.ROLE_DEVELOPER: "developer"}
STR_TO_ROLE = {v: k for k, v in ROLE_TO_STR.items()}
STATUS_TO_STR = {pb.RESULT_STATUS_OK: "ok", pb.RESULT_STATUS_ERROR: "error"}
STR_TO_STATUS = {v: k for k, v in STATUS_TO_STR.items()}
def message_from_pb(m: pb.Message, index: int, repairs: list[Repair] | None = None) -> Message:
    raw: dict[str, Any] = {"role": ROLE_TO_STR.get(m.role, ""), "content": m.content}
    if m.tool_calls:
        raw["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.name, "arguments": c.arguments}}
                             for c in m.tool_calls]
    for key, value in (("tool_call_id", m.tool_call_id), ("name", m.name),
                       ("reasoning_content", m.reasoning_content),
                       ("finish_reason", m.finish_reason), ("status", STATUS_TO_STR.get(m.status))):
        if value:
            raw[key] = value
    if m.role == pb.ROLE_TOOL and "tool_call_id" not in raw:
        raw["tool_call_id"] = None
    return from_openai(raw, index=index, repairs=repairs)


def messages_from_pb(messages: Sequence[pb.Message], *, repairs: list[Repair] | None = None) -> list[Message]:
    """``repairs``: gets what was repaired on the way in (``core.messages.Repair``)."""
    return [message_from_pb(m, i, repairs) for i, m in enumerate(messages)]


_pb: CharMemo[Message, pb.Message] = CharMemo()
_json: CharMemo[Message, str] = CharMemo()


def message_to_pb(m: Message) -> pb.Message:
    """Memoized (``core/memo.py``): for the messages a server sends again and again (a prompt's)."""
    out = _pb.get(m)
    return out if out is not None else _pb.put(m, new_message_to_pb(m), m.size)


def message_json(m: Message) -> str:
    """``m`` as OpenAI JSON, memoized as ``message_to_pb``."""
    out = _json.get(m)
    return out if out is not None else _json.put(m, dumps_compact(to_openai(m)), m.size)


def new_message_to_pb(m: Message) -> pb.Message:
    """Not kept: for the messages a client sends, each once (the memo would only hold them)."""
    return pb.Message(
        role=STR_TO_ROLE[m.role], content=m.content, tool_call_id=m.tool_call_id or "",
        name=m.name or "", reasoning_content=m.reasoning or "", finish_reason=m.finish_reason or "",
        status=STR_TO_STATUS.get(m.status or "", pb.RESULT_STATUS_UNSPECIFIED),
        tool_calls=[pb.ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in m.tool_calls])


def error_info(err: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    """The ErrorInfo of a failed call (for clients and tests)."""
    status = rpc_status.from_call(err)
    for detail in status.details if status else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    return None
