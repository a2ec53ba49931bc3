import json
import subprocess
import sys

import pytest

from tests.bench.sessions import make_session


def run(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "budgeter", *args], input=stdin,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def body_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "body.json"
    path.write_text(json.dumps(make_session(2, chars=150_000)))
    return path


def _check(out, budget):
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    report = json.loads(out.stderr)
    assert report["tokens_after"] <= budget < report["tokens_before"]
    for m in result["messages"]:
        for c in m.get("tool_calls", ()):
            json.loads(c["function"]["arguments"])
    return result, report


def test_trim_with_default_tokenizer(body_file, tmp_path):
    out = run("trim", str(body_file), "--window", "16384", "--reserve", "1024",
              "--payloads", str(tmp_path / "p.json"), "--report", "-")
    _, report = _check(out, 15360)
    payloads = json.loads((tmp_path / "p.json").read_text())
    assert set(report["handles"]) == set(payloads)


def test_trim_with_shared_qwen3(body_file, qwen3_path):
    _check(run("trim", str(body_file), "--tokenizer", qwen3_path, "--window", "16384", "--reserve", "1024",
               "--report", "-"), 15360)


def test_trim_output_is_the_request_with_compacted_messages(body_file, tmp_path):
    """Every field trim did not change is kept, so the output can be posted as is; the report
    goes to --report FILE only."""
    body = {**json.loads(body_file.read_text()), "model": "local", "temperature": 0.2, "stream": True,
            "tool_choice": "auto", "max_tokens": 512}
    src = tmp_path / "request.json"
    src.write_text(json.dumps(body))
    out = run("trim", str(src), "--window", "16384", "--reserve", "1024", "--report", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert set(result) == set(body) and "report" not in result
    assert {k: v for k, v in result.items() if k != "messages"} == {k: v for k, v in body.items() if k != "messages"}
    assert len(result["messages"]) <= len(body["messages"])
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["tokens_after"] <= 15360 < report["tokens_before"] and report["tokenizer"] == "qwen3.6"


def test_errors_say_what_was_given_and_what_to_do():
    out = run("trim", "-", "--window", "100", stdin='{"messages": [{"role": "user", "content": "x"}]}')
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--reserve 2048 (the default)" in out.stderr and "--window 100" in out.stderr
    bare = {"id": "a", "type": "function", "function": {"name": "write_file", "arguments": '{"path": "a"}'}}
    out = run("validate", "-", stdin=json.dumps(bare))  # a bare tool call, as the model sent it
    assert out.returncode == 0 and json.loads(out.stdout)["status"] == "VALID"
    comma = {**bare, "function": {"name": "write_file", "arguments": '{"path": "a", "content": "b",}'}}
    out = run("validate", "-", stdin=json.dumps(comma))
    detail = json.loads(out.stdout)["detail"]
    assert out.returncode == 1 and "trailing comma" in detail and "character 29" in detail
    out = run("validate", "-", stdin='{"call": {"name": "x"}}')
    assert out.returncode == 2 and "keys ['call']" in out.stderr and '"function"' in out.stderr
    schema: dict = {"type": "string"}
    for _ in range(40):
        schema = {"type": "object", "properties": {"a": schema}}
    deep = {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {
        "name": "d", "parameters": schema}}]}
    out = run("trim", "-", stdin=json.dumps(deep))  # as the proxy's fit and CreateSession refuse them
    assert out.returncode == 2 and out.stderr.startswith("budgeter: TOOLS_TOO_DEEP: tools nest more than 64")


def test_no_pytorch_advice_and_a_version():
    from importlib.metadata import version

    out = run("tokenizers")
    assert out.returncode == 0 and "qwen3.6" in out.stdout
    out = run("trim", "-", stdin='{"messages": [{"role": "user", "content": "x"}]}')
    assert out.returncode == 0 and out.stderr == "", out.stderr  # transformers was imported: no advice
    out = run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"budgeter {version('budgeter')}"


