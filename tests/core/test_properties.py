"""Invariants over generated sessions (tool calls, failures, cut arguments, CJK, emoji)."""

import json

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from budgeter.core import Policy, trim
from budgeter.core.messages import from_openai_list, to_openai
from tests.bench.bench_service import fresh_count

TEXT = st.lists(st.sampled_from(list("abc xyz{}\"\\:\n上下文🎉<>/=") + ["def ", "error"]),
                max_size=120).map("".join)
BIG = st.integers(0, 6000).map(lambda n: ("<!DOCTYPE html><p>" + "页 ok " * n)[: max(n, 1)])


@st.composite
def sessions(draw):
    msgs = [{"role": "system", "content": "agent rules"}, {"role": "user", "content": draw(TEXT) or "task"}]
    for n in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["read", "write", "fail", "cut", "user", "invalid"]))
        if kind == "user":
            msgs.append({"role": "user", "content": draw(TEXT)})
            continue
        args = {"path": draw(st.sampled_from(["a.py", "b.html", ""])), "content": draw(BIG)}
        text = json.dumps(args, ensure_ascii=False)
        if kind == "cut":
            text = text[: draw(st.integers(1, len(text) - 1))]
        if kind == "invalid":
            text = "path=" + draw(TEXT)
        name = "read_file" if kind == "read" else "write_file"
        result = "error: bad" if kind in ("fail", "cut", "invalid") else draw(BIG)
        repeat = draw(st.integers(1, 3)) if kind == "fail" else 1
        for r in range(repeat):
            cid = f"c{n}_{r}"
            msgs.append({"role": "assistant", "content": "", "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": text}}]})
            msgs.append({"role": "tool", "tool_call_id": cid, "content": result})
    return msgs


def _check(counter, raw, window):
    policy = Policy(window=window, reserve=0, protect_tail_turns=1)
    messages = from_openai_list(raw)
    result = trim(messages, counter=counter, policy=policy)
    out = result.messages
    # fits, by a fresh exact count of the returned prompt
    fresh = fresh_count(counter, out, [])
    assert result.tokens == fresh <= policy.budget
    # every result follows its call, every call has its result
    open_ids: list[str] = []
    for m in out:
        if m.role == "tool":
            assert m.tool_call_id in open_ids
            open_ids.remove(m.tool_call_id)
        else:
            assert not open_ids
            open_ids = [c.id for c in m.tool_calls]
    assert not open_ids
    # every argument string parses as a JSON object
    for m in out:
        for c in m.tool_calls:
            assert isinstance(json.loads(c.arguments), dict)
    # pinned kept verbatim, order preserved for untouched messages
    assert out[0] == messages[0]
    assert messages[1] in out
    j = 0
    for m in out:  # untouched messages appear as a subsequence of the input
        if m in messages:
            assert m in messages[j:], "relative order changed"
            j = messages.index(m, j) + 1
    # deterministic, and trimming the output again changes nothing, unless the first trim folded
    # calls away: the model's behaviour read from them (a retried run, a success between two
    # calls) left with them, so the second reading may take less as evidence; it still never grows
    again = trim(out, counter=counter, policy=policy)
    folded = any(a.what == "failed_retries_folded" for step in result.steps for a in step.actions)
    if not folded:
        assert again.messages == out
    else:
        assert again.tokens <= result.tokens and again.tokens == fresh_count(counter, again.messages, [])
    assert trim(messages, counter=counter, policy=policy).messages == out
    assert [to_openai(m) for m in out] == result.openai_messages()


def _call(cid: str, name: str, arguments: str, result: str) -> list[dict]:
    return [{"role": "assistant", "content": "", "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": cid, "content": result}]


_READ = '{"path": "a.py", "content": "<"}'
_WRITE = json.dumps({"path": "a.py", "content": ("<!DOCTYPE html><p>" + "页 ok " * 40)[:127]}, ensure_ascii=False)
_RETRIED = [{"role": "system", "content": "agent rules"}, {"role": "user", "content": "task"},
            {"role": "user", "content": ""}, *_call("c1_0", "read_file", _READ, "<"),
            *_call("c2_0", "read_file", _READ, "<"), *_call("c3_0", "write_file", _WRITE, "error: bad"),
            *_call("c3_1", "write_file", _WRITE, "error: bad"), *_call("c4_0", "read_file", _READ, "<")]
"""Found by hypothesis: a failed write retried once with a payload just over the stub's limit. Its
stub was judged with the run's count ("x2"), a few characters too long, so the call stayed as it
was; trimmed again, without the folded attempt, the same stub was short enough."""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions(), st.integers(1500, 6000))
@example(_RETRIED, 1500)
def test_invariants_builtin_tokenizer(qwen36, raw, window):
    _check(qwen36, raw, window)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=sessions(), window=st.integers(1500, 6000))
def test_invariants_tiny_bpe(tiny_bpe_path, raw, window):
    from budgeter.tokenizers import resolve

    _check(resolve(tiny_bpe_path, chat_format="chatml"), raw, window)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=sessions(), window=st.integers(1500, 6000))
def test_invariants_mistral(raw, window):
    """Mistral's request rules (roles, tool-call ids) hold for whatever the engine returns."""
    from budgeter.tokenizers import resolve

    _check(resolve("mistral-tekken"), raw, window)
