"""The fallback adapter's rewrite, made incrementally across a conversation's builds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from budgeter.core.fallback import Capabilities, adapter

TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]


def _message(role: str, k: int) -> dict:
    if role == "assistant" and k % 2:
        return {"role": "assistant", "content": f"a{k}", "tool_calls": [
            {"id": f"c{k}", "type": "function", "function": {"name": "read", "arguments": {"p": k}}}]}
    if role == "tool":
        return {"role": "tool", "tool_call_id": f"c{k}", "content": f"out{k}"}
    return {"role": role, "content": f"{role}{k}"}


_ROLES = st.sampled_from(["system", "user", "assistant", "tool"])
_CAPS = st.builds(Capabilities, st.booleans(), st.booleans(), st.booleans(), st.booleans())


@settings(max_examples=300, deadline=None)
@given(_CAPS, st.lists(st.tuples(st.lists(_ROLES, max_size=5), st.integers(0, 30), st.booleans()),
                       min_size=1, max_size=8), st.booleans())
def test_each_build_is_rewritten_as_a_fresh_adapter_would(caps, steps, with_tools):
    """Builds extend the conversation, cut it back or replace a message in it (a compaction): the
    output must equal what an adapter that never saw the earlier builds makes."""
    adapt = adapter(caps)
    if adapt is None:
        return
    conversation: list[dict] = []
    k = 0
    for roles, at, replace in steps:
        if replace and conversation:
            k += 1
            i = at % len(conversation)
            conversation = [*conversation[:i], _message(conversation[i]["role"], k), *conversation[i + 1:]]
        elif at < 5:
            conversation = conversation[:max(0, len(conversation) - at)]
        for role in roles:
            k += 1
            conversation = [*conversation, _message(role, k)]
        tools = TOOLS if with_tools else []
        got, got_tools = adapt(conversation, tools)
        fresh = adapter(caps)
        assert fresh is not None
        want, want_tools = fresh(list(conversation), tools)
        assert got == want and list(got_tools) == list(want_tools)