def test_serve_help_shows_the_defaults():
    import os

    from budgeter.settings import Settings

    out = subprocess.run([sys.executable, "-m", "budgeter", "serve", "--help"], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    defaults = Settings.model_fields
    for flag, field in (("--host", "host"), ("--port", "port"), ("--metrics-port", "metrics_port"),
                        ("--default-tokenizer", "default_tokenizer")):
        line = next(ln for ln in out.stdout.splitlines() if f"{flag} " in ln)
        assert f"[default: ({defaults[field].default})]" in line, line
    assert "[default: (SQLite at DATA_DIR/budgeter.db)]" in text


@pytest.mark.parametrize("args, reason", [
    (["trim", "/no/such.json"], "INPUT_UNREADABLE"),
    (["trim", "-"], "INVALID_JSON"),
    (["trim", "-", "--tokenizer", "nope"], "UNKNOWN_TOKENIZER"),
])
def test_bad_input_is_a_clear_error(args, reason):
    stdin = "{bad" if reason == "INVALID_JSON" else '{"messages": [{"role": "user", "content": "x"}]}'
    out = run(*args, stdin=stdin)
    assert out.returncode == 2 and reason in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("stdin", ["[]", '{"messages": []}'])
def test_trim_of_no_messages_is_a_one_line_error(stdin):
    out = run("trim", "-", stdin=stdin)
    assert out.returncode == 2 and out.stderr == "budgeter: INVALID_INPUT: messages must not be empty\n"


def test_invalid_role_names_the_field():
    out = run("trim", "-", stdin='{"messages": [{"role": "robot", "content": "x"}]}')
    assert out.returncode == 2 and "messages[0].role" in out.stderr


def test_file_tool_flags_name_custom_tools(tmp_path):
    def call(cid, name, args):
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}

    source = "def handler(event):\n    return event['body']\n" * 80
    messages = [{"role": "system", "content": "agent"}, {"role": "user", "content": "fix a.py"},
                call("c1", "cat", {"path": "a.py"}),
                {"role": "tool", "tool_call_id": "c1", "content": source},
                call("c2", "save", {"path": "a.py", "body": source.replace("body", "data")}),
                {"role": "tool", "tool_call_id": "c2", "content": "saved"}]
    messages += [{"role": "user", "content": f"step {i} " + "words " * 300} for i in range(4)]
    body = tmp_path / "b.json"
    body.write_text(json.dumps({"messages": messages}))

    def stale_steps(*flags):
        out = run("trim", str(body), "--window", "3000", "--reserve", "200", "--protect-tail", "1",
                  "--report", "-", *flags)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stderr)
        assert report["tokens_after"] <= 2800
        return [s for s in report["steps"] if s["step"] == "supersede_snapshots"]

    assert stale_steps() == []
    named = stale_steps("--reads", "cat", "--writes", "save")
    assert [a["index"] for a in named[0]["actions"]] == [3]
    out = run("trim", str(body), "--shrink-min-chars", "10")
    assert out.returncode == 2 and "INVALID_INPUT" in out.stderr and "shrink_min_chars" in out.stderr


@pytest.mark.parametrize("args, reason", [
    (["--store", "ftp://nowhere"], "INVALID_INPUT"),
    (["--port", "70000"], "INVALID_SETTINGS"),
    (["-t", "broken"], "INVALID_SETTINGS"),
    (["--default-tokenizer", "gemma-9"], "UNKNOWN_TOKENIZER"),
    (["--chat-format", "qwen3.6=gemma-3"], "unknown chat format 'gemma-3'; known: chatml, qwen3.6"),
    (["--chat-format", "nosuch=chatml"], "UNKNOWN_TOKENIZER"),
])
def test_serve_rejects_bad_settings(args, reason, tmp_path):
    out = run("serve", "--metrics-port", "0", "--data-dir", str(tmp_path), *args)
    assert out.returncode == 2 and reason in out.stderr and "Traceback" not in out.stderr


