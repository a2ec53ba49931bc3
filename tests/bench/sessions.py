"""Deterministic, realistic coding-agent sessions for tests and benchmarks.

Each session has a system prompt and a task, then turns of: file reads (re-read after edits),
edits, large grep outputs, failing commands with long tracebacks, failed ``write_file`` calls of
5,677-8,281 chars with an empty path retried 2-3 times with the same payload, arguments cut
mid-string (``finish_reason=length``), short user follow-ups, CJK text and emoji.
"""

from __future__ import annotations

import json
import random
from typing import Any

TOOLS = [
    {"type": "function", "function": {"name": name, "description": desc, "parameters": {
        "type": "object", "properties": {k: {"type": t} for k, t in props.items()},
        "required": list(props)[:1]}}}
    for name, desc, props in [
        ("read_file", "Read a file from the workspace", {"path": "string", "start_line": "integer"}),
        ("write_file", "Write a file", {"path": "string", "content": "string"}),
        ("edit_file", "Replace text in a file", {"path": "string", "old_string": "string",
                                                  "new_string": "string"}),
        ("run_command", "Run a shell command", {"command": "string"}),
        ("grep", "Search files", {"pattern": "string", "path": "string"}),
    ]
]

WORDS = ("state value render token window budget agent prompt session handle message count "
         "parse shrink digest stub retry error result schema config cache replica").split()
CJK = "上下文窗口预算令牌计数压缩会话消息工具调用结果错误重试"


def _code(rng: random.Random, lines: int) -> str:
    out = []
    for i in range(lines):
        w = rng.sample(WORDS, 3)
        kind = rng.random()
        if kind < 0.15:
            out.append(f"def {w[0]}_{w[1]}({w[2]}: int, *, {w[0]}: str = '{w[1]}') -> dict:")
        elif kind < 0.25:
            out.append(f"    # {w[0]} {w[1]} {w[2]}: {''.join(rng.sample(CJK, 4))} ✅")
        elif kind < 0.4:
            out.append(f"    return {{'{w[0]}': {w[1]}, '{w[2]}': [{i}, {i * 7 % 13}]}}")
        else:
            out.append(f"    {w[0]}_{w[1]} = {w[2]}.get('{w[0]}', {rng.randint(0, 9999)})")
    return "\n".join(out) + "\n"


def _html(rng: random.Random, chars: int, title: str) -> str:
    body = [f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{title}</title>\n<link rel=\"stylesheet\" href=\"styles.css\">\n</head>\n<body>\n"]
    while sum(map(len, body)) < chars - 20:
        w = rng.sample(WORDS, 4)
        body.append(f"  <section class=\"{w[0]}\"><h2>{w[1].title()} {w[2]}</h2>"
                    f"<p>The {w[3]} {w[0]} keeps the {w[1]} within its {w[2]}.</p></section>\n")
    text = "".join(body) + "</body>\n</html>\n"
    return text[:chars]


def _traceback(rng: random.Random, frames: int) -> str:
    lines = ["Traceback (most recent call last):"]
    for _ in range(frames):
        w = rng.sample(WORDS, 2)
        lines += [f'  File "/work/app/{w[0]}/{w[1]}.py", line {rng.randint(1, 900)}, in {w[0]}_{w[1]}',
                  f"    {w[1]} = compute_{w[0]}({w[1]})"]
    lines.append("KeyError: 'budget'\nexit code: 1")
    return "\n".join(lines)


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.messages: list[dict[str, Any]] = []
        self.n = 0
        self.files: dict[str, str] = {}

    def call(self, name: str, args: dict[str, Any] | str, result: str, *,
             finish_reason: str | None = None, content: str = "") -> None:
        self.n += 1
        cid = f"call_{self.n}"
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        msg: dict[str, Any] = {"role": "assistant", "content": content, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": text}}]}
        if finish_reason:
            msg["finish_reason"] = finish_reason
        self.messages.append(msg)
        self.messages.append({"role": "tool", "tool_call_id": cid, "content": result})

    def turn(self) -> None:
        rng = self.rng
        r = rng.random()
        if r < 0.30:
            path = f"src/{rng.choice(WORDS)}.py"
            text = self.files.setdefault(path, _code(rng, rng.randint(40, 160)))
            self.call("read_file", {"path": path}, text)
        elif r < 0.42 and self.files:
            path = rng.choice(sorted(self.files))
            self.call("edit_file", {"path": path, "old_string": "return", "new_string": "yield"},
                      f"edited {path}: 1 replacement")
            self.files[path] = self.files[path].replace("return", "yield", 1)
            self.call("read_file", {"path": path}, self.files[path])
        elif r < 0.52:
            hits = "\n".join(f"src/{rng.choice(WORDS)}.py:{rng.randint(1, 400)}: {_code(rng, 1).strip()}"
                             for _ in range(rng.randint(60, 220)))
            self.call("grep", {"pattern": rng.choice(WORDS), "path": "src"}, hits)
        elif r < 0.64:
            self.call("run_command", {"command": "python -m pytest -x"}, _traceback(rng, rng.randint(8, 40)))
        elif r < 0.76:
            html = _html(rng, rng.randint(5677, 8281), f"{rng.choice(WORDS).title()} page")
            for _ in range(rng.randint(2, 3)):
                self.call("write_file", {"path": "", "content": html},
                          "rejected: path must not be empty")
        elif r < 0.84:
            html = _html(rng, rng.randint(5677, 8281), "Cut page")
            full = json.dumps({"path": "site/cut.html", "content": html}, ensure_ascii=False)
            self.call("write_file", full[: rng.randint(len(full) // 3, len(full) - 10)],
                      "error: arguments are not valid JSON", finish_reason="length")
        elif r < 0.92:
            self.messages.append({"role": "user", "content": f"Please also handle the {rng.choice(WORDS)} "
                                  f"case ({''.join(rng.sample(CJK, 3))}) 🙏"})
        else:
            path = f"site/{rng.choice(WORDS)}.css"
            self.call("write_file", {"path": path, "content": f"/* {path} */\n:root {{ --w: 1; }}\n"},
                      f"wrote {path}")


def make_session(seed: int = 0, *, chars: int = 120_000) -> dict[str, Any]:
    """A chat-completions body of about ``chars`` characters."""
    b = _Builder(seed)
    b.messages.append({"role": "system", "content": "You are a careful coding agent. Use the tools."})
    b.messages.append({"role": "user", "content": "Build a small static site with a landing page, "
                       "styles and a script, and make the tests pass."})
    while sum(len(json.dumps(m, ensure_ascii=False)) for m in b.messages) < chars:
        b.turn()
    if b.messages[-1]["role"] != "tool":
        b.call("read_file", {"path": "README.md"}, "# site\n")
    return {"messages": b.messages, "tools": TOOLS}
