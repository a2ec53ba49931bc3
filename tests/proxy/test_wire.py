"""The session layer hands a prompt's unchanged messages to the proxy as the same dicts turn after
turn (``Sessions.sent``): converted once."""

from __future__ import annotations

import pytest

from budgeter.core.messages import Message, ToolCall, to_openai
from budgeter.proxy.server import open_sessions
from tests.proxy.conftest import proxy_settings

pytestmark = pytest.mark.shared


def test_sessions_hand_over_the_same_dicts_for_the_same_messages(qwen3_path):
    """What ``Sessions.sent`` gives for a message sent as it is: equal to ``to_openai`` of it, and
    the same object on the next turn (converted once)."""
    sessions = open_sessions(proxy_settings("http://127.0.0.1:9", qwen3_path))
    messages = [Message("system", "be terse"), Message("user", "list the files"),
                Message("assistant", "", (ToolCall("c1", "ls", '{"path": "."}'),)),
                Message("tool", "a.txt", tool_call_id="c1")]
    first, tools, adapted = sessions.sent("qwen3", messages[:3], [])
    second, _, _ = sessions.sent("qwen3", messages, [])
    assert (tools, adapted) == ([], ())
    assert second == [to_openai(m) for m in messages]
    assert all(a is b for a, b in zip(first, second[:3], strict=True))