def test_guard_rail_commands(tmp_path):
    from tests.core.test_edits import EDITS, FILE, expected_file
    from tests.service.agent import TOOLS

    cut = {"tool_call": {"id": "a", "type": "function", "function": {
        "name": "write_file", "arguments": '{"path": "a.html", "content": "<ht'}},
        "tools": TOOLS, "finish_reason": "length"}
    out = run("validate", "-", stdin=json.dumps(cut))
    assert out.returncode == 1 and json.loads(out.stdout)["status"] == "TRUNCATED"
    ok = {"tool_call": {"function": {"name": "write_file", "arguments": {"path": "a", "content": "b"}}},
          "tools": TOOLS}
    out = run("validate", "-", stdin=json.dumps(ok))
    assert out.returncode == 0 and json.loads(out.stdout)["runnable"] is True
    out = run("suggest-path", "-", "--html-pages-seen", "1", stdin="<!DOCTYPE html><title>Team Page</title>")
    assert out.returncode == 0 and json.loads(out.stdout)["path"] == "team-page.html"
    edits = {"snapshot": FILE, "edits": [{"start_line": e.start_line, "end_line": e.end_line,
                                          "body": e.body} for e in EDITS]}
    (tmp_path / "edits.json").write_text(json.dumps(edits))
    out = run("plan-edits", str(tmp_path / "edits.json"), "--output", str(tmp_path / "new.py"))
    assert out.returncode == 0 and (tmp_path / "new.py").read_text() == expected_file()
    out = run("plan-edits", "-", stdin='{"snapshot": "a", "edits": []}')
    assert out.returncode == 2 and "INVALID_INPUT" in out.stderr


def test_plan_edits_writes_nothing_unless_every_edit_applied(tmp_path):
    from tests.core.test_edits import EDITS, FILE

    newer = tmp_path / "app.py"
    newer.write_text("newer work, not to be overwritten\n")
    edits = [{"start_line": e.start_line, "end_line": e.end_line, "body": e.body} for e in EDITS]
    edits.append({"start_line": 10_000, "end_line": 10_001, "body": "x"})  # out of bounds
    (tmp_path / "edits.json").write_text(json.dumps({"snapshot": FILE, "edits": edits}))
    out = run("plan-edits", str(tmp_path / "edits.json"), "--output", str(newer))
    assert out.returncode == 1 and json.loads(out.stdout)["ok"] is False
    assert newer.read_text() == "newer work, not to be overwritten\n"
    out = run("plan-edits", str(tmp_path / "edits.json"), "--output", str(tmp_path / "absent.py"))
    assert out.returncode == 1 and not (tmp_path / "absent.py").exists()


