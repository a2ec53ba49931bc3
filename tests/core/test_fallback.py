"""The fallback adapter's rewrite, made incrementally across a conversation's builds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgeter.core import Policy, trim
from budgeter.core.counting import SentMemo, sent
from budgeter.core.fallback import Capabilities, adapter
from budgeter.core.messages import from_openai, from_openai_list
from budgeter.tokenizers.registry import resolve

TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]


def _message(role: str, k: int) -> dict:
    if role == "assistant" and k % 2:
        return {"role": "assistant", "content": f"a{k}", "tool_calls": [
            {"id": f"c{k}", "type": "function", "function": {"name": "read", "arguments": {"p": k}}}]}
    if role == "tool":
        return {"role": "tool", "tool_call_id": f"c{k}", "content": f"out{k}"}
    return {"role": role, "content": f"{role}{k}"}


_ROLES = st.sampled_from(["system", "user", "assistant", "tool"])
_CAPS = st.builds(Capabilities, st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.booleans(),
                  st.booleans())


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


@settings(max_examples=200, deadline=None)
@given(_CAPS, st.integers(18, 40), st.lists(st.tuples(st.integers(0, 6), st.lists(_ROLES, max_size=3)),
                                            min_size=1, max_size=8))
def test_builds_that_replace_the_last_messages_are_rewritten_as_a_fresh_adapter_would(caps, start, steps):
    """A build may replace the previous one's last messages (a failed call and its result,
    collapsed once answered) and add more: the walk it meets then shares all but those (``Walks``
    finds it by an earlier item), and the output must still equal a fresh adapter's."""
    adapt = adapter(caps)
    if adapt is None:
        return
    roles = ["system", "user", "assistant", "tool", "assistant", "user"]
    conversation = [_message(roles[k % len(roles)], k) for k in range(start)]
    adapt(conversation, TOOLS)
    k = start
    for replaced, added in steps:
        kept = conversation[:max(0, len(conversation) - replaced)]
        fresh_tail = [_message(m["role"], k + j + 1000) for j, m in enumerate(conversation[len(kept):])]
        k += len(fresh_tail) + len(added)
        conversation = [*kept, *fresh_tail, *(_message(role, k + j) for j, role in enumerate(added))]
        got, got_tools = adapt(conversation, TOOLS)
        fresh = adapter(caps)
        assert fresh is not None
        want, want_tools = fresh(list(conversation), TOOLS)
        assert got == want and list(got_tools) == list(want_tools)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(_ROLES, max_size=5), st.integers(0, 30), st.booleans()), min_size=1, max_size=8),
       st.booleans())
def test_a_session_s_memo_sends_what_a_call_without_it_sends(steps, with_tools):
    """``sent`` with a session's memo (the previous call's lists, taken where the messages are
    the same objects) gives what a call without one gives, build after build: the conversation
    extended, cut back, a message replaced (Gemma 3's template: alternation, no tool roles)."""
    counter = resolve("qwen2.5", chat_format="gemma3")
    memo = SentMemo()
    conversation: list = []
    k = 0
    for roles, at, replace in steps:
        if replace and conversation:
            k += 1
            i = at % len(conversation)
            conversation = [*conversation[:i], from_openai(_message(conversation[i].role, k), index=i),
                            *conversation[i + 1:]]
        elif at < 5:
            conversation = conversation[:max(0, len(conversation) - at)]
        for role in roles:
            k += 1
            conversation = [*conversation, from_openai(_message(role, k), index=len(conversation))]
        tools = TOOLS if with_tools else []
        assert sent(counter, conversation, tools, memo=memo) == sent(counter, conversation, tools)


def test_results_in_a_row_stay_apart_where_the_template_renders_them_so():
    """Where roles must alternate, consecutive messages are merged, but two tool results are kept
    apart where the template renders them one after the other (Mistral's templates skip calls and
    results when they check the alternation): each answers its own call, by its id."""
    calls = {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{k}", "type": "function", "function": {"name": "read", "arguments": {}}} for k in (1, 2)]}
    conversation = [{"role": "user", "content": "u"}, calls, _message("tool", 1), _message("tool", 2),
                    {"role": "user", "content": "v"}, {"role": "user", "content": "w"}]
    for tool_runs, results in ((True, 2), (False, 1)):
        adapt = adapter(Capabilities(True, True, True, False, True, tool_runs=tool_runs))
        assert adapt is not None
        got, _ = adapt(conversation, [])
        assert [m["role"] for m in got].count("tool") == results
        assert got[-1]["content"] == "v\n\nw"  # the users' turns are merged either way


SYSTEM_LATER = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "ok"}, {"role": "system", "content": "From now on, answer in French."},
                {"role": "user", "content": "again"}]


@pytest.mark.parametrize("spec,chat_format", [("qwen3.6", None), ("qwen2.5", None), ("mistral-tekken", None),
                                              ("qwen2.5", "gemma3"), ("qwen2.5", "qwen3.6")])
def test_a_system_message_after_the_first_turn_never_makes_a_session_unbuildable(spec, chat_format):
    """History is append-only: a system message an agent appends mid-session (accepted by every
    front door) must be rendered, not refused on every later build. Where the template takes
    system text only at the start it is counted as a user message holding the same text, and
    the profile's notes say so."""
    counter = resolve(spec, chat_format=chat_format)
    messages = from_openai_list(SYSTEM_LATER)
    rendered = counter.render(messages, ())
    assert "answer in French" in rendered and "again" in rendered
    result = trim(messages, counter=counter, policy=Policy(window=4000, reserve=100))
    assert [m.content for m in result.messages][-2:] == ["From now on, answer in French.", "again"]
    wire = sent(counter, messages, ())
    if "system" not in rendered.split("answer in French")[0][-40:]:  # counted as a user message
        assert wire is not None, "what is sent must be what was counted"
        assert [d["role"] for d in wire[0] if "French" in str(d.get("content"))] == ["user"]
        assert any("system message" in note for note in counter.notes)
    else:
        assert wire is None
