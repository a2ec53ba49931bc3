"""Window hygiene: failed payloads leave the prompt once the model has answered them, on every
build, while the session fits; one verdict; stubs never longer than what they replace."""

import json

import pytest
from hypothesis import HealthCheck, given, settings

from budgeter.core import Engine, Policy, trim
from budgeter.core.jsonargs import classify_arguments, stand_in
from budgeter.core.markers import handles_in
from budgeter.core.messages import from_openai, from_openai_list
from tests.bench.sessions import TOOLS
from tests.core.test_properties import sessions

PAGE = "<!DOCTYPE html><html><head><title>Shop</title></head><body>" + "<p>offer</p>" * 680 + "</body></html>"


def call(cid, name, args, **kw):
    text = args if isinstance(args, str) else json.dumps(args)
    return {"role": "assistant", "content": "", **kw,
            "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": text}}]}


def result(cid, content):
    return {"role": "tool", "tool_call_id": cid, "content": content}


def replay(counter, raw, policy, tools=TOOLS):
    """Append turn by turn (a turn: one message, or an assistant message with its results) and
    build before every assistant turn; returns the session and every result."""
    session = Engine(counter, policy=policy, tools=tools)
    msgs = from_openai_list(raw)
    out, i = [], 0
    while i < len(msgs):
        j = i + 1
        while j < len(msgs) and msgs[j].role == "tool":
            j += 1
        session.append(msgs[i:j])
        out.append(session.build())
        i = j
    return session, out


def failed_arg_chars(messages):
    return sum(len(c.arguments) for m in messages for c in m.tool_calls
               if PAGE[:40] in c.arguments and c.id != "ok")


def five_failures():
    raw = [{"role": "system", "content": "agent"}, {"role": "user", "content": "make a shop page"}]
    for k in range(5):
        raw += [call(f"w{k}", "write_file", {"path": "", "content": PAGE if k < 2 else PAGE[:-40]}),
                result(f"w{k}", "Error: path is required")]
        raw.append({"role": "assistant", "content": f"attempt {k} failed; I will retry."})
    raw += [call("ok", "write_file", {"path": "shop.html", "content": PAGE[:-40]}), result("ok", "wrote shop.html"),
            {"role": "assistant", "content": "Done."}]
    return raw


def test_failed_payloads_leave_while_the_session_fits(qwen36):
    raw = five_failures()
    session, results = replay(qwen36, raw, Policy())
    assert not any(r.compacted for r in results)  # the whole session fits the window
    for r in results[3:]:
        assert failed_arg_chars(r.messages[:-2]) == 0  # only the newest, unanswered one may stay
    last = results[-1]
    stubs = [m.content for m in last.messages if m.role == "tool" and "budgeter:failed" in m.content]
    assert len(stubs) == 2  # two runs of identical retries (the payload changed after the 2nd)
    assert "x2" in stubs[0] and "x3" in stubs[1]
    assert all("then done by #" in s for s in stubs[1:])  # the success with the same payload
    for h in last.handles:  # every handle in the prompt resolves to what it stands for
        assert h in session.payloads
    original = raw[2]["tool_calls"][0]["function"]["arguments"]
    assert handles_in(stubs[0])[0] == next(h for h, t in session.payloads.items() if t == original)


def test_folds_merge_across_turns_exactly_as_at_once(qwen36):
    raw = [{"role": "system", "content": "agent"}, {"role": "user", "content": "go"}]
    for k in range(4):
        raw += [call(f"c{k}", "write_file", {"path": "", "content": PAGE}), result(f"c{k}", "rejected: empty path")]
    raw.append({"role": "assistant", "content": "I give up on that file."})
    _, results = replay(qwen36, raw, Policy())
    once = trim(from_openai_list(raw), counter=qwen36, tools=TOOLS, policy=Policy())
    assert results[-1].messages == once.messages
    stubs = [m.content for m in once.messages if "budgeter:failed" in m.content]
    assert len(stubs) == 1 and "x4" in stubs[0]


TRACE = "Traceback (most recent call last):\n" + "  File \"a.py\", line 3, in f\n    g()\n" * 30 + "KeyError: 'budget'"


def test_a_retry_after_other_work_succeeded_is_not_folded(qwen36):
    raw = [{"role": "user", "content": "fix the tests"},
           call("t1", "run_command", {"command": "pytest -x"}), {**result("t1", TRACE), "status": "error"},
           call("e1", "edit_file", {"path": "a.py", "old_string": "x", "new_string": "y"}), result("e1", "edited"),
           call("t2", "run_command", {"command": "pytest -x"}), {**result("t2", TRACE), "status": "error"},
           {"role": "assistant", "content": "still failing"}]
    r = trim(from_openai_list(raw), counter=qwen36, tools=TOOLS)
    assert [m.tool_calls[0].id for m in r.messages if m.tool_calls] == ["t1", "e1", "t2"]
    stubs = [m.content for m in r.messages if "budgeter:failed" in m.content]
    assert len(stubs) == 2 and not any("x2" in s for s in stubs)
    error = raw[2]["content"]
    assert all(r.payloads[s.split("error h=")[1][:16]] == error for s in stubs)  # the error's own handle


