"""Pairing: every tool result directly after its call, every call answered, for results that
come orphaned (``steps/validity.py``)."""

from __future__ import annotations

from typing import Any

from budgeter.core import Engine, Policy
from budgeter.core.messages import Message, from_openai


def well_paired(messages: tuple[Message, ...]) -> bool:
    open_ids: list[str] = []
    for m in messages:
        if m.role == "tool":
            if m.tool_call_id not in open_ids:
                return False
            open_ids.remove(m.tool_call_id)
        elif open_ids:
            return False
        else:
            open_ids = [c.id for c in m.tool_calls]
    return not open_ids



def test_an_orphan_result_comes_after_the_open_calls_results(qwen36: Any) -> None:
    """A result no open call made becomes a user message: the open call is answered (stood in)
    before it, never after it, so that nothing comes between a call and its result."""
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
    raw = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "", "tool_calls": [call]},
           {"role": "tool", "tool_call_id": "nope", "content": "stray"}]
    session = Engine(qwen36, policy=Policy(window=200_000, reserve=0))
    session.append([from_openai(m, index=i) for i, m in enumerate(raw)])
    out = session.build().messages
    assert [m.role for m in out] == ["user", "assistant", "tool", "user"] and well_paired(out)
    assert out[2].tool_call_id == "c1" and "stray" in out[3].content
