"""A failed call is known by evidence, strongest first, and the prompt names it; a success is never
shown as a failed call."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgeter.core import Engine, Policy
from budgeter.core.classify import CallKind, Evidence, text_failed
from budgeter.core.engine import trim
from budgeter.core.facts import History
from budgeter.core.messages import from_openai, from_openai_list

PAGE = "<!DOCTYPE html><html><body>" + "<section><p>Fresh bread every morning.</p></section>\n" * 130 + "</body></html>"
WRITE_TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}}]


def call(cid, name, args):
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def result(cid, content, **kw):
    return {"role": "tool", "tool_call_id": cid, "content": content, **kw}


def evidence(raw, tools=()):
    log = History(Policy(), tools)
    log.extend(from_openai_list(raw))
    return {log.call(ref).id: e for ref, e in log.failed_by.items()}, log


def mission(opening="write_file: path must not be empty; nothing was written"):
    """The mission's case: three identical writes of 7K chars with an empty path, each answered by
    a message that starts with the tool's name, then the model's answer."""
    raw = [{"role": "system", "content": "You write files."}, {"role": "user", "content": "Build the page."}]
    for k in range(3):
        raw += [call(f"w{k}", "write_file", {"path": "", "content": PAGE}), result(f"w{k}", opening)]
    return [*raw, {"role": "assistant", "content": "I could not write the page."},
            {"role": "user", "content": "Try once more."}]


@pytest.mark.parametrize("declared", [{"status": "error"}, {"is_error": True}, {"isError": True}])
def test_a_declared_failure_is_failed_whatever_its_text(declared):
    found, _ = evidence([call("a", "lookup", {"q": "x"}), result("a", "Here you go: 42", **declared)])
    assert found == {"a": Evidence.DECLARED}


def test_an_mcp_call_tool_result_declares_its_outcome_as_content_or_as_its_text():
    mcp = {"content": [{"type": "text", "text": "Access denied"}], "isError": True}
    as_object = from_openai(result("a", mcp))
    assert (as_object.status, as_object.content) == ("error", "Access denied")
    found, _ = evidence([call("a", "lookup", {"q": "x"}), result("a", json.dumps(mcp))])
    assert found == {"a": Evidence.DECLARED}
    ok = {"content": [{"type": "text", "text": "Error: the word in a document"}], "isError": False}
    assert evidence([call("b", "run", {"command": "cat doc.md"}), result("b", json.dumps(ok))])[0] == {}


def test_declared_ok_wins_over_the_text_and_the_verdict():
    raw = [call("a", "write_file", {"path": "", "content": PAGE}), result("a", "Error: nothing", status="ok")]
    assert evidence(raw)[0] == {}


def test_budgeters_verdict_fails_a_call_when_its_result_arrives_whatever_the_result_says():
    raw = [call("a", "write_file", {"path": "", "content": PAGE}), result("a", "Done.")]
    assert evidence(raw)[0] == {"a": Evidence.VERDICT}
    schema = [{"type": "function", "function": {"name": "read_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["path"]}}}]
    coerced = [call("b", "read_file", {"path": "a.py", "limit": "5"}), result("b", "x = 1")]
    assert evidence(coerced, schema)[0] == {}  # a runtime coerces "5": no verdict against it


def test_the_same_payload_written_again_fails_the_earlier_write():
    raw = [call("a", "write_file", {"path": "", "content": PAGE}), result("a", "OK"),
           call("b", "write_file", {"path": "index.html", "content": PAGE}), result("b", "OK")]
    found, log = evidence(raw)
    assert found["a"] is Evidence.VERDICT and "b" not in found
    moved = [call("a", "save", {"target": "x/index.html", "content": PAGE}), result("a", "not saved: x/ is read-only"),
             call("b", "save", {"target": "site/index.html", "content": PAGE}), result("b", "saved")]
    assert evidence(moved)[0] == {"a": Evidence.RETRIED}
    copied = [call("a", "save", {"target": "a/index.html", "content": PAGE}), result("a", "saved"),
              call("b", "save", {"target": "b/index.html", "content": PAGE}), result("b", "saved")]
    assert evidence(copied)[0] == {}  # the same page saved in two places: a copy, not a retry


def test_a_read_or_command_run_again_is_superseded_never_failed():
    raw = [call("a", "run", {"command": "ls"}), result("a", "a.py\nb.py"),
           call("b", "run", {"command": "ls"}), result("b", "a.py\nb.py"), {"role": "assistant", "content": "ok"}]
    found, log = evidence(raw)
    assert found == {} and list(log.repeated) == [(0, 0)]
    r = trim(from_openai_list(raw), counter=_counter())
    assert all("budgeter:failed" not in m.content for m in r.messages)


def test_grep_hits_on_error_run_twice_are_repeated_not_failed():
    hits = 'src/api.ts:27:    console.error("request failed", error)\nsrc/main.tsx:9:  console.error(err)'
    raw = [call("a", "Bash", {"command": "grep -rn error src"}), result("a", hits),
           call("b", "Bash", {"command": "grep -rn error src"}), result("b", hits)]
    found, log = evidence(raw)
    assert found == {} and list(log.repeated) == [(0, 0)]


def test_the_same_error_for_reworked_arguments_fails_each_attempt():
    text = "The query could not be parsed near 'SELEC'"
    raw = [call("a", "sql", {"q": "SELEC 1"}), result("a", text),
           call("b", "sql", {"q": "SELEC 1;"}), result("b", text)]
    found, _ = evidence(raw)
    assert found == {"a": Evidence.SAME_ERROR, "b": Evidence.SAME_ERROR}
    same_ok = [call("a", "sql", {"q": "1"}), result("a", "1 row"), call("b", "sql", {"q": "2"}), result("b", "1 row")]
    assert evidence(same_ok)[0] == {}  # the same answer without a sign of an error is not one


@pytest.mark.parametrize("text,kind,failed", [
    ("write_file: path must not be empty", CallKind.MUTATE, True),
    ("<error>The tool execution failed</error>", CallKind.OTHER, True),
    ("ls: cannot access 'x': No such file or directory", CallKind.COMMAND, True),
    ("collected 3 items\n\n2 failed, 1 passed in 0.1s", CallKind.COMMAND, True),
    ("2025-03-11 09:12:44 ERROR [worker] job 4411 failed\n2025-03-11 09:12:49 INFO job 4411 done",
     CallKind.COMMAND, False),
    ("Error handling in Rust\n\nRust groups errors into two major categories.\n" * 20, CallKind.COMMAND, False),
    ("Error: the sky is falling (a line of a file)", CallKind.READ, False),
    ("Switched to branch 'fix/error-handling'", CallKind.COMMAND, False),
    ('{"data": {"id": 1}, "error": null}', CallKind.OTHER, False),
    ("=== 12 passed, 0 failed in 0.31s ===", CallKind.COMMAND, False),
    ("0 failed, 12 passed in 0.3s", CallKind.COMMAND, False),
    ("done\nexit code: " + "9" * 6000, CallKind.COMMAND, False),  # no number Python cannot read
    ('{"status": "' + "5" * 6000 + '"}', CallKind.OTHER, False),
    ("No errors found.", CallKind.OTHER, False),
    ("Build failed: 2 errors", CallKind.COMMAND, True),
    ("Tool 'run_tests' timed out after 30 seconds.", CallKind.COMMAND, True),
    ("1 validation error:\n  city: Field required\n\nFix the errors and try again.", CallKind.OTHER, True),
])
def test_the_text_is_read_by_how_a_failure_is_reported(text, kind, failed):
    assert text_failed(text, kind=kind, target="notes.txt") is failed


def test_a_failure_known_by_its_text_alone_is_never_shown_as_failed():
    raw = [call("a", "write_file", {"path": "p.html", "content": PAGE}),
           result("a", "write_file: disk quota exceeded"), {"role": "assistant", "content": "Hm."}]
    found, _ = evidence(raw)
    assert found == {"a": Evidence.TEXT}
    r = trim(from_openai_list(raw), counter=_counter())
    assert all("budgeter:failed" not in m.content for m in r.messages)
    assert r.messages[-2].content == "write_file: disk quota exceeded"
    elided = json.loads(r.messages[-3].tool_calls[0].arguments)["content"]
    assert "budgeter:elided" in elided and PAGE in r.payloads.values()  # the payload left, by its handle
    assert any(a.what == "failed_call_collapsed" and "why=text" in a.detail for s in r.steps for a in s.actions)


def test_the_missions_case_leaves_one_short_stub_naming_its_evidence():
    s = Engine(_counter(), tools=WRITE_TOOLS)
    s.append(from_openai_list(mission()))
    r = s.build()
    stubs = [m.content for m in r.messages if "budgeter:failed" in m.content]
    assert len(stubs) == 1 and "x3" in stubs[0] and "why=verdict" in stubs[0] and len(stubs[0]) < 400
    assert sum(len(c.arguments) for m in r.messages for c in m.tool_calls) < 400
    assert PAGE in r.payloads.values()  # lossless: the payload comes back by its handle


def _counter():
    from budgeter.tokenizers import resolve

    return resolve("qwen3.6")


class LooksThroughAll(History):
    """The resolution as specified: a success looks through every failure of its tool not yet
    resolved, in the order the failures were recorded (what ``History`` does through its index)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.all_failed: list = []

    def _unresolve(self, ref, name, value):
        self.all_failed.append(ref)

    def _resolve(self, ref, ok):
        for failed in self.all_failed:
            cf = self.call(failed)
            given = {k: v for k, v in cf.value.items() if v not in ("", None, [], {})}
            if (cf.name == ok.name and failed[0] < ref[0] and failed not in self.resolved_by and given
                    and all(ok.value.get(k) == v for k, v in given.items())):
                self.resolved_by[failed] = ref[0]
                self.changed_failures.append(failed)