def test_readme_trim_examples_run_as_written(body_file, tmp_path):
    """The README's `budgeter trim` block, line by line in a shell (lines needing ../shared skip)."""
    import re
    import shutil
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("## `budgeter trim`")[1].split("```bash\n")[1].split("```")[0]
    body = {**json.loads(body_file.read_text()), "model": "local", "temperature": 0.2}
    (tmp_path / "request.json").write_text(json.dumps(body))
    bindir = Path(sys.executable).parent
    assert shutil.which("budgeter", path=str(bindir)), "the budgeter script is installed beside python"
    ran = 0
    for line in block.splitlines():
        command = line.split("  #")[0].strip()
        if not command or "../shared" in command:
            continue
        out = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                             env={"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path)})
        assert out.returncode == 0 and "Traceback" not in out.stderr, (command, out.stderr)
        ran += 1
        if re.search(r"> trimmed.json$", command):
            trimmed = json.loads((tmp_path / "trimmed.json").read_text())
            assert trimmed["model"] == "local" and trimmed["temperature"] == 0.2 and "report" not in trimmed
    assert ran >= 4 and json.loads((tmp_path / "report.json").read_text())["tokens_after"] > 0


def test_trim_leaves_the_missions_failed_writes_as_one_short_stub(tmp_path):
    """Three identical empty-path writes of 7K chars, each answered by a message that starts with
    the tool's name: `budgeter trim` prints one short stub naming its evidence, and --payloads
    holds the content by the handle the stub shows."""
    from tests.core.test_evidence import PAGE, WRITE_TOOLS, mission

    src = tmp_path / "mission.json"
    src.write_text(json.dumps({"messages": mission(), "tools": WRITE_TOOLS}))
    out = run("trim", str(src), "--payloads", str(tmp_path / "p.json"), "--report", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    messages = json.loads(out.stdout)["messages"]
    stubs = [m["content"] for m in messages if "budgeter:failed" in (m["content"] or "")]
    assert len(stubs) == 1 and "x3" in stubs[0] and "why=verdict" in stubs[0] and len(stubs[0]) < 400
    args = [json.loads(c["function"]["arguments"]) for m in messages for c in m.get("tool_calls") or ()]
    assert len(args) == 1 and args[0]["content"] != PAGE
    assert PAGE in json.loads((tmp_path / "p.json").read_text()).values()


def test_trim_prints_the_request_it_counted_where_the_template_needs_a_rewrite(body_file, tmp_path):
    """Gemma 3's template takes no tool role and requires alternating turns: trim counts the
    rewrite and must print that rewrite (it printed the original roles, which a server refuses),
    so counting its output again gives the same total."""
    profile = ("--tokenizer", "qwen2.5", "--chat-format", "gemma3")
    out = run("trim", str(body_file), *profile, "--window", "16384", "--reserve", "1024", "--report",
              str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    roles = [m["role"] for m in result["messages"]]
    assert "tool" not in roles and "tools" not in result
    turns = roles[1:] if roles[0] == "system" else roles
    assert all(a != b for a, b in zip(turns, turns[1:], strict=False)), roles
    (tmp_path / "out.json").write_text(out.stdout)
    again = run("render", str(tmp_path / "out.json"), *profile)
    report = json.loads((tmp_path / "r.json").read_text())
    assert f": {report['tokens_after']} tokens" in again.stderr.splitlines()[0]


LONE = ('{"messages": [{"role": "user", "content": "half \\ud800 of a pair"}, {"role": "assistant", '
        '"content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "write_file", '
        '"arguments": "{\\"path\\":\\"a\\\\ud800.txt\\"}"}}]}, {"role": "tool", "tool_call_id": "c1", '
        '"content": "written"}, {"role": "user", "content": "go"}]}')
"""A lone surrogate escaped in content, and escaped once more inside a call's arguments (compact:
a repair serializes the arguments again, compactly)."""
WARNING = ("budgeter: warning: 2 lone surrogates replaced with U+FFFD: messages[0].content (1), "
           "messages[1].tool_calls[0].function.arguments of call 'c1' (1)\n")


@pytest.mark.parametrize("command", ["trim", "render"])
def test_lone_surrogates_give_the_output_of_u_fffd_and_one_warning(command):
    """Issue 55, item 4: the output is what the same request with U+FFFD in their place gives, in
    valid UTF-8, and stderr says in one line where they were and how many."""
    def run_bytes(stdin: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "budgeter", command, "-"], input=stdin.encode(),
                              capture_output=True, timeout=300)

    out = run_bytes(LONE)
    assert out.returncode == 0, out.stderr
    assert out.stderr.decode().startswith(WARNING) and WARNING not in out.stderr.decode()[len(WARNING):]
    replaced = run_bytes(LONE.replace("\\\\ud800", "\ufffd").replace("\\ud800", "\ufffd"))
    assert replaced.returncode == 0 and "lone surrogate" not in replaced.stderr.decode()
    assert out.stdout == replaced.stdout and "\ufffd" in out.stdout.decode("utf-8")


def test_profile_warns_of_lone_surrogates_once(tmp_path):
    (tmp_path / "s.json").write_text(LONE)
    out = run("profile", str(tmp_path / "s.json"), "--json")
    assert out.returncode == 0, out.stderr
    assert out.stderr == WARNING and len(json.loads(out.stdout)["messages"]) == 4
