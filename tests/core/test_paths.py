"""Path confinement: a path argument that leaves the workspace (or the policy's root) is an
UNSAFE_PATH problem, never runnable, and never evidence that the call failed."""

from __future__ import annotations

import json

import pytest

from budgeter.core import sniff
from budgeter.core.classify import Evidence, ResultStatus
from budgeter.core.facts import History
from budgeter.core.guards import validate_tool_call
from budgeter.core.messages import ToolCall, from_openai_list
from budgeter.core.paths import path_problem, safe_path
from budgeter.core.policy import FileTools, Policy, policy_from_dict
from budgeter.errors import InvalidInput
from tests.core.test_guards import TOOLS

ESCAPING = ["../../etc/passwd", "/etc/passwd", "a/../../b", "..", "~/.ssh/authorized_keys", "~root/x",
            "a\0b", "C:\\Windows\\x", "C:/x", "c:x", "\\\\server\\share\\x", "//server/share",
            "a\\..\\..\\b", "\\etc\\passwd", ".", "./", "a/..", ""]
ALLOWED = ["src/a.py", "./a.py", "a/../b.py", "a.py", "dir/", ".hidden", "a..b/c", "x/./y.txt"]


def verdict(args, name="write_file", tools=TOOLS, **kw):
    return validate_tool_call(ToolCall("c1", name, json.dumps(args)), tools, **kw)


@pytest.mark.parametrize("path", ESCAPING)
def test_each_escaping_form_is_unsafe(path):
    assert path_problem(path) and not safe_path(path)
    v = verdict({"path": path, "content": "x"}, tools=())
    assert not v.runnable and [(p.code, p.field) for p in v.problems] == [("UNSAFE_PATH", "path")]


@pytest.mark.parametrize("path", ALLOWED)
def test_relative_paths_that_stay_inside_are_runnable(path):
    assert path_problem(path) == "" and safe_path(path)
    assert verdict({"path": path, "content": "x"}).runnable


def test_the_message_says_why():
    messages = {p: verdict({"path": p, "content": "x"}, tools=()).problems[0].message
                for p in ("/etc/passwd", "a/../../b", "~/.ssh/k", "a\0b", "C:/x", "\\\\srv\\x", ".")}
    assert "is absolute" in messages["/etc/passwd"] and ".." in messages["a/../../b"]
    assert "~" in messages["~/.ssh/k"] and "NUL" in messages["a\0b"]
    assert "drive" in messages["C:/x"] and "UNC" in messages["\\\\srv\\x"]
    assert "directory" in messages["."]
    assert all("inside the workspace" in m for m in messages.values())


def test_a_root_allows_absolute_paths_inside_it_and_nothing_outside():
    policy = Policy(path_root="/work/ws/")
    inside = ["/work/ws/a.py", "/work/ws/src/../b.py", "src/a.py", "../ws/a.py"]
    outside = ["/work/wsx/a.py", "/etc/passwd", "/work/ws/../x", "../x", "~/x", "C:/x", "a\0b",
               "/work/ws", "."]
    for p in inside:
        assert verdict({"path": p, "content": "x"}, policy=policy).runnable, p
    for p in outside:
        v = verdict({"path": p, "content": "x"}, policy=policy)
        assert [pr.code for pr in v.problems] == ["UNSAFE_PATH"], p
    assert "outside the root /work/ws" in verdict({"path": "/etc/passwd", "content": "x"},
                                                   policy=policy).problems[0].message
    assert path_problem("/", root="/", file=False) == "" and path_problem("/etc/x", root="/") == ""


def test_the_root_is_a_policy_field_checked_like_the_others():
    assert policy_from_dict({"path_root": "/srv/ws"}).path_root == "/srv/ws"
    for bad in ("ws", 5, "/a\0"):
        with pytest.raises(InvalidInput) as e:
            policy_from_dict({"path_root": bad})
        assert e.value.field == "policy.path_root"


def test_path_arguments_by_name_at_any_depth():
    edits = {"edits": [{"file_path": "ok.py", "old_string": "a", "new_string": "b"},
                       {"file_path": "../x.py", "old_string": "a", "new_string": "b"}]}
    assert [(p.code, p.field) for p in verdict(edits, name="multi_edit", tools=()).problems] == [
        ("UNSAFE_PATH", "edits[1].file_path")]
    for key in ("target_file", "dest", "destination", "source", "src", "old_path", "filename",
                "filePath", "targetFile"):
        v = verdict({key: "/etc/x", "content": "y"}, name="move_file", tools=())
        assert [(p.code, p.field) for p in v.problems] == [("UNSAFE_PATH", key)], key
    many = verdict({"paths": ["a.py", "/b.py"]}, name="read_many", tools=())
    assert [p.field for p in many.problems] == ["paths[1]"]


def test_directories_may_be_the_workspace_but_not_leave_it():
    for key in ("cwd", "dir", "directory"):
        assert verdict({"command": "ls", key: "."}, name="bash", tools=()).runnable
        assert verdict({"command": "ls", key: ""}, name="bash", tools=()).runnable
        v = verdict({"command": "ls", key: "../.."}, name="bash", tools=())
        assert [(p.code, p.field) for p in v.problems] == [("UNSAFE_PATH", key)]
    assert verdict({"path": "."}, name="list_dir", tools=()).runnable  # a directory, not a file
    assert not verdict({"path": "."}, name="read_file", tools=()).runnable


def test_only_calls_that_touch_something_are_checked_and_content_is_not_a_path():
    assert verdict({"path": "/v1/users"}, name="weather_api", tools=()).runnable  # CallKind.OTHER
    copy = {"src": "a.txt", "dest": "/etc/cron.d/x"}
    assert verdict(copy, name="copy_file", tools=()).runnable  # OTHER too, unless configured:
    named = Policy(file_tools=FileTools(writes=frozenset({"copy_file"})))
    assert not verdict(copy, name="copy_file", tools=(), policy=named).runnable
    assert verdict({"path": "a.md", "content": "see /etc/passwd and ../x"}, tools=()).runnable


def test_an_empty_required_path_is_named_once():
    v = verdict({"path": "", "content": "x"})
    assert [(p.code, p.field) for p in v.problems] == [("EMPTY_REQUIRED", "path")]


def test_one_rule_for_verdicts_rescued_paths_and_plan_edits():
    assert sniff.safe_path is safe_path  # (sessions/guards.py's PlanEdits uses path_problem)


def test_an_unsafe_path_is_no_evidence_that_the_call_failed():
    """A runtime that ignored the verdict ran the write, and it worked: not shown as failed."""
    raw = [{"role": "user", "content": "go"},
           {"role": "assistant", "content": "", "tool_calls": [
               {"id": "w", "type": "function", "function": {
                   "name": "write_file", "arguments": json.dumps({"path": "/tmp/out.txt", "content": "x"})}}]},
           {"role": "tool", "tool_call_id": "w", "content": "wrote /tmp/out.txt (1 chars)"}]
    log = History(Policy(), TOOLS)
    log.extend(from_openai_list(raw))
    cf = log.call((1, 0))
    assert not cf.verdict.runnable and [p.code for p in cf.verdict.problems] == ["UNSAFE_PATH"]
    assert not cf.not_runnable and log.failed_by == {}
    assert log.facts[2].result is ResultStatus.OK and log.facts[2].evidence is None
    failed = History(Policy(), TOOLS)  # the same call's declared failure is still a failure
    failed.extend(from_openai_list([*raw[:2], {**raw[2], "status": "error"}]))
    assert failed.failed_by == {(1, 0): Evidence.DECLARED}
