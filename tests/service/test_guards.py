"""The guard-rail RPCs through a real server: ValidateToolCall, SuggestPath, PlanEdits."""

from __future__ import annotations

import grpc
import pytest

from budgeter.client import ClientError
from budgeter.core.markers import marker
from tests.core.test_edits import EDITS, FILE, expected_file
from tests.service.agent import TOOLS, call, result


def tc(cid: str, args: dict | str, name: str = "write_file") -> dict:
    return call(cid, name, args)["tool_calls"][0]


def test_validate_without_a_session(client):
    ok = client.validate_tool_call(tc("a", {"path": "a.py", "content": "x"}), tools=TOOLS)
    assert ok["status"] == "VALID" and ok["runnable"] and ok["problems"] == []
    cut = client.validate_tool_call(tc("b", '{"path": "a.py", "content": "pri'), tools=TOOLS,
                                    finish_reason="length")
    assert cut["status"] == "TRUNCATED" and not cut["runnable"]
    assert cut["arguments"] == '{"path": "a.py", "content": "pri'
    empty = client.validate_tool_call(tc("c", {"path": "", "content": "x"}), tools=TOOLS)
    assert [(p["code"], p["field"]) for p in empty["problems"]] == [("EMPTY_REQUIRED", "path")]
    copied = client.validate_tool_call(
        tc("d", {"path": "a", "content": marker("elided", "h=0123456789abcdef")}), tools=TOOLS)
    assert [(p["code"], p["field"]) for p in copied["problems"]] == [("COPIED_MARKER", "content")]
    with pytest.raises(ClientError) as e:
        client.validate_tool_call({"id": "x", "function": {"name": "", "arguments": "{}"}})
    assert (e.value.code, e.value.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_INPUT")


def test_validate_in_a_session_flags_repeats_and_records(client):
    s = client.create_session(tools=TOOLS)
    page = "<!DOCTYPE html><html><title>Shop</title>" + "x" * 7000 + "</html>"
    s.append([{"role": "user", "content": "build"}, call("w1", "write_file", {"path": "", "content": page}),
              result("w1", "Error: path must not be empty")])
    again = s.validate_tool_call(tc("w2", {"path": "", "content": page}))  # the session's tools
    assert again["repeat_of"] == 1 and again["repeat_error"] == "Error: path must not be empty"
    assert {p["code"] for p in again["problems"]} == {"EMPTY_REQUIRED", "REPEATED_FAILURE"}
    rescue = s.suggest_path(page, tool="write_file")
    assert (rescue["kind"], rescue["path"]) == ("html", "index.html")
    events = s.events()
    assert [e["kind"] for e in events] == ["tool_call_validated", "path_rescued"]
    assert events[0]["runnable"] is False and events[1]["chars"] == len(page)
    s.append([call("w3", "write_file", {"path": "index.html", "content": page}), result("w3", "ok")])
    second = s.suggest_path(page.replace("Shop", "About Us"))
    assert second["path"] == "about-us.html"


def test_plan_edits_lands_all_five(client):
    out = client.plan_edits([{"start_line": e.start_line, "end_line": e.end_line, "body": e.body}
                             for e in EDITS], snapshot=FILE)
    assert out["ok"] and out["text"] == expected_file()
    assert [e["shift"] for e in out["edits"]] == [2, -9, 1, -4, 1] and out["order"] == [4, 3, 2, 1, 0]
    bad = client.plan_edits([{"start_line": 5, "end_line": 8, "body": "a"},
                             {"start_line": 7, "end_line": 9, "body": "b"},
                             {"start_line": 20, "end_line": 20, "body": "c", "expected_old": "nope"}],
                            snapshot=FILE)
    assert [e["status"] for e in bad["edits"]] == ["OVERLAP", "OVERLAP", "MISMATCH"]
    assert not bad["ok"] and bad["text"] == FILE


def test_plan_edits_in_a_session_supersedes_the_snapshot(client):
    s = client.create_session(tools=TOOLS, window=4000, reserve=200, protect_tail_turns=1)
    numbered = "".join(f"{n:6d}\t{line}\n" for n, line in enumerate(FILE.splitlines(), 1))
    s.append([{"role": "system", "content": "agent"}, {"role": "user", "content": "edit app.py"},
              call("r1", "read_file", {"path": "app.py"}), result("r1", numbered)])
    before = s.prompt()
    assert numbered in [m["content"] for m in before.messages]
    plan = s.plan_edits([{"start_line": 10, "end_line": 12, "body": "ten\n"}], snapshot=numbered,
                        path="app.py")
    assert plan["ok"] and plan["text"].startswith("line 1\n")
    s.append([{"role": "user", "content": "now " + "more words " * 1500}])
    after = s.prompt()
    steps = {st["step"]: st for st in after.report["steps"]}
    stale = steps["supersede_snapshots"]["actions"]
    assert [(a["index"], a["action"]) for a in stale] == [(3, "snapshot_superseded")]
    assert [e["kind"] for e in s.events()] == ["snapshot_superseded"]
    with pytest.raises(ClientError) as e:
        s.plan_edits([{"start_line": 1, "end_line": 1, "body": "x"}], snapshot="a\n", path="../etc/passwd")
    assert e.value.reason == "INVALID_INPUT"
    with pytest.raises(ClientError) as e:
        s.plan_edits([{"start_line": 1, "end_line": 1, "body": "x"}], snapshot_handle="0" * 16)
    assert e.value.reason == "PAYLOAD_NOT_FOUND"
    assert s.payload(stale[0]["handle"]) == numbered  # the stale snapshot, byte for byte
    fetched = s.plan_edits([{"start_line": 1, "end_line": 1, "body": "first\n"}],
                           snapshot_handle=stale[0]["handle"])
    assert fetched["ok"] and fetched["text"] == "first\n" + FILE.split("\n", 1)[1]


def test_executor_recipe(client):
    """examples/executor.py, the recipe the README points to, run as written against a real server."""
    import runpy
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "executor.py"
    run_calls = runpy.run_path(str(example))["run_calls"]
    written: dict[str, str] = {}

    def execute(name, args):
        if args["path"] == "full.txt":
            raise OSError("disk full")
        written[args["path"]] = args["content"]
        return "ok"

    s = client.create_session(tools=TOOLS)
    s.append([{"role": "user", "content": "make a page"}])
    page = "<!DOCTYPE html><html><title>Home</title><body>hi</body></html>"
    run_calls(s, call("a", "write_file", {"path": "", "content": page}), execute)
    assert written == {"index.html": page}
    run_calls(s, call("b", "write_file", '{"path": "x.html", "content": "<p', finish_reason="length"), execute)
    run_calls(s, call("c", "write_file", {"path": "ok.txt", "content": "fine"}), execute)
    assert written == {"index.html": page, "ok.txt": "fine"}
    run_calls(s, call("d", "write_file", {"path": "full.txt", "content": "x"}), execute)
    run_calls(s, call("e", "write_file", {"path": "full.txt", "content": "x"}), execute)
    results = [m["content"] for m in s.prompt().messages if m["role"] == "tool"]
    assert results[0].startswith("path was empty; wrote index.html.")  # declared ok: never shown as failed
    assert results[1].startswith("Error: cut inside a string")
    assert results[2] == "ok" and len(results) == 4  # the identical retry folded the first failure
    assert "write_file x2 why=declared" in results[3]
    assert results[3].endswith("\nError: same as call #7: Error: disk full")


def test_append_gives_the_verdict_validate_gives(client, tmp_path):
    """One verdict: AppendMessages, ValidateToolCall and `budgeter validate` agree, in one shape."""
    import json
    import subprocess
    import sys

    s = client.create_session(tools=TOOLS)
    page = "<!DOCTYPE html><html><title>Shop</title>" + "x" * 7000 + "</html>"
    first = s.append([{"role": "user", "content": "build"}, call("w1", "write_file", {"path": "", "content": page})])
    v1 = first["messages"][1]["tool_calls"][0]
    assert not v1["runnable"] and [p["code"] for p in v1["problems"]] == ["EMPTY_REQUIRED"]
    assert v1 == s.validate_tool_call(tc("w1", {"path": "", "content": page})) | {"operation": "WRITE", "path": ""}
    s.append([result("w1", "Error: path must not be empty")])
    again = s.append([call("w2", "write_file", {"path": "", "content": page})])["messages"][0]["tool_calls"][0]
    assert not again["runnable"] and again["repeat_of"] == 1
    assert {p["code"] for p in again["problems"]} == {"EMPTY_REQUIRED", "REPEATED_FAILURE"}
    body = tmp_path / "call.json"
    body.write_text(json.dumps({"tool_call": tc("w9", {"path": "", "content": "<p>x</p>"}), "tools": TOOLS}))
    cli = subprocess.run([sys.executable, "-m", "budgeter", "validate", str(body)], capture_output=True, text=True)
    assert cli.returncode == 1
    served = client.validate_tool_call(tc("w9", {"path": "", "content": "<p>x</p>"}), tools=TOOLS)
    assert json.loads(cli.stdout) == served  # the client's JSON and the CLI's, key for key


def test_plan_edits_and_suggest_path_have_the_cli_shape(client, tmp_path):
    import json
    import subprocess
    import sys

    plain = [{"start_line": e.start_line, "end_line": e.end_line, "body": e.body} for e in EDITS]
    edits = tmp_path / "edits.json"
    edits.write_text(json.dumps({"snapshot": FILE, "edits": plain}))
    cli = subprocess.run([sys.executable, "-m", "budgeter", "plan-edits", str(edits)], capture_output=True, text=True)
    assert json.loads(cli.stdout) == client.plan_edits(plain, snapshot=FILE)
    page = tmp_path / "page.html"
    page.write_text("<!DOCTYPE html><html><title>About us</title></html>")
    cli = subprocess.run([sys.executable, "-m", "budgeter", "suggest-path", str(page)], capture_output=True, text=True)
    assert json.loads(cli.stdout) == client.suggest_path(page.read_text())


ESCAPES = ["../../etc/passwd", "/etc/passwd", "a/../../b", "~/.ssh/authorized_keys", "a\0b", "C:\\x", "\\\\srv\\x"]


def test_validate_refuses_paths_that_leave_the_workspace(client):
    for path in ESCAPES:
        v = client.validate_tool_call(tc("p", {"path": path, "content": "x"}), tools=TOOLS)
        assert not v["runnable"], path
        assert [(p["code"], p["field"]) for p in v["problems"]] == [("UNSAFE_PATH", "path")], path
    assert client.validate_tool_call(tc("q", {"path": "src/../a.py", "content": "x"}), tools=TOOLS)["runnable"]


def test_a_session_root_lets_absolute_paths_inside_it_through(client, tmp_path):
    import json
    import subprocess
    import sys

    s = client.create_session(tools=TOOLS, path_root="/srv/ws")
    assert client.get_session(s.id)["policy"]["path_root"] == "/srv/ws"
    inside = tc("i", {"path": "/srv/ws/app/main.py", "content": "x"})
    assert s.validate_tool_call(inside)["runnable"]
    outside = s.validate_tool_call(tc("o", {"path": "/srv/wsx/main.py", "content": "x"}))
    assert [p["code"] for p in outside["problems"]] == ["UNSAFE_PATH"]
    assert "outside the root /srv/ws" in outside["problems"][0]["message"]
    appended = s.append([{"role": "user", "content": "go"}, {"role": "assistant", "content": "",
                                                            "tool_calls": [inside]}])
    appended = appended["messages"][1]["tool_calls"][0]
    assert appended["runnable"]  # the same verdict on append
    plan = s.plan_edits([{"start_line": 1, "end_line": 1, "body": "y\n"}], snapshot="x\n", path="/srv/ws/a.py")
    assert plan["ok"]
    with pytest.raises(ClientError) as e:
        s.plan_edits([{"start_line": 1, "end_line": 1, "body": "y\n"}], snapshot="x\n", path="/etc/passwd")
    assert (e.value.code, e.value.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_INPUT")
    with pytest.raises(ClientError) as e:
        client.create_session(tools=TOOLS, path_root="relative/ws")
    assert (e.value.code, e.value.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_INPUT")
    body = tmp_path / "call.json"
    body.write_text(json.dumps({"tool_call": inside, "tools": TOOLS, "policy": {"path_root": "/srv/ws"}}))
    cli = subprocess.run([sys.executable, "-m", "budgeter", "validate", str(body)], capture_output=True, text=True)
    assert cli.returncode == 0 and json.loads(cli.stdout)["runnable"], cli.stderr
    body.write_text(json.dumps({"tool_call": inside, "tools": TOOLS}))
    cli = subprocess.run([sys.executable, "-m", "budgeter", "validate", str(body)], capture_output=True, text=True)
    assert cli.returncode == 1 and json.loads(cli.stdout)["problems"][0]["code"] == "UNSAFE_PATH"


def test_a_lone_surrogate_escape_in_a_path_argument_is_answered_not_internal(client):
    """Found by tests/fuzz/test_mutations.py: the verdict's path (decoded from "\\ud800") and the
    problems naming it cannot be protobuf strings as they are; they come back escaped."""
    s = client.create_session(tools=TOOLS)
    args = '{"path": "a\\ud800.py", "\\udc00": "x", "content": "x"}'
    out = s.append([{"role": "user", "content": "write"}, call("w1", "write_file", args)])
    verdict = out["messages"][1]["tool_calls"][0]
    assert verdict["path"] == "a\ufffd.py" and verdict["status"] == "VALID"  # repaired as the server gets it
    checked = s.validate_tool_call(tc("w2", '{"path": "../\\ud800", "content": "x"}'))
    assert [p["code"] for p in checked["problems"]] == ["UNSAFE_PATH"]
    assert s.prompt().tokens > 0


def _nested_schema(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def test_tools_nested_past_the_limit_are_refused_and_those_within_it_check_calls(client):
    """A schema 99 objects deep made every call of its tool INTERNAL (the JSON Schema check
    overflowed the stack), and tools ~500 deep failed to be stored."""
    from budgeter.core.messages import TOOLS_DEPTH

    def tools(levels):
        return [{"type": "function", "function": {"name": "deep", "parameters": _nested_schema(levels)}}]

    deepest = (TOOLS_DEPTH - 4) // 2  # the array, the tool, its function and the top schema
    s = client.create_session(tools=tools(deepest))
    args = '{"a": ' * deepest + '"x"' + "}" * deepest
    out = s.append([{"role": "user", "content": "go"}, call("d1", "deep", args), result("d1", "ok")])
    assert out["messages"][1]["tool_calls"][0]["problems"] == []
    assert s.prompt().tokens > 0
    for levels in (deepest + 1, 99, 400):
        with pytest.raises(ClientError) as e:
            client.create_session(tools=tools(levels))
        assert (e.value.code, e.value.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "TOOLS_TOO_DEEP")


def test_arguments_nested_too_deep_are_a_verdict_not_an_internal_error(client):
    """Arguments nested ~990 levels parsed, and the encoder then overflowed: INTERNAL."""
    from budgeter.core.jsonargs import ARGUMENT_DEPTH

    s = client.create_session(tools=TOOLS)
    for k, levels in enumerate((ARGUMENT_DEPTH + 1, 985, 995)):
        args = '{"path": "a.py", "content": ' + '{"a": ' * (levels - 1) + "1" + "}" * levels
        out = s.append([{"role": "user", "content": "write"}, call(f"n{k}", "write_file", args),
                        result(f"n{k}", "written")])
        verdict = out["messages"][1]["tool_calls"][0]
        assert verdict["status"] == "INVALID" and "nested" in verdict["detail"], verdict
    assert s.prompt().tokens > 0