_VALUES = st.one_of(st.sampled_from(["a.py", "x" * 300, "y" * 300]),
                    st.sampled_from(["", "b.py", 1, 1.0, True, None, [], [1], {}, {"k": "a.py"}]))


@st.composite
def _calls_and_results(draw):
    raw, n = [], draw(st.integers(1, 40))
    for k in range(n):
        args = draw(st.dictionaries(st.sampled_from(["path", "content", "n"]), _VALUES, max_size=3))
        raw.append(call(f"c{k}", draw(st.sampled_from(["write_file", "edit", "run"])), args))
        raw.append(result(f"c{k}", draw(st.sampled_from(["done", "Error: no such file", "ok"])),
                          **draw(st.sampled_from([{}, {"status": "error"}, {"status": "ok"}]))))
        if draw(st.booleans()):
            raw.append({"role": "assistant", "content": "next"})
    return raw


@settings(max_examples=300, deadline=None)
@given(_calls_and_results())
def test_a_success_resolves_the_failures_that_looking_through_them_all_resolves(raw):
    messages = from_openai_list(raw)
    indexed, spec = History(Policy(), WRITE_TOOLS), LooksThroughAll(Policy(), WRITE_TOOLS)
    indexed.extend(messages)
    spec.extend(messages)
    assert indexed.failed_by == spec.failed_by
    assert indexed.resolved_by == spec.resolved_by
    assert indexed.changed_failures == spec.changed_failures


def test_a_preview_records_nothing_of_the_failures_it_finds():
    """``Sessions`` previews a batch before the store takes it; a refused append must leave the
    history as it was, so a later identical call is no repeat of a failure never recorded."""
    log = History(Policy(), WRITE_TOOLS)
    log.extend(from_openai_list([call("a", "write_file", {"path": "a.py", "content": "x"}), result("a", "ok")]))
    cut = {"role": "assistant", "content": "", "tool_calls": [{"id": "b", "type": "function", "function": {
        "name": "write_file", "arguments": '{"path": "b.py", "content": "unfinished'}}]}
    batch = from_openai_list([cut, result("b", "Error: no such file"), call("c", "write_file", {"path": "c.py"}),
                              result("c", "Error: permission denied"), call("d", "write_file", {"path": "c.py"})])
    before = dict(log.first_error)
    facts = log.preview(batch)
    assert facts[4].calls[0].verdict.repeat_of is not None  # within the batch, the earlier failure counts
    assert log.first_error == before
    assert log.facts_for(batch[4]).calls[0].verdict.repeat_of is None