def test_the_newest_failure_stays_verbatim_until_answered(qwen36):
    raw = [{"role": "user", "content": "go"}, call("a", "write_file", {"path": "", "content": PAGE}),
           result("a", "Error: path is required")]
    r = trim(from_openai_list(raw), counter=qwen36, tools=TOOLS)
    assert r.messages[1].tool_calls[0].arguments == raw[1]["tool_calls"][0]["function"]["arguments"]
    assert r.messages[2].content == "Error: path is required"
    policy = Policy(keep_latest_failure=False)
    r = trim(from_openai_list(raw), counter=qwen36, tools=TOOLS, policy=policy)
    assert failed_arg_chars(r.messages) == 0


@pytest.mark.parametrize(("text", "kept", "dropped"), [
    ('{"path": "a.py", "lines": 12', {"path": "a.py"}, "lines"),
    ('{"path": "a.py", "n": 3.', {"path": "a.py"}, "n"),
    ('{"path": "a.py", "n": -', {"path": "a.py"}, "n"),
    ('{"path": "a.py", "force": tr', {"path": "a.py"}, "force"),
    ('{"path": "a.py", "force": true', {"path": "a.py"}, "force"),
    ('{"path": "a.py", "x": nul', {"path": "a.py"}, "x"),
    ('{"path": "a.py", "content": "abc', {"path": "a.py"}, "content"),
    ('{"path": "a.py", "opts": {"a": 1', {"path": "a.py"}, "opts"),
    ('{"path": "a.py", "ids": [1, 2', {"path": "a.py"}, "ids"),
    ('{"path": "a.py", "lines": 12 ', {"path": "a.py"}, "lines"),
    ('{"path": "a.py", "lines": 12,', {"path": "a.py", "lines": 12}, ""),
])
def test_a_cut_value_of_any_type_is_never_kept_as_complete(text, kept, dropped):
    verdict = classify_arguments(text, finish_reason="length")
    assert verdict.status.value == "TRUNCATED"
    out, _ = stand_in(text, verdict)
    value = json.loads(out)
    note = value.pop("_budgeter")
    assert value == kept
    assert (f"'{dropped}' dropped" in note) if dropped else ("dropped" not in note)


def test_stubs_are_never_longer_than_what_they_replace(qwen36):
    raw = [{"role": "system", "content": "agent"}, {"role": "user", "content": "edit"},
           call("r1", "read_file", {"path": "a.py", "lines": 5}), result("r1", "ok: edit applied"),
           call("r2", "read_file", {"path": "a.py"}), result("r2", "x = 1\n" * 2000),
           call("f", "grep", {"pattern": "x"}), result("f", "error: no"),
           {"role": "assistant", "content": "next"},
           {"role": "user", "content": "words " * 300}]
    r = trim(from_openai_list(raw), counter=qwen36, tools=TOOLS, policy=Policy(window=3000, reserve=0, low_water=0.75))
    assert r.compacted
    by_content = [m.content for m in r.messages if m.role == "tool"]
    assert "ok: edit applied" in by_content and "error: no" in by_content


def test_every_build_reports_every_handle_in_its_prompt(qwen36):
    raw = five_failures()[:9]
    session = Engine(qwen36, policy=Policy(), tools=TOOLS)
    session.append(from_openai_list(raw))
    first = session.build()
    session.append([from_openai({"role": "user", "content": "and now the footer"})])
    second = session.build()
    for r in (first, second):
        present = {h for m in r.messages for t in [m.content, *(c.arguments for c in m.tool_calls)]
                   for h in handles_in(t)}
        assert present and set(r.handles) == present
    assert second.extends_previous and second.cache_break_tokens > 0
    assert second.reread_tokens < 40  # only the new user message and the generation prompt


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_hygiene_invariants(qwen36, raw):
    raw = [*raw, {"role": "assistant", "content": "next step"}]
    session, results = replay(qwen36, raw, Policy(window=200_000, reserve=0), tools=())
    once = trim(from_openai_list(raw), counter=qwen36, policy=Policy(window=200_000, reserve=0))
    assert not once.compacted
    last = results[-1]
    assert last.messages == once.messages  # the same folds turn by turn as at once
    for r in results:  # each build names exactly the handles its prompt holds (those it shares
        present = {h for m in r.messages  # with the previous prompt are not looked up again)
                   for t in [m.content, *(c.arguments for c in m.tool_calls)] for h in handles_in(t)}
        assert set(r.handles) == present and list(r.handles) == sorted(r.handles)
    for m in last.messages:
        for text in [m.content, *(c.arguments for c in m.tool_calls)]:
            for h in handles_in(text):
                assert h in session.payloads  # lossless: each handle resolves
    calls = {c.id: (i, c) for i in session._plan for c in i.message.tool_calls}
    for item in session._plan:  # a stub never replaces a text that is not longer than it
        original = session.history[item.index]
        if item.kind.value in ("stale", "shrunk", "repeated") and item.message.role == "tool":
            assert len(item.message.content) < len(original.content)
        if item.kind.value == "stub" and item.message.role == "tool" and \
                "earlier identical attempts folded" not in item.message.content:
            _, new_call = calls[item.message.tool_call_id]
            old_call = next(c for m in session.history for c in m.tool_calls if c.id == new_call.id)
            assert len(item.message.content) + len(new_call.arguments) < len(original.content) + len(old_call.arguments)
