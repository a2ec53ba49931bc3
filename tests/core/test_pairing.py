"""Pairing across builds: a build walks only the items its previous prompt did not end with
(``Context.paired``), and gives the prompt a walk of every item gives, with every tool result after
its call and every call answered, for appends that orphan, repeat, leave out or separate results."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budgeter.core import Engine, Policy
from budgeter.core.messages import Message, from_openai
from budgeter.core.pipeline import View


class WalksEverything(Engine):
    """The engine with the shortcut off: every build walks every item."""

    def _well_paired(self, view: View, paired: View | None, compacted: bool) -> bool:
        return False


@st.composite
def chunks(draw: st.DrawFn) -> list[list[dict[str, Any]]]:
    """Appends, each a few messages: turns whose results come whole, late, twice, never, under
    another id or after a user message."""
    out: list[list[dict[str, Any]]] = [[{"role": "system", "content": "rules"}, {"role": "user", "content": "go"}]]
    for n in range(draw(st.integers(1, 12))):
        ids = [f"c{n}_{k}" for k in range(draw(st.integers(0, 2)))]
        turn: list[dict[str, Any]] = [{"role": "assistant", "content": draw(st.sampled_from(["", "ok"])),
                                       **({"tool_calls": [{"id": i, "type": "function", "function": {
                                           "name": "read_file", "arguments": '{"path": "a.py"}'}} for i in ids]}
                                          if ids else {})}]
        for i in ids:
            how = draw(st.sampled_from(["whole", "whole", "whole", "twice", "never", "other", "late"]))
            result = {"role": "tool", "tool_call_id": i if how != "other" else "nope", "content": f"out {i}"}
            if how == "never":
                continue
            if how == "late":
                turn.append({"role": "user", "content": "meanwhile"})
            turn.append(result)
            if how == "twice":
                turn.append(dict(result))
        cut = draw(st.integers(0, len(turn)))  # the same turn split over two appends, or not
        out += [part for part in (turn[:cut], turn[cut:]) if part]
        if draw(st.booleans()):
            out.append([{"role": "user", "content": f"next {n}"}])
    return out


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


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunks())
def test_each_build_pairs_as_a_walk_of_every_item_does(qwen36: Any, appends: list[list[dict[str, Any]]]) -> None:
    policy = Policy(window=200_000, reserve=0)
    short, full = Engine(qwen36, policy=policy), WalksEverything(qwen36, policy=policy)
    index = 0
    for part in appends:
        messages = [from_openai(m, index=index + i) for i, m in enumerate(part)]
        index += len(part)
        short.append(messages)
        full.append(messages)
        a, b = short.build(), full.build()
        assert a.messages == b.messages and a.tokens == b.tokens
        assert well_paired(a.messages)


def _turn(n: int) -> list[Message]:
    call = {"id": f"c{n}", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
    return [from_openai({"role": "assistant", "content": "", "tool_calls": [call]}, index=0),
            from_openai({"role": "tool", "tool_call_id": f"c{n}", "content": f"out {n}"}, index=1)]


def test_a_well_paired_prompt_is_not_walked_again_and_one_with_a_stand_in_is(qwen36: Any) -> None:
    session = Engine(qwen36, policy=Policy(window=200_000, reserve=0))
    session.append([from_openai({"role": "user", "content": "go"}, index=0), *_turn(0)])
    session.build()
    assert session._paired == 3  # the next build walks only what comes after these
    session.append(_turn(1)[:1])  # a call whose result is not in yet: stood in
    r = session.build()
    assert r.messages[-1].tool_call_id == "c1" and session._paired == 0
    session.append(_turn(1)[1:])
    assert well_paired(session.build().messages) and session._paired == 5


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
