"""A recorded-style agent transcript for service tests: tool calls, a failure and retries,
bulky outputs, and a write cut by finish_reason=length."""

from __future__ import annotations

import json

TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "write_file", "description": "Write a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                        "content": {"type": "string"}},
                       "required": ["path", "content"]}}},
]


def call(cid: str, name: str, args: dict | str, **extra) -> dict:
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return {"role": "assistant", "content": "", **extra,
            "tool_calls": [{"id": cid, "type": "function",
                            "function": {"name": name, "arguments": text}}]}


def result(cid: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": content}


def turns(n: int, *, bulk: int = 6000) -> list[list[dict]]:
    """n agent turns, each a list of messages to append together."""
    out: list[list[dict]] = [[{"role": "system", "content": "You are a coding agent."},
                              {"role": "user", "content": "Build the site. 上下文 ✓"}]]
    page = "<!DOCTYPE html><html><body>" + "<p>lorem ipsum dolor</p>\n" * (bulk // 24) + "</body></html>"
    for i in range(n):
        if i % 3 == 0:
            out.append([call(f"w{i}", "write_file", {"path": "", "content": page}),
                        result(f"w{i}", "Error: path must not be empty")])
        elif i % 3 == 1:
            out.append([call(f"r{i}", "read_file", {"path": f"src/mod{i}.py"}),
                        result(f"r{i}", f"# module {i}\n" + "def f(x):\n    return x * 2\n" * (bulk // 30))])
        else:
            out.append([call(f"t{i}", "write_file", '{"path": "a.html", "content": "<html', finish_reason="length"),
                        result(f"t{i}", "Error: arguments were cut"),
                        {"role": "user", "content": f"Continue with step {i}."}])
    return out
