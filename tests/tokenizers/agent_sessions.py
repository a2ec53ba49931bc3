"""Sessions for exactness tests: coding-agent traffic plus the shapes that break counters.

``session(seed, chars)`` adds to ``tests/bench/sessions.make_session`` (reads, edits, greps,
tracebacks, failed write_file retries, CJK, emoji): an assistant turn with reasoning and two
parallel calls, arguments holding nested objects, numbers, booleans, quotes, newlines and
non-ASCII, a user turn in Chinese with emoji, and a tool result in Japanese. Tool calls whose
arguments were cut mid-string are kept only with ``truncated=True``: real servers refuse them
(llama.cpp: HTTP 500 "Failed to parse tool call arguments as JSON").
"""

from __future__ import annotations

import json
from typing import Any

from budgeter.core.messages import Message, from_openai_list
from tests.bench.sessions import make_session


def _parses(call: dict[str, Any]) -> bool:
    try:
        return isinstance(json.loads(call["function"]["arguments"]), dict)
    except ValueError:
        return False


def _drop_truncated(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    bad = {c["id"] for m in messages for c in m.get("tool_calls", ()) if not _parses(c)}
    out = []
    for m in messages:
        if m.get("tool_call_id") in bad or any(c["id"] in bad for c in m.get("tool_calls", ())):
            continue
        out.append({k: v for k, v in m.items() if k != "finish_reason"})
    return out


EXTRA: list[dict[str, Any]] = [
    {"role": "user", "content": "请把上下文窗口的预算再检查一遍 🧮🚀, and keep `README.md` in sync."},
    {"role": "assistant", "content": "Checking both files.",
     "reasoning_content": "I should read the config and the README together.\n计划: 先读后写 ✅",
     "tool_calls": [
         {"id": "call_x1", "type": "function", "function": {"name": "read_file", "arguments": json.dumps(
             {"path": "config/budget.json", "start_line": 1})}},
         {"id": "call_x2", "type": "function", "function": {"name": "edit_file", "arguments": json.dumps(
             {"path": "README.md", "old_string": "say \"hi\"\n\tthen", "new_string": "説明: 予算 → 😀",
              "options": {"dry_run": False, "limits": [1, 2.5, None]}}, ensure_ascii=False)}}]},
    {"role": "tool", "tool_call_id": "call_x1", "content": '{"window": 32768, "reserve": 2048}'},
    {"role": "tool", "tool_call_id": "call_x2", "content": "エラー: old_string が見つかりません (0 matches) ❌"},
]


def session_dicts(seed: int = 1, *, chars: int = 30_000, truncated: bool = False) -> tuple[list[dict], list]:
    body = make_session(seed, chars=chars)
    messages = body["messages"] if truncated else _drop_truncated(body["messages"])
    cut = min(len(messages), 6)
    while messages[cut - 1]["role"] == "assistant":  # insert after a complete turn
        cut += 1
    return [*messages[:cut], *EXTRA, *messages[cut:]], body["tools"]


def session(seed: int = 1, *, chars: int = 30_000, truncated: bool = False) -> tuple[list[Message], list]:
    messages, tools = session_dicts(seed, chars=chars, truncated=truncated)
    return from_openai_list(messages), tools
